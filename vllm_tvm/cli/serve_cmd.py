"""`vllm-tvm serve [MODEL]`: the OpenAI-compatible server, with vLLM's flag names and the
reference server's defaults.

Flags vLLM (or the reference server) has and vllm-tvm does not implement are still
recognised (`vllm_serve_flags`), so that a command line copied from a vLLM deployment either
starts (the flag has nothing to act on here) or fails at once naming the flag, never starts
a server that silently behaves differently. Any other unknown flag is an argparse error.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
from dataclasses import replace
from pathlib import Path

from vllm_tvm.checkpoints.default_model import DEFAULT_MODEL_NAME
from vllm_tvm.cli.engine_args import add_engine_arguments, engine_args_from_cli
from vllm_tvm.cli.preflight import check_device, check_port, prepare_command_start
from vllm_tvm.cli.registry_args import registry_settings_from_cli
from vllm_tvm.cli.vllm_serve_flags import add_vllm_serve_flags
from vllm_tvm.entrypoints.resolve import BeforeLoad, resolve_engine
from vllm_tvm.runtime.engine.admission import (
    DEFAULT_MAX_SEQUENCES_PER_REQUEST,
    DEFAULT_MAX_WAITING_REQUESTS,
)
from vllm_tvm.runtime.engine.args import DEFAULT_NUM_BLOCKS, EngineArgs
from vllm_tvm.server.config import (
    DEFAULT_MAX_LOGPROBS,
    DEFAULT_MAX_REQUEST_BODY_BYTES,
    DEFAULT_REQUEST_READ_TIMEOUT,
    ServerConfig,
)

STRUCTURED_OUTPUT_BACKENDS = ("auto", "guidance")
"""`backend` values --structured-outputs-config accepts: the one backend there is (llguidance)."""


def _parser_names() -> tuple[list[str], list[str]]:
    from vllm_tvm.server.reasoning_parsers import reasoning_parser_names
    from vllm_tvm.server.tool_parsers import tool_parser_names

    return tool_parser_names(), ["none", *reasoning_parser_names()]


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    tool_parsers, reasoning_parsers = _parser_names()
    parser = subparsers.add_parser(
        "serve",
        help="run the OpenAI-compatible HTTP server",
        description="Serve a model (compiled on first use) over the OpenAI API.",
    )
    parser.add_argument(
        "model_tag",
        nargs="?",
        default=None,
        metavar="MODEL",
        help="same as --model (a path, or a Hugging Face id in the local cache)",
    )
    parser.add_argument("--host", default="0.0.0.0", help="bind host (default 0.0.0.0)")
    parser.add_argument("--port", type=int, default=8000, help="bind port (default 8000)")
    parser.add_argument(
        "--served-model-name",
        nargs="+",
        default=None,
        help="model id(s) in /v1/models and responses (default: the model's base name)",
    )
    parser.add_argument(
        "--api-key",
        default=os.environ.get("VLLM_API_KEY"),
        help="require 'Authorization: Bearer KEY' on every route but /health and /ping "
        "(default: $VLLM_API_KEY)",
    )
    add_engine_arguments(parser)
    parser.add_argument(
        "--max-logprobs",
        type=int,
        default=DEFAULT_MAX_LOGPROBS,
        help="most logprobs a request may ask for (-1: the vocabulary)",
    )
    parser.add_argument("--tool-call-parser", choices=tool_parsers, default="hermes")
    parser.add_argument(
        "--enable-auto-tool-choice",
        action="store_true",
        help="accepted for vLLM command lines: tool_choice 'auto' is always available",
    )
    parser.add_argument("--reasoning-parser", choices=reasoning_parsers, default="none")
    parser.add_argument(
        "--chat-template", default=None, help="chat template file, text, or checkpoint name"
    )
    parser.add_argument(
        "--trust-request-chat-template",
        action="store_true",
        help="let requests send their own chat_template (rendered in a bounded sandbox); "
        "refused by default",
    )
    parser.add_argument(
        "--structured-outputs-config",
        type=structured_outputs_config,
        default={},
        metavar="JSON",
        help='structured-output options as JSON, e.g. \'{"disable_additional_properties": '
        "false}' to let JSON objects carry properties their schema does not list",
    )
    parser.add_argument(
        "--enable-thinking",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="set the enable_thinking chat-template variable (default: the template's)",
    )
    parser.add_argument(
        "--enable-log-requests",
        action="store_true",
        default=True,
        help="log each request (default on)",
    )
    parser.add_argument("--disable-log-requests", dest="enable_log_requests", action="store_false")
    parser.add_argument("--enable-log-outputs", action="store_true", help="log each output")
    parser.add_argument("--max-log-len", type=int, default=256, help="truncate logged text")
    parser.add_argument(
        "--enable-metrics", action="store_true", default=True, help="serve /metrics (default)"
    )
    parser.add_argument("--disable-metrics", dest="enable_metrics", action="store_false")
    parser.add_argument(
        "--enable-force-include-usage", action="store_true", help="usage in every stream"
    )
    parser.add_argument(
        "--uvicorn-log-level",
        default="info",
        choices=("critical", "error", "warning", "info", "debug", "trace"),
    )
    parser.add_argument(
        "--disable-uvicorn-access-log", action="store_true", help="no access log line per request"
    )
    parser.add_argument(
        "--max-request-body-bytes",
        type=int,
        default=DEFAULT_MAX_REQUEST_BODY_BYTES,
        help="answer 413 to a request body longer than this, before reading it "
        f"(default {DEFAULT_MAX_REQUEST_BODY_BYTES}; 0: no limit)",
    )
    parser.add_argument(
        "--request-read-timeout",
        type=float,
        default=DEFAULT_REQUEST_READ_TIMEOUT,
        metavar="SECONDS",
        help="close a connection whose request header, or body, takes longer than this to "
        f"arrive (default {DEFAULT_REQUEST_READ_TIMEOUT:g})",
    )
    parser.add_argument(
        "--max-sequences-per-request",
        type=int,
        default=DEFAULT_MAX_SEQUENCES_PER_REQUEST,
        help="answer 400 to a request whose prompts x n exceed this "
        f"(default {DEFAULT_MAX_SEQUENCES_PER_REQUEST})",
    )
    parser.add_argument(
        "--max-waiting-requests",
        type=int,
        default=DEFAULT_MAX_WAITING_REQUESTS,
        help="answer 429 to a request while this many wait for their first token "
        f"(default {DEFAULT_MAX_WAITING_REQUESTS})",
    )
    parser.add_argument("--verbose", "-v", action="store_true", help="debug logging")
    add_vllm_serve_flags(parser)
    parser.set_defaults(run=run)


def config_from_args(args: argparse.Namespace) -> ServerConfig:
    """The server's settings from parsed flags (the default model when none is named)."""
    from vllm_tvm.checkpoints.default_model import default_model_path

    if args.model_tag is not None and args.model is not None and args.model_tag != args.model:
        raise ValueError(f"two models given: {args.model_tag!r} and --model {args.model!r}")
    model = args.model or args.model_tag
    served = args.served_model_name
    if model is None:
        model = str(default_model_path())
        served = served or [DEFAULT_MODEL_NAME]
    engine = serve_engine_args(args, model)
    return ServerConfig(
        engine=engine,
        served_model_name=list(served or []),
        host=args.host,
        port=args.port,
        api_key=args.api_key,
        max_logprobs=args.max_logprobs,
        tool_call_parser=args.tool_call_parser,
        reasoning_parser=None if args.reasoning_parser == "none" else args.reasoning_parser,
        chat_template=args.chat_template,
        enable_thinking=args.enable_thinking,
        trust_request_chat_template=args.trust_request_chat_template,
        disable_additional_properties=args.structured_outputs_config.get(
            "disable_additional_properties", ServerConfig.disable_additional_properties
        ),
        enable_log_requests=args.enable_log_requests,
        enable_log_outputs=args.enable_log_outputs,
        max_log_len=args.max_log_len,
        enable_metrics=args.enable_metrics,
        enable_force_include_usage=args.enable_force_include_usage,
        max_request_body_bytes=args.max_request_body_bytes,
        request_read_timeout=args.request_read_timeout,
        max_sequences_per_request=args.max_sequences_per_request,
        max_waiting_requests=args.max_waiting_requests,
        disable_uvicorn_access_log=args.disable_uvicorn_access_log,
        uvicorn_log_level="debug" if args.verbose else args.uvicorn_log_level,
    )


def structured_outputs_config(text: str) -> dict[str, object]:
    """--structured-outputs-config: vLLM's JSON object, of which `disable_additional_properties`
    (a boolean) and `backend` (auto or guidance) apply here; other keys are refused by name."""
    try:
        config = json.loads(text)
    except json.JSONDecodeError as exc:
        raise argparse.ArgumentTypeError(f"not JSON: {exc}") from exc
    if not isinstance(config, dict):
        raise argparse.ArgumentTypeError(f"expected a JSON object, got {text!r}")
    unknown = sorted(set(config) - {"disable_additional_properties", "backend"})
    if unknown:
        raise argparse.ArgumentTypeError(
            f"unsupported key(s) {unknown}; supported: backend, disable_additional_properties"
        )
    if not isinstance(config.get("disable_additional_properties", False), bool):
        raise argparse.ArgumentTypeError("disable_additional_properties must be true or false")
    if config.get("backend", "auto") not in STRUCTURED_OUTPUT_BACKENDS:
        raise argparse.ArgumentTypeError(
            f"backend {config['backend']!r} is not available; "
            f"choose from {', '.join(STRUCTURED_OUTPUT_BACKENDS)}"
        )
    return config


def serve_engine_args(args: argparse.Namespace, model: str) -> EngineArgs:
    """The engine flags on `model` (the positional MODEL, --model or the default), where
    serve differs from the engine: the pool is shown as the reference server's
    DEFAULT_NUM_BLOCKS (what the engine makes of no sizing at all) unless a flag sizes it."""
    engine = engine_args_from_cli(args, model=model)
    if engine.num_blocks is None and not engine.sized_from_memory:
        engine = replace(engine, num_blocks=DEFAULT_NUM_BLOCKS)
    return engine


def checked_config(args: argparse.Namespace, before_load: BeforeLoad | None = None) -> ServerConfig:
    """`config_from_args` with its cheap inputs checked (port free, device present) and the
    engine resolved (entrypoints/resolve.py; `before_load` as there); a model named by a
    registry or Hugging Face id is also served under that id by default."""
    config = config_from_args(args)
    check_port(config.host, config.port)
    check_device(config.engine.device)
    model = str(config.engine.model)
    engine = resolve_engine(config.engine, registry_settings_from_cli(args), before_load)
    served = config.served_model_name
    if not served and not Path(model).exists():
        served = [model]
    return replace(config, engine=engine, served_model_name=served)


def run(args: argparse.Namespace) -> int:
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(levelname)s %(name)s: %(message)s",
    )
    config = checked_config(args, before_load=prepare_command_start)
    from vllm_tvm.server.launch import serve

    serve(config)
    return 0
