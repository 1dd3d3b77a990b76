"""Property test of the OpenAI server: requests generated from its OpenAPI schema (valid and
schema-violating, every route) never get a 5xx and never break the engine.

The CI run sends a couple of hundred; benchmarks/server_fuzz.py runs the same fuzzer for
thousands.
"""

from __future__ import annotations

import pytest
from server_fuzz import FUZZ_ENGINE, engine_still_serves, fuzz
from server_helpers import start_farm

CI_EXAMPLES = 200


@pytest.fixture(scope="module")
def fuzzed(server_farm):
    farm = start_farm(server_farm.model_dir, **FUZZ_ENGINE)
    yield farm.server()
    farm.stop()


def test_generated_requests_get_no_server_error(fuzzed):
    report = fuzz(fuzzed, CI_EXAMPLES)
    assert report.server_errors == []
    assert report.requests > CI_EXAMPLES // 2
    assert engine_still_serves(fuzzed)
