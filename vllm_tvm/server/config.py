"""Everything `vllm-tvm serve` is configured with, as one object the CLI fills and the
server reads: the engine's options (`EngineArgs`, the one definition of them and their
defaults) and the server's own settings.

Why it exists: the command line, the tests (which start servers in-process) and the
`/server_info` route all need the same settings with the same defaults, the reference
server's: port 8000 on 0.0.0.0, the hermes tool-call parser, no reasoning parser, request
logging and metrics on; and the bounds on what one client may ask (admission.py).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from vllm_tvm.runtime.engine.admission import (
    DEFAULT_MAX_SEQUENCES_PER_REQUEST,
    DEFAULT_MAX_WAITING_REQUESTS,
    AdmissionLimits,
)
from vllm_tvm.runtime.engine.args import EngineArgs

DEFAULT_MAX_LOGPROBS = 20

DEFAULT_MAX_REQUEST_BODY_BYTES = 32 * 1024 * 1024
"""The largest request body the server reads (32 MiB); 0 lifts the limit."""

DEFAULT_REQUEST_READ_TIMEOUT = 30.0
"""Seconds a client has to send a request's header, and again to send its body."""

MAX_NEW_TOKENS_ENV = "VT_SERVER_MAX_NEW_TOKENS"
"""The reference server's serving-side cap on every request's output budget (unset or 0: none)."""


SSE_PING_ENV = "VT_SERVER_SSE_PING_S"
"""Seconds between SSE comment frames while a stream waits (0: none)."""

DEFAULT_SSE_PING_SECONDS = 15.0


def seconds_from_env(name: str, environ: Mapping[str, str], default: float) -> float:
    """Non-negative seconds from environment variable `name` (`default` when unset or
    empty); ValueError naming the variable otherwise."""
    text = environ.get(name, "").strip()
    if not text:
        return default
    try:
        seconds = float(text)
    except ValueError:
        seconds = -1.0
    if not 0 <= seconds < float("inf"):
        raise ValueError(f"{name} must be a number of seconds, 0 or more, got {text!r}")
    return seconds


def count_from_env(name: str, environ: Mapping[str, str]) -> int | None:
    """A non-negative whole number from environment variable `name` (None when unset or
    empty); ValueError naming the variable otherwise."""
    text = environ.get(name, "").strip()
    if not text:
        return None
    if not text.isdigit():
        raise ValueError(f"{name} must be a whole number of 0 or more, got {text!r}")
    return int(text)


@dataclass
class ServerConfig:
    """Settings of one server. `engine.model` is a model directory or a .gguf file;
    `chat_template` is template text or a template name the checkpoint ships (None: the
    checkpoint's); `enable_thinking` None leaves the template's own default.
    `trust_request_chat_template` lets requests bring their own chat template (refused by
    default, as in vLLM); `disable_additional_properties` (default, as vLLM's default
    structured-output backend) lets a JSON object carry no property its schema does not
    list, unless the schema says `additionalProperties`. `max_new_tokens` (positive) caps
    every request's output budget; None or 0: no cap. `sse_ping_seconds` is the gap
    between SSE comment frames while a stream waits (0: none)."""

    engine: EngineArgs
    served_model_name: list[str] = field(default_factory=list)
    host: str = "0.0.0.0"
    port: int = 8000
    api_key: str | None = None
    max_logprobs: int = DEFAULT_MAX_LOGPROBS
    tool_call_parser: str = "hermes"
    reasoning_parser: str | None = None
    chat_template: str | None = None
    enable_thinking: bool | None = None
    trust_request_chat_template: bool = False
    disable_additional_properties: bool = True
    enable_log_requests: bool = True
    enable_log_outputs: bool = False
    max_log_len: int = 256
    enable_metrics: bool = True
    enable_force_include_usage: bool = False
    max_request_body_bytes: int = DEFAULT_MAX_REQUEST_BODY_BYTES
    request_read_timeout: float = DEFAULT_REQUEST_READ_TIMEOUT
    max_sequences_per_request: int = DEFAULT_MAX_SEQUENCES_PER_REQUEST
    max_waiting_requests: int = DEFAULT_MAX_WAITING_REQUESTS
    max_new_tokens: int | None = None
    sse_ping_seconds: float = DEFAULT_SSE_PING_SECONDS
    enable_tokenizer_info_endpoint: bool = False
    disable_uvicorn_access_log: bool = False
    uvicorn_log_level: str = "info"

    def __post_init__(self) -> None:
        self.admission_limits  # noqa: B018 - refuses limits below 1 now, not at launch

    @property
    def model_name(self) -> str:
        """The id responses carry: the first served name, else the model's base name."""
        if self.served_model_name:
            return self.served_model_name[0]
        path = Path(self.engine.model)
        return path.stem if path.suffix == ".gguf" else path.name

    @property
    def model_names(self) -> list[str]:
        """Every name a request may use for this model."""
        return list(self.served_model_name) or [self.model_name]

    @property
    def admission_limits(self) -> AdmissionLimits:
        """What the engine takes in: sequences per request, requests waiting."""
        return AdmissionLimits(self.max_sequences_per_request, self.max_waiting_requests)

    def public_dict(self) -> dict[str, Any]:
        """The settings for /server_info, with the API key hidden."""
        data = asdict(self)
        data["api_key"] = None if self.api_key is None else "<set>"
        return data
