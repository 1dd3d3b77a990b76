"""`vllm-tvm serve [MODEL]`: the OpenAI-compatible server, with vLLM's flag names and the
reference server's defaults.

Flags vLLM (or the reference server) has and vllm-tvm does not implement are still
recognised, so that a command line copied from a vLLM deployment fails at once naming the
flag, instead of starting a server that silently behaves differently. Any other unknown
flag is an argparse error.
"""

from __future__ import annotations

import argparse
import logging
import os
from pathlib import Path
from typing import Any

from vllm_tvm.cli.common_args import add_dtype_argument
from vllm_tvm.cli.default_model import DEFAULT_MODEL_NAME
from vllm_tvm.server.config import DEFAULT_MAX_LOGPROBS, DEFAULT_NUM_BLOCKS, ServerConfig

DEVICES = ("cpu", "cuda")

NOT_IMPLEMENTED = (
    "--speculative-config",
    "--kv-transfer-config",
    "--enable-jump-forward",
    "--tokenizer",
    "--tokenizer-config",
    "--tensor-parallel-size",
    "--pipeline-parallel-size",
    "--data-parallel-size",
    "--quantization",
    "--enable-lora",
    "--lora-modules",
    "--trust-remote-code",
    "--ssl-keyfile",
    "--ssl-certfile",
    "--cuda-profile-graph-replays",
    "--cuda-profile-graph-batch",
    "--video-dit",
)
"""vLLM / reference-server flags that are refused by name."""


class _Refuse(argparse.Action):
    """A recognised flag that is not implemented: fail naming it."""

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: Any,
        option_string: str | None = None,
    ) -> None:
        parser.error(f"{option_string} is not supported by vllm-tvm serve (it has no effect here)")


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
        "model_tag", nargs="?", default=None, metavar="MODEL", help="same as --model"
    )
    parser.add_argument(
        "--model",
        default=None,
        help=f"HF model directory or .gguf file (default: the embedded {DEFAULT_MODEL_NAME})",
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
    parser.add_argument("--artifact", default=None, help="prebuilt artifact directory")
    parser.add_argument("--device", choices=DEVICES, default="cpu")
    add_dtype_argument(parser)
    parser.add_argument("--block-size", type=int, default=32, help="KV block size (32)")
    parser.add_argument(
        "--num-blocks",
        type=int,
        default=None,
        help=f"KV blocks ({DEFAULT_NUM_BLOCKS} unless sized from memory)",
    )
    parser.add_argument(
        "--kv-cache-memory-bytes", type=int, default=None, help="size the KV pool in bytes"
    )
    parser.add_argument(
        "--gpu-memory-utilization",
        type=float,
        default=None,
        help="size the KV pool from this fraction of device memory",
    )
    parser.add_argument(
        "--max-model-len", type=int, default=0, help="max sequence length (0: fit the pool)"
    )
    parser.add_argument("--max-num-seqs", type=int, default=32, help="max concurrent sequences")
    parser.add_argument(
        "--max-num-batched-tokens", type=int, default=0, help="per-step token budget (0: 2048)"
    )
    parser.add_argument(
        "--enable-prefix-caching",
        "--enable-radix-attention",
        dest="enable_prefix_caching",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="automatic prefix caching (default on)",
    )
    parser.add_argument(
        "--disable-radix-attention", dest="enable_prefix_caching", action="store_false"
    )
    parser.add_argument(
        "--scheduling-policy", default="fcfs", help="fcfs (default), priority or lpm"
    )
    parser.add_argument("--seed", type=int, default=None, help="seed of unseeded sampling")
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
    parser.add_argument("--verbose", "-v", action="store_true", help="debug logging")
    for flag in NOT_IMPLEMENTED:
        parser.add_argument(flag, nargs="?", action=_Refuse, help=argparse.SUPPRESS)
    parser.set_defaults(run=run)


def config_from_args(args: argparse.Namespace) -> ServerConfig:
    """The server's settings from parsed flags (the default model when none is named)."""
    from vllm_tvm.cli.default_model import default_model_path

    if args.model_tag is not None and args.model is not None and args.model_tag != args.model:
        raise ValueError(f"two models given: {args.model_tag!r} and --model {args.model!r}")
    model = args.model or args.model_tag
    served = args.served_model_name
    if model is None:
        model = str(default_model_path())
        served = served or [DEFAULT_MODEL_NAME]
    sized_from_memory = args.kv_cache_memory_bytes is not None or (
        args.gpu_memory_utilization is not None
    )
    num_blocks = args.num_blocks
    if num_blocks is None and not sized_from_memory:
        num_blocks = DEFAULT_NUM_BLOCKS
    return ServerConfig(
        model=str(model),
        served_model_name=list(served or []),
        host=args.host,
        port=args.port,
        api_key=args.api_key,
        artifact=args.artifact,
        device=args.device,
        dtype=args.dtype,
        block_size=args.block_size,
        num_blocks=num_blocks,
        kv_cache_memory_bytes=args.kv_cache_memory_bytes,
        gpu_memory_utilization=args.gpu_memory_utilization,
        max_model_len=args.max_model_len if args.max_model_len > 0 else None,
        max_num_seqs=args.max_num_seqs,
        max_num_batched_tokens=(
            args.max_num_batched_tokens if args.max_num_batched_tokens > 0 else None
        ),
        enable_prefix_caching=args.enable_prefix_caching,
        scheduling_policy=args.scheduling_policy,
        seed=args.seed,
        max_logprobs=args.max_logprobs,
        tool_call_parser=args.tool_call_parser,
        reasoning_parser=None if args.reasoning_parser == "none" else args.reasoning_parser,
        chat_template=args.chat_template,
        enable_thinking=args.enable_thinking,
        enable_log_requests=args.enable_log_requests,
        enable_log_outputs=args.enable_log_outputs,
        max_log_len=args.max_log_len,
        enable_metrics=args.enable_metrics,
        enable_force_include_usage=args.enable_force_include_usage,
        uvicorn_log_level="debug" if args.verbose else args.uvicorn_log_level,
    )


def run(args: argparse.Namespace) -> int:
    from vllm_tvm.entrypoints.llm import resolve_artifact
    from vllm_tvm.server.launch import serve

    config = config_from_args(args)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(levelname)s %(name)s: %(message)s",
    )
    artifact = (
        Path(config.artifact)
        if config.artifact is not None
        else resolve_artifact(Path(config.model), config.device, config.dtype)
    )
    serve(config, artifact)
    return 0
