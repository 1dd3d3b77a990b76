"""The flags of `vllm serve` (and of the reference server) that `vllm-tvm serve` does not
implement, each recognised so a command line copied from a vLLM deployment gets a clear
answer: accepted with no effect where what the flag does in vLLM does not exist here, or
refused by name where ignoring it would change what the server does.

Why it exists: argparse's generic "unrecognized arguments" does not say whether a flag is a
typo or a known vLLM flag left out on purpose, nor what to use instead; keeping the lists
apart from the flags serve implements keeps `serve_cmd` about what the server does.
"""

from __future__ import annotations

import argparse
from typing import Any

from vllm_tvm.entrypoints.vllm_options import NO_EFFECT_SWITCHES as ENGINE_SWITCHES
from vllm_tvm.entrypoints.vllm_options import NO_EFFECT_VALUES as ENGINE_VALUES


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


ENGINE_NO_EFFECT_SWITCHES = {_flag(name): why for name, why in ENGINE_SWITCHES.items()}
ENGINE_NO_EFFECT_OPTIONS = {_flag(name): why for name, why in ENGINE_VALUES.items()}
"""The engine's no-effect options as flags (generate takes these too)."""

NO_EFFECT_SWITCHES = {
    **ENGINE_NO_EFFECT_SWITCHES,
    "--disable-frontend-multiprocessing": "the server and engine already share one process",
}
"""vLLM switches serve accepts with no effect, and why their effect does not apply here."""

NO_EFFECT_OPTIONS = ENGINE_NO_EFFECT_OPTIONS
"""vLLM flags taking a value, accepted with no effect (the value is ignored), and why."""

NOT_IMPLEMENTED = (
    "--kv-transfer-config",
    "--enable-jump-forward",
    "--tokenizer",
    "--tokenizer-config",
    "--pipeline-parallel-size",
    "--data-parallel-size",
    "--enable-lora",
    "--lora-modules",
    "--trust-remote-code",
    "--ssl-keyfile",
    "--ssl-certfile",
    "--cuda-profile-graph-replays",
    "--cuda-profile-graph-batch",
    "--video-dit",
    "-pp",
    "-dp",
    "--no-enable-chunked-prefill",
    "--tokenizer-mode",
    "--revision",
    "--code-revision",
    "--tokenizer-revision",
    "--download-dir",
    "--config-format",
    "--kv-cache-dtype",
    "--max-parallel-loading-workers",
    "--distributed-executor-backend",
    "--enable-expert-parallel",
    "--cpu-offload-gb",
    "--num-gpu-blocks-override",
    "--max-num-partial-prefills",
    "--max-long-partial-prefills",
    "--long-prefill-token-threshold",
    "--preemption-mode",
    "--disable-sliding-window",
    "--rope-scaling",
    "--rope-theta",
    "--hf-overrides",
    "--generation-config",
    "--override-generation-config",
    "--compilation-config",
    "--model-impl",
    "--task",
    "--runner",
    "--convert",
    "--mm-processor-kwargs",
    "--guided-decoding-backend",
    "--logits-processors",
    "--max-loras",
    "--max-lora-rank",
    "--max-cpu-loras",
    "--fully-sharded-loras",
    "--lora-dtype",
    "--enable-sleep-mode",
    "--api-server-count",
    "--headless",
    "--allowed-origins",
    "--allow-credentials",
    "--allowed-methods",
    "--allowed-headers",
    "--root-path",
    "--middleware",
    "--response-role",
    "--return-tokens-as-token-ids",
    "--enable-prompt-tokens-details",
    "--chat-template-content-format",
    "--default-chat-template-kwargs",
    "--tool-parser-plugin",
    "--enable-request-id-headers",
    "--enable-server-load-tracking",
    "--disable-fastapi-docs",
    "--log-config-file",
    "--otlp-traces-endpoint",
    "--collect-detailed-traces",
    "--kv-events-config",
    "--ssl-ca-certs",
    "--ssl-cert-reqs",
    "--enable-ssl-refresh",
)
"""vLLM / reference-server flags refused by name: ignoring them would change behaviour."""

HINTS = {
    "--num-gpu-blocks-override": "use --num-blocks",
    "--default-chat-template-kwargs": "use --enable-thinking to set enable_thinking",
}
"""What to do instead, for some refused flags."""


class _Refuse(argparse.Action):
    """A recognised flag that is not implemented: fail naming it."""

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: Any,
        option_string: str | None = None,
    ) -> None:
        flag = option_string or self.option_strings[0]
        hint = f"; {HINTS[flag]}" if flag in HINTS else ""
        parser.error(f"{flag} is not supported by vllm-tvm serve{hint}")


def _add_no_effect(
    parser: argparse.ArgumentParser, switches: dict[str, str], options: dict[str, str]
) -> None:
    for flag, why in switches.items():
        parser.add_argument(
            flag, action="store_true", default=argparse.SUPPRESS, help=f"no effect: {why}"
        )
    for flag, why in options.items():
        parser.add_argument(flag, default=argparse.SUPPRESS, metavar="N", help=f"no effect: {why}")


def add_vllm_engine_flags(parser: argparse.ArgumentParser) -> None:
    """Recognise vLLM's engine flags that have no effect here on `parser` (none sets a
    field)."""
    _add_no_effect(parser, ENGINE_NO_EFFECT_SWITCHES, ENGINE_NO_EFFECT_OPTIONS)


def add_vllm_serve_flags(parser: argparse.ArgumentParser) -> None:
    """Recognise every flag above on `parser` (none of them sets a field)."""
    _add_no_effect(parser, NO_EFFECT_SWITCHES, NO_EFFECT_OPTIONS)
    for flag in NOT_IMPLEMENTED:
        parser.add_argument(flag, nargs="?", action=_Refuse, help=argparse.SUPPRESS)
