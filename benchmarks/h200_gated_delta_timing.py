"""Timings for benchmarks/h200_gated_delta_check.py: one Gated DeltaNet layer, bf16, batch 1.

Why apart: the check proves correctness; this times the same libraries in the same run
against the peers on that machine: transformers' torch path (the layer module, and its
`torch_chunk_gated_delta_rule` / `torch_recurrent_gated_delta_rule` alone) and, when the
`fla` package imports (flash-linear-attention's Triton kernels, which vLLM's Gated DeltaNet
layers vendor), its `chunk_gated_delta_rule` and `fused_recurrent_gated_delta_rule`, whose
output is also checked against the float64 recurrence. Times are medians of CUDA-synchronised
wall clocks after warm-up calls, in milliseconds.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
import traceback
from collections.abc import Callable
from typing import Any

import torch
from h200_gated_delta_check import (
    OurLayer,
    errors,
    hf_layer,
    hf_modeling,
    hf_runner,
    kernel_inputs,
    load_library,
    reference_delta_rule,
    tvm_tensor,
)

WARMUP = 2
REPEAT = {"prefill": 5, "decode": 50}
DECODE_CONTEXT = 16
"""Tokens prefilled before the decode steps that are timed."""
FLA_CHECK_TOKENS = 200


def timed_ms(fn: Callable[[], Any], repeat: int, device: str) -> float:
    def sync() -> None:
        if device == "cuda":
            torch.cuda.synchronize()

    for _ in range(WARMUP):
        fn()
    samples = []
    for _ in range(repeat):
        sync()
        start = time.perf_counter()
        fn()
        sync()
        samples.append((time.perf_counter() - start) * 1e3)
    return statistics.median(samples)


def time_layer(args: argparse.Namespace, family: str, entry: dict) -> dict[str, Any]:
    """Whole layer, bf16: ours vs transformers' module, prefill of N tokens and a decode step."""
    device, n = args.device, args.prefill_tokens
    layer, hf_config = hf_layer(family, entry["config"], device)
    hidden = torch.randn(1, n, entry["config"]["hidden_size"], device=device)
    spec = {**entry["layers"]["bfloat16"], "config": entry["config"]}
    ours = OurLayer(args.root / spec["library"], spec, layer, torch.bfloat16, device)
    layer = layer.to(torch.bfloat16)
    hidden_bf16, step = hidden.to(torch.bfloat16), hidden[:, :1].to(torch.bfloat16)
    times = {"ours_prefill_ms": timed_ms(lambda: ours(hidden_bf16), REPEAT["prefill"], device)}
    times["ours_decode_ms"] = timed_ms(lambda: ours(step), REPEAT["decode"], device)
    hf_prefill = lambda: hf_runner(layer, hf_config)(hidden_bf16)  # noqa: E731 (a fresh cache)
    times["hf_prefill_ms"] = timed_ms(hf_prefill, REPEAT["prefill"], device)
    hf_decoder = hf_runner(layer, hf_config)
    hf_decoder(hidden_bf16[:, :DECODE_CONTEXT])
    times["hf_decode_ms"] = timed_ms(lambda: hf_decoder(step), REPEAT["decode"], device)
    return times


def time_kernels(args: argparse.Namespace, family: str, entry: dict) -> dict[str, Any]:
    """The delta rule alone over N tokens and one step: ours, transformers' torch, fla."""
    device, n, config = args.device, args.prefill_tokens, entry["config"]
    lib = load_library(args.root / entry["kernels"])
    hv, dk, dv = (
        config[f"linear_{k}"] for k in ("num_value_heads", "key_head_dim", "value_head_dim")
    )
    gen = torch.Generator(device=device).manual_seed(3)
    q, k, v, g, beta = kernel_inputs(config, n, gen, device)
    starts = torch.tensor([0, n], dtype=torch.int32, device=device)
    slots = torch.zeros(1, dtype=torch.int32, device=device)
    state = torch.zeros(1, hv, dk, dv, device=device)
    out = torch.empty(n, hv, dv, device=device)
    step_out = torch.empty(1, hv, dv, device=device)
    chunk_args = [*map(tvm_tensor, (q, k, v, g, beta, starts, slots, state, out))]
    step_args = [*map(tvm_tensor, (q[:1], k[:1], v[:1], g[:1], beta[:1], slots, state, step_out))]
    times = {
        "ours_chunked_ms": timed_ms(lambda: lib["chunked"](*chunk_args), REPEAT["prefill"], device),
        "ours_step_ms": timed_ms(lambda: lib["step"](*step_args), REPEAT["decode"], device),
    }
    modeling = hf_modeling(family)
    group = hv // config["linear_num_key_heads"]
    qh, kh = (x.repeat_interleave(group, dim=1)[None] for x in (q, k))
    vh, gh, bh = v[None], g[None], beta[None]

    def hf_chunk() -> Any:
        return modeling.torch_chunk_gated_delta_rule(
            qh * dk**0.5, kh, vh, g=gh, beta=bh, initial_state=None, output_final_state=True
        )

    def hf_step() -> Any:
        return modeling.torch_recurrent_gated_delta_rule(
            qh[:, :1] * dk**0.5,
            kh[:, :1],
            vh[:, :1],
            g=gh[:, :1],
            beta=bh[:, :1],
            initial_state=state,
            output_final_state=True,
        )

    try:
        times["hf_torch_chunk_ms"] = timed_ms(hf_chunk, REPEAT["prefill"], device)
        times["hf_torch_recurrent_ms"] = timed_ms(hf_step, REPEAT["decode"], device)
    except Exception:  # an API change in transformers' functions must not hide the rest
        times["hf_torch_error"] = traceback.format_exc()
    times.update(fla_times(args, (qh, kh, vh, gh, bh), state))
    return times


def fla_times(args: argparse.Namespace, tokens: tuple, state: torch.Tensor) -> dict[str, Any]:
    """flash-linear-attention's kernels (bf16 q/k/v as vLLM calls them), if `fla` imports."""
    if args.fla_path:
        sys.path.append(args.fla_path)
    try:
        import fla
        from fla.ops.gated_delta_rule import (
            chunk_gated_delta_rule,
            fused_recurrent_gated_delta_rule,
        )
    except ImportError as err:
        return {"fla": f"not importable: {err}"}
    q, k, v, g, beta = tokens
    qb, kb, vb, bb = (x.to(torch.bfloat16) for x in (q, k, v, beta))

    def chunk(m: int | None = None) -> Any:
        cut = slice(0, m)
        return chunk_gated_delta_rule(
            qb[:, cut],
            kb[:, cut],
            vb[:, cut],
            g[:, cut],
            bb[:, cut],
            scale=1.0,
            initial_state=None,
            output_final_state=True,
        )

    def step() -> Any:
        return fused_recurrent_gated_delta_rule(
            qb[:, :1],
            kb[:, :1],
            vb[:, :1],
            g[:, :1],
            bb[:, :1],
            scale=1.0,
            initial_state=state,
            output_final_state=True,
        )

    result: dict[str, Any] = {"fla_version": getattr(fla, "__version__", "?")}
    try:
        got, _ = chunk(FLA_CHECK_TOKENS)
        cut = [x[0, :FLA_CHECK_TOKENS] for x in tokens]
        bf16_inputs = [x if i == 3 else x.to(torch.bfloat16).float() for i, x in enumerate(cut)]
        want, _ = reference_delta_rule(*bf16_inputs, torch.zeros_like(state[0]))
        result["fla_chunk_bf16_vs_float64"] = errors(got[0].float(), want)
        result["fla_chunk_ms"] = timed_ms(chunk, REPEAT["prefill"], args.device)
        result["fla_recurrent_ms"] = timed_ms(step, REPEAT["decode"], args.device)
    except Exception:  # fla's own failure is a result, not a crash of the check
        result["fla_error"] = traceback.format_exc()
    return result
