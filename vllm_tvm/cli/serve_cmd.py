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
from vllm_tvm.cli.serve_args import add_server_arguments, server_settings_from_cli
from vllm_tvm.cli.vllm_serve_flags import add_vllm_serve_flags
from vllm_tvm.entrypoints.resolve import BeforeLoad, resolve_engine
from vllm_tvm.runtime.engine.args import DEFAULT_NUM_BLOCKS, EngineArgs
from vllm_tvm.server.config import ServerConfig

STRUCTURED_OUTPUT_BACKENDS = ("auto", "guidance")
"""`backend` values --structured-outputs-config accepts: the one backend there is (llguidance)."""


def add_parser(subparsers: argparse._SubParsersAction) -> None:
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
    add_engine_arguments(parser)
    add_server_arguments(parser)
    parser.add_argument(
        "--enable-auto-tool-choice",
        action="store_true",
        help="accepted for vLLM command lines: tool_choice 'auto' is always available",
    )
    parser.add_argument(
        "--structured-outputs-config",
        type=structured_outputs_config,
        default={},
        metavar="JSON",
        help='structured-output options as JSON, e.g. \'{"disable_additional_properties": '
        "false}' to let JSON objects carry properties their schema does not list",
    )
    parser.add_argument("--verbose", "-v", action="store_true", help="debug logging")
    add_vllm_serve_flags(parser)
    parser.set_defaults(run=run)


def config_from_args(args: argparse.Namespace) -> ServerConfig:
    """The server's settings from parsed flags and the environment (the default model when
    none is named)."""
    from vllm_tvm.checkpoints.default_model import default_model_path

    if args.model_tag is not None and args.model is not None and args.model_tag != args.model:
        raise ValueError(f"two models given: {args.model_tag!r} and --model {args.model!r}")
    model = args.model or args.model_tag
    settings = server_settings_from_cli(args, os.environ)
    served = settings.pop("served_model_name", None)
    if model is None:
        model = str(default_model_path())
        served = served or [DEFAULT_MODEL_NAME]
    engine = serve_engine_args(args, model)
    if "disable_additional_properties" in args.structured_outputs_config:
        settings["disable_additional_properties"] = args.structured_outputs_config[
            "disable_additional_properties"
        ]
    if args.verbose:
        settings["uvicorn_log_level"] = "debug"
    return ServerConfig(engine=engine, served_model_name=list(served or []), **settings)


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
