"""Property test of the OpenAI server: requests generated from its OpenAPI schema (valid and
schema-violating, every route) never get a 5xx and never break the engine; neither do
requests with Unicode edge cases in their text and templates of their own, with and without
--trust-request-chat-template (server_fuzz.py says what each must get).

The CI run sends a couple of hundred; benchmarks/server_fuzz.py runs the same fuzzer for
thousands.
"""

from __future__ import annotations

import pytest
from server_fuzz import FUZZ_ENGINE, engine_still_serves, fuzz, fuzz_hostile_text
from server_helpers import start_farm

CI_EXAMPLES = 200
CI_HOSTILE_EXAMPLES = 60


@pytest.fixture(scope="module")
def fuzzed_farm(server_farm):
    farm = start_farm(server_farm.model_dir, **FUZZ_ENGINE)
    yield farm
    farm.stop()


@pytest.fixture(scope="module")
def fuzzed(fuzzed_farm):
    return fuzzed_farm.server()


@pytest.mark.slow  # a couple of hundred generated requests
def test_generated_requests_get_no_server_error(fuzzed):
    report = fuzz(fuzzed, CI_EXAMPLES)
    assert report.server_errors == []
    assert report.requests > CI_EXAMPLES // 2
    assert engine_still_serves(fuzzed)


@pytest.mark.parametrize("trusts_templates", [False, True], ids=["default", "trusting"])
def test_unicode_edge_cases_and_request_templates_get_no_server_error(
    fuzzed_farm, trusts_templates
):
    server = fuzzed_farm.server(trust_request_chat_template=trusts_templates)
    report = fuzz_hostile_text(server, CI_HOSTILE_EXAMPLES, trusts_templates)
    assert report.server_errors == []
    assert report.statuses[400] > 0 and report.statuses[200] > 0
    assert engine_still_serves(server)
