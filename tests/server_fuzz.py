"""Fuzzing the OpenAI server from its own OpenAPI schema with schemathesis (hypothesis).

Shared by the CI test (a few hundred requests) and benchmarks/server_fuzz.py (thousands):
requests are generated for every route, both schema-valid ones (they must be served or
refused with a 4xx) and schema-violating ones (they must be refused with a 4xx); no request
may get a 5xx, and the engine must still serve a plain request afterwards with every KV
block free.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import httpx2 as httpx
import schemathesis
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import seed as hypothesis_seed
from server_helpers import LiveServer, wait_until

FUZZ_ENGINE = {"max_model_len": 128, "num_blocks": 64, "max_num_seqs": 16}
"""The fuzzed engine is kept small so that a generated max_tokens or n stays cheap."""


@dataclass
class FuzzReport:
    """What a fuzz run sent and got back."""

    statuses: Counter[int] = field(default_factory=Counter)
    server_errors: list[str] = field(default_factory=list)

    @property
    def requests(self) -> int:
        """Number of requests sent."""
        return sum(self.statuses.values())


def fuzz(server: LiveServer, examples: int, seed: int = 0) -> FuzzReport:
    """Send `examples` generated requests (valid and invalid, all routes) to `server`."""
    openapi = httpx.get(server.url + "/openapi.json").json()
    schema = schemathesis.openapi.from_dict(openapi)
    strategy = schema.as_strategy() | schema.as_strategy(
        generation_mode=schemathesis.GenerationMode.NEGATIVE
    )
    report = FuzzReport()

    @settings(
        max_examples=examples,
        deadline=None,
        database=None,
        phases=[Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
    @hypothesis_seed(seed)
    @given(case=strategy)
    def send(case: Any) -> None:
        response = case.call(base_url=server.url, timeout=120)
        report.statuses[response.status_code] += 1
        if response.status_code >= 500:
            report.server_errors.append(
                f"{case.method} {case.path} body={case.body!r}: "
                f"{response.status_code} {response.text[:300]}"
            )

    send()
    return report


def engine_still_serves(server: LiveServer) -> bool:
    """A plain completion works and, once it is done, no KV block is in use."""
    reply = httpx.post(
        server.url + "/v1/completions",
        json={"prompt": "Hello", "max_tokens": 4},
        timeout=60,
    )
    engine = server.ctx.engine.engine
    return reply.status_code == 200 and wait_until(
        lambda: not engine.has_unfinished and engine.block_manager.num_used_blocks == 0
    )
