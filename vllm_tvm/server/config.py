"""Everything `vllm-tvm serve` is configured with, as one object the CLI fills and the
server reads: the engine's options (`EngineArgs`, the one definition of them and their
defaults) and the server's own settings.

Why it exists: the command line, the tests (which start servers in-process) and the
`/server_info` route all need the same settings with the same defaults, the reference
server's: port 8000 on 0.0.0.0, the hermes tool-call parser, no reasoning parser, request
logging and metrics on; and the bounds on what one client may ask (admission.py).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from vllm_tvm.runtime.engine.admission import (
    DEFAULT_MAX_SEQUENCES_PER_REQUEST,
    DEFAULT_MAX_WAITING_REQUESTS,
    AdmissionLimits,
)
from vllm_tvm.runtime.engine.args import EngineArgs
from vllm_tvm.runtime.multimodal.media_limits import parse_limit_mm_per_prompt
from vllm_tvm.runtime.multimodal.media_sources import (
    DEFAULT_IMAGE_FETCH_TIMEOUT,
    IMAGE_FETCH_TIMEOUT_ENV,
    MediaSources,
    parse_fetch_timeout,
)
from vllm_tvm.server.options import option, seconds, whole_number

DEFAULT_MAX_LOGPROBS = 20

DEFAULT_MAX_REQUEST_BODY_BYTES = 32 * 1024 * 1024
"""The largest request body the server reads (32 MiB); 0 lifts the limit."""

DEFAULT_REQUEST_READ_TIMEOUT = 30.0
"""Seconds a client has to send a request's header, and again to send its body."""

DEFAULT_SSE_PING_SECONDS = 15.0
"""Seconds between SSE comment frames while a stream waits (the reference server's)."""

UVICORN_LOG_LEVELS = ("critical", "error", "warning", "info", "debug", "trace")


def _tool_parser_names() -> list[str]:
    from vllm_tvm.server.tool_parsers import tool_parser_names

    return tool_parser_names()


def _reasoning_parser_names() -> list[str]:
    from vllm_tvm.server.reasoning_parsers import reasoning_parser_choices

    return reasoning_parser_choices()


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
    between SSE comment frames while a stream waits (0: none).

    Each field a user sets carries its flag, help and environment variable (options.py);
    the command line is built from them (cli/serve_args.py)."""

    engine: EngineArgs
    served_model_name: list[str] = field(
        default_factory=list,
        metadata=option(
            flags=("--served-model-name",),
            nargs="+",
            help="model id(s) in /v1/models and responses (default: the model's base name)",
        ),
    )
    host: str = field(
        default="0.0.0.0", metadata=option(flags=("--host",), help="bind host (default {default})")
    )
    port: int = field(
        default=8000,
        metadata=option(flags=("--port",), parse=int, help="bind port (default {default})"),
    )
    api_key: str | None = field(
        default=None,
        metadata=option(
            flags=("--api-key",),
            env="VLLM_API_KEY",
            help="require 'Authorization: Bearer KEY' on every route but /health and /ping "
            "(default: $VLLM_API_KEY)",
        ),
    )
    max_logprobs: int = field(
        default=DEFAULT_MAX_LOGPROBS,
        metadata=option(
            flags=("--max-logprobs",),
            parse=int,
            help="most logprobs a request may ask for (-1: the vocabulary; default {default})",
        ),
    )
    tool_call_parser: str = field(
        default="hermes",
        metadata=option(
            flags=("--tool-call-parser",),
            choices=_tool_parser_names,
            help="how tool calls are read from the output (default {default})",
        ),
    )
    reasoning_parser: str | None = field(
        default=None,
        metadata=option(
            flags=("--reasoning-parser",),
            choices=_reasoning_parser_names,
            help="how reasoning is split from the answer (auto: from the chat template; "
            "default none)",
        ),
    )
    chat_template: str | None = field(
        default=None,
        metadata=option(
            flags=("--chat-template",), help="chat template file, text, or checkpoint name"
        ),
    )
    enable_thinking: bool | None = field(
        default=None,
        metadata=option(
            flags=("--enable-thinking",),
            kind="boolean",
            help="set the enable_thinking chat-template variable (default: the template's)",
        ),
    )
    trust_request_chat_template: bool = field(
        default=False,
        metadata=option(
            flags=("--trust-request-chat-template",),
            kind="switch",
            help="let requests send their own chat_template (rendered in a bounded sandbox); "
            "refused by default",
        ),
    )
    disable_additional_properties: bool = True
    enable_log_requests: bool = field(
        default=True,
        metadata=option(
            flags=("--enable-log-requests",),
            kind="switch",
            negations=("--disable-log-requests",),
            help="log each request (default on)",
        ),
    )
    enable_log_outputs: bool = field(
        default=False,
        metadata=option(flags=("--enable-log-outputs",), kind="switch", help="log each output"),
    )
    max_log_len: int = field(
        default=256,
        metadata=option(
            flags=("--max-log-len",), parse=int, help="truncate logged text (default {default})"
        ),
    )
    enable_metrics: bool = field(
        default=True,
        metadata=option(
            flags=("--enable-metrics",),
            kind="switch",
            negations=("--disable-metrics",),
            help="serve /metrics (default)",
        ),
    )
    enable_force_include_usage: bool = field(
        default=False,
        metadata=option(
            flags=("--enable-force-include-usage",), kind="switch", help="usage in every stream"
        ),
    )
    max_request_body_bytes: int = field(
        default=DEFAULT_MAX_REQUEST_BODY_BYTES,
        metadata=option(
            flags=("--max-request-body-bytes",),
            parse=int,
            help="answer 413 to a request body longer than this, before reading it "
            "(default {default}; 0: no limit)",
        ),
    )
    request_read_timeout: float = field(
        default=DEFAULT_REQUEST_READ_TIMEOUT,
        metadata=option(
            flags=("--request-read-timeout",),
            parse=float,
            metavar="SECONDS",
            help="close a connection whose request header, or body, takes longer than this to "
            "arrive (default {default:g})",
        ),
    )
    max_sequences_per_request: int = field(
        default=DEFAULT_MAX_SEQUENCES_PER_REQUEST,
        metadata=option(
            flags=("--max-sequences-per-request",),
            parse=int,
            help="answer 400 to a request whose prompts x n exceed this (default {default})",
        ),
    )
    max_waiting_requests: int = field(
        default=DEFAULT_MAX_WAITING_REQUESTS,
        metadata=option(
            flags=("--max-waiting-requests",),
            parse=int,
            help="answer 429 to a request while this many wait for their first token "
            "(default {default})",
        ),
    )
    disable_uvicorn_access_log: bool = field(
        default=False,
        metadata=option(
            flags=("--disable-uvicorn-access-log",),
            kind="switch",
            help="no access log line per request",
        ),
    )
    uvicorn_log_level: str = field(
        default="info", metadata=option(flags=("--uvicorn-log-level",), choices=UVICORN_LOG_LEVELS)
    )
    enable_tokenizer_info_endpoint: bool = field(
        default=False,
        metadata=option(
            flags=("--enable-tokenizer-info-endpoint",),
            kind="switch",
            help="serve GET /tokenizer_info (special tokens, chat template) for remote tokenizers",
        ),
    )
    allowed_local_media_path: str | None = field(
        default=None,
        metadata=option(
            flags=("--allowed-local-media-path",),
            metavar="DIR",
            help="serve file:// image URLs from under this directory (default: none, refused)",
        ),
    )
    allowed_media_domains: list[str] | None = field(
        default=None,
        metadata=option(
            flags=("--allowed-media-domains",),
            nargs="+",
            metavar="DOMAIN",
            help="the only hosts http(s) image URLs may name, checked before fetching "
            "(default: any host)",
        ),
    )
    limit_mm_per_prompt: dict[str, int] = field(
        default_factory=dict,
        metadata=option(
            flags=("--limit-mm-per-prompt",),
            parse=parse_limit_mm_per_prompt,
            metavar="JSON",
            help="the most media items per prompt, e.g. '{{\"image\": 2}}' (default: 999 each)",
        ),
    )
    image_fetch_timeout: float = field(
        default=DEFAULT_IMAGE_FETCH_TIMEOUT,
        metadata=option(
            env=IMAGE_FETCH_TIMEOUT_ENV,
            parse=parse_fetch_timeout,
            help="seconds one http(s) image fetch may take in all (default {default:g})",
        ),
    )
    max_new_tokens: int | None = field(
        default=None,
        metadata=option(
            env="VT_SERVER_MAX_NEW_TOKENS",
            parse=whole_number,
            help="the most tokens any request generates (unset or 0: no cap)",
        ),
    )
    sse_ping_seconds: float = field(
        default=DEFAULT_SSE_PING_SECONDS,
        metadata=option(
            env="VT_SERVER_SSE_PING_S",
            parse=seconds,
            help="seconds between SSE comment frames while a stream waits (default {default:g}; "
            "0: none)",
        ),
    )

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
    def media_sources(self) -> MediaSources:
        """Where request images may come from besides data: URLs."""
        allowed = self.allowed_local_media_path
        domains = self.allowed_media_domains
        return MediaSources(
            self.image_fetch_timeout,
            None if allowed is None else Path(allowed),
            allowed_media_domains=None if domains is None else frozenset(domains),
        )

    @property
    def admission_limits(self) -> AdmissionLimits:
        """What the engine takes in: sequences per request, requests waiting."""
        return AdmissionLimits(self.max_sequences_per_request, self.max_waiting_requests)

    def public_dict(self) -> dict[str, Any]:
        """The settings for /server_info, with the API key hidden."""
        data = asdict(self)
        data["api_key"] = None if self.api_key is None else "<set>"
        return data
