"""Fuzzing the OpenAI server from its own OpenAPI schema with schemathesis (hypothesis).

Shared by the CI test (a few hundred requests) and benchmarks/server_fuzz.py (thousands):
requests are generated for every route, both schema-valid ones (they must be served or
refused with a 4xx) and schema-violating ones (they must be refused with a 4xx); no request
may get a 5xx, and the engine must still serve a plain request afterwards with every KV
block free.

A schema says nothing of what text holds, so `fuzz_hostile_text` adds what a schema fuzzer
does not draw: Unicode edge cases (lone surrogates, NUL, right-to-left marks, 4-byte emoji,
combining marks, noncharacters; also as raw bytes that are not UTF-8) in every text field of
the generation and tokenize routes, and request-supplied chat templates, benign and hostile
(errors, recursion, capped ranges and repeats, attribute escapes). A lone surrogate or an
undecodable body must be a 400; a request template must be a 400 unless the server trusts
request templates, and even then never a 5xx.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import httpx2 as httpx
import schemathesis
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import seed as hypothesis_seed
from hypothesis import strategies as st
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


UNICODE_EDGES = (
    "\ud800",  # lone high surrogate
    "tail\udfff",  # lone low surrogate
    "\ud83d",  # the first half of an emoji alone
    "nul\x00inside",
    "\u202eevil\u202c \u200f",  # right-to-left override, pop, right-to-left mark
    "\u05e9\u05dc\u05d5\u05dd \u0645\u0631\u062d\u0628\u0627",  # Hebrew, Arabic
    "\U0001f600\U0001f469\u200d\U0001f4bb\U0010fffd",  # 4-byte emoji, ZWJ, plane 16
    "e\u0301" + "\u0301" * 64,  # a combining mark stack
    "\ufeff\ufffe\uffff",  # BOM and noncharacters
)
"""Text that tokenizers, JSON codecs and detokenizers get wrong; the first three are not
valid Unicode (a 400 naming the field)."""

REQUEST_TEMPLATES = (
    "{% for m in messages %}{{ m['content'] }}{% endfor %}",
    "{{ messages[0]['content'] | upper }}\u202e\U0001f600",
    "{{ 1/0 }}",
    "{% macro f(x) %}{{ f(x) }}{% endmacro %}{{ f(1) }}",
    "{% for i in range(100001) %}{% endfor %}",
    "{{ 'x' * 10000000000 }}",
    "{{ ''.__class__.__mro__[1].__subclasses__() }}",
    "{% for i in range(300) %}{% for j in range(300) %}{% endfor %}{% endfor %}",
    "{{ messages[99]['content'] }}{% if",
    "{{ raise_exception('refused by the template') }}",
)
"""Request-supplied chat templates: benign, failing, capped by the sandbox, escaping."""

INVALID_TEXT = ("\ud800", "\udfff", "\ud83d")


def _text() -> st.SearchStrategy[str]:
    edge = st.sampled_from(UNICODE_EDGES)
    return st.one_of(edge, st.text(max_size=12), st.tuples(st.text(max_size=6), edge).map("".join))


@st.composite
def hostile_requests(draw: Any) -> tuple[str, dict[str, Any]]:
    """(path, body): a generation or tokenize request with edge-case text in its text fields
    and, for chat, sometimes a template of its own."""
    route = draw(st.sampled_from(["/v1/completions", "/v1/chat/completions", "/tokenize"]))
    chat = route == "/v1/chat/completions" or (route == "/tokenize" and draw(st.booleans()))
    body: dict[str, Any] = {"max_tokens": 2} if route != "/tokenize" else {}
    if chat:
        roles = st.sampled_from(["user", "system", "assistant"])
        body["messages"] = draw(
            st.lists(st.fixed_dictionaries({"role": roles, "content": _text()}), min_size=1)
        )
        if draw(st.booleans()):
            body["chat_template"] = draw(st.sampled_from(REQUEST_TEMPLATES))
    else:
        body["prompt"] = draw(st.one_of(_text(), st.lists(_text(), min_size=1, max_size=3)))
    if route != "/tokenize" and draw(st.booleans()):
        body["stop"] = draw(_text())
    return route, body


def _holds_invalid_text(body: dict[str, Any]) -> bool:
    return any(bad in json.dumps(body, ensure_ascii=False) for bad in INVALID_TEXT)


def _expected_violation(body: dict[str, Any], status: int, trusts_templates: bool) -> str | None:
    if status >= 500:
        return "a server error"
    if _holds_invalid_text(body) and status != 400:
        return "invalid Unicode not refused with a 400"
    if "chat_template" in body and not trusts_templates and status != 400:
        return "a request template not refused with a 400"
    return None


def fuzz_hostile_text(
    server: LiveServer, examples: int, trusts_templates: bool, seed: int = 0
) -> FuzzReport:
    """Send `examples` requests from `hostile_requests` (JSON with every non-ASCII character
    escaped, so lone surrogates travel), plus, for every Unicode edge case, one body carrying
    it as raw bytes that are not UTF-8 (a lone surrogate encoded as CESU-8 / WTF-8)."""
    report = FuzzReport()
    headers = {"content-type": "application/json"}

    def record(path: str, body: dict[str, Any], response: httpx.Response) -> None:
        report.statuses[response.status_code] += 1
        problem = _expected_violation(body, response.status_code, trusts_templates)
        if problem is not None:
            report.server_errors.append(
                f"{problem}: POST {path} body={body!r}: {response.status_code} "
                f"{response.text[:300]}"
            )

    @settings(
        max_examples=examples,
        deadline=None,
        database=None,
        phases=[Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
    @hypothesis_seed(seed)
    @given(request=hostile_requests())
    def send(request: tuple[str, dict[str, Any]]) -> None:
        path, body = request
        content = json.dumps(body)
        record(path, body, httpx.post(server.url + path, content=content, headers=headers))

    send()
    for text in UNICODE_EDGES:
        body = {"prompt": text, "max_tokens": 2}
        raw = json.dumps(body, ensure_ascii=False).encode("utf-8", "surrogatepass")
        response = httpx.post(server.url + "/v1/completions", content=raw, headers=headers)
        record("/v1/completions", body, response)
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
