"""The engine flags every engine-running subcommand (`serve`, `generate`, `bench`) shares,
with vLLM's names, and the `EngineArgs` they make.

Why it exists: the three commands run the same engine, so they take the same engine flags,
declared here once, with their defaults read from `EngineArgs` (the one place defaults are
written; the compile options' flags, shared with `compile`, are common_args.py's, their
defaults CompileOptions'). A flag's parsed value is None when it is not given (but the
compile options', which parse to their default), so a command
can fill an unset option with its own default (serve's 256-block pool, bench's batch of its
largest concurrency) and every other unset option keeps the engine's. As in the reference
server, `--max-model-len 0` and `--max-num-batched-tokens 0` mean unset.
"""

from __future__ import annotations

import argparse
from typing import Any

from vllm_tvm.checkpoints.default_model import DEFAULT_MODEL_NAME
from vllm_tvm.cli.common_args import add_compile_arguments
from vllm_tvm.cli.registry_args import add_registry_arguments
from vllm_tvm.runtime.devices import DEVICES
from vllm_tvm.runtime.engine.args import (
    DEFAULT_MAX_NUM_BATCHED_TOKENS,
    DEFAULT_NUM_BLOCKS,
    EngineArgs,
    default_of,
    option_names,
)
from vllm_tvm.runtime.sampling.params import LOGPROBS_MODES
from vllm_tvm.runtime.speculative.config import BUILT_METHODS, METHODS, SpeculativeConfig
from vllm_tvm.runtime.weights.load_format import LOAD_FORMATS

NOT_FLAGS = ("show_progress", "skip_tokenizer_init")
"""Engine options no flag sets: each command decides them (progress bars, whether its
workload needs a tokenizer)."""

UNSET_WHEN_ZERO = ("max_model_len", "max_num_batched_tokens")


def add_engine_arguments(parser: argparse.ArgumentParser) -> None:
    """Add `--model` and a flag for every engine option but NOT_FLAGS."""
    parser.add_argument(
        "--model",
        default=None,
        help="HF model directory, .gguf file, or Hugging Face id (org/name) already in the "
        "local Hugging Face cache, or a model id of the --registry "
        f"(default: the embedded {DEFAULT_MODEL_NAME}, Q4_1 GGUF); "
        "with --load-format dummy a directory with config.json only",
    )
    parser.add_argument(
        "--artifact", default=None, help="prebuilt artifact directory (default: compile)"
    )
    parser.add_argument("--device", choices=DEVICES, default=None, help=_default("device"))
    add_compile_arguments(parser)
    parser.add_argument(
        "--load-format",
        choices=LOAD_FORMATS,
        default=None,
        help="auto: the checkpoint's weights; dummy: random weights made on the device "
        + _default("load_format"),
    )
    _int(parser, "--max-num-seqs", "max concurrent sequences " + _default("max_num_seqs"))
    _int(
        parser,
        "--max-num-batched-tokens",
        f"per-step token budget (unset or 0: {DEFAULT_MAX_NUM_BATCHED_TOKENS})",
    )
    _int(parser, "--block-size", "KV block size in tokens " + _default("block_size"))
    _int(parser, "--num-blocks", f"KV blocks ({DEFAULT_NUM_BLOCKS} unless sized from memory)")
    parser.add_argument(
        "--kv-cache-memory-bytes",
        "--kv-cache-memory",
        dest="kv_cache_memory",
        type=int,
        default=None,
        help="size the KV pool in bytes",
    )
    parser.add_argument(
        "--gpu-memory-utilization",
        type=float,
        default=None,
        help="size the KV pool from this fraction of device memory",
    )
    parser.add_argument(
        "--enable-prefix-caching",
        "--enable-radix-attention",
        dest="enable_prefix_caching",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="automatic prefix caching (default on)",
    )
    parser.add_argument(
        "--disable-radix-attention", dest="enable_prefix_caching", action="store_false"
    )
    parser.add_argument(
        "--scheduling-policy",
        default=None,
        help="fcfs, priority or lpm " + _default("scheduling_policy"),
    )
    parser.add_argument(
        "--itl-target-ms",
        type=float,
        default=None,
        help="inter-token latency to keep running streams near while prompts prefill, by "
        "sizing prompt chunks from measured step times; 0: off " + _default("itl_target_ms"),
    )
    parser.add_argument(
        "--logprobs-mode",
        choices=LOGPROBS_MODES,
        default=None,
        help="which logits returned logprobs describe " + _default("logprobs_mode"),
    )
    parser.add_argument(
        "--async-scheduling",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="launch each forward before the previous step's text and outputs are made, so "
        "host work overlaps the device's (default on for cuda without speculation, off on cpu)",
    )
    _int(parser, "--seed", "seed of unseeded sampling and of dummy weights")
    add_registry_arguments(parser)
    parser.add_argument(
        "--speculative-config",
        type=_speculative_config,
        default=None,
        help="speculative decoding as vLLM's JSON, e.g. "
        '\'{"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 4}\' '
        'or \'{"model": DRAFT_CHECKPOINT, "num_speculative_tokens": 3}\' '
        'or \'{"method": "eagle", "model": EAGLE_HEAD, "num_speculative_tokens": 3}\' '
        f"(methods {', '.join(METHODS)}; implemented: {', '.join(BUILT_METHODS)}) (default off)",
    )


def engine_args_from_cli(namespace: argparse.Namespace, **defaults: Any) -> EngineArgs:
    """The engine options the command line gave; `defaults` fill the options it left unset
    (a command's own defaults), the rest keep EngineArgs'. No model: the embedded one. The
    model is named as given: the command resolves it (entrypoints/resolve.py; a registry id
    is pulled with `registry_args.registry_settings_from_cli`, a Hugging Face id found in
    the local cache)."""
    given = {
        name: getattr(namespace, name)
        for name in ("model", *option_names())
        if getattr(namespace, name, None) is not None
    }
    for name in UNSET_WHEN_ZERO:
        if given.get(name) == 0:
            del given[name]
    options = {**defaults, **given}
    if "model" not in options:
        from vllm_tvm.checkpoints.default_model import default_model_path

        options["model"] = str(default_model_path())
    return EngineArgs(**options)


def _speculative_config(text: str) -> SpeculativeConfig:
    try:
        return SpeculativeConfig.from_json(text)
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from None


def _default(name: str) -> str:
    return f"(default {default_of(name)})"


def _int(parser: argparse.ArgumentParser, flag: str, help_text: str) -> None:
    parser.add_argument(flag, type=int, default=None, help=help_text)
