"""Attention-logit soft-capping (Gemma 2) added to TVM 0.27's paged-attention kernels.

Why: Gemma 2 caps every attention score, `cap * tanh(score / cap)` with score = q.k * scale,
before the softmax. TVM's paged KV cache computes the softmax inside its kernels and takes
no cap. In every one of them the score is first stored as t = q.k * sm_scale * log2(e) (the
online softmax uses exp2), and the causal / sliding-window / length masks are applied after
that store, by replacing masked scores with a constant or skipping them. So replacing that
one store by c * tanh(t / c) with c = cap * log2(e) gives the capped scores in the kernels'
own units (log2(e) * cap * tanh(s / cap) = c * tanh(log2(e) * s / c)), and masked keys stay
masked.

The kernels are rewritten through their TVMScript text (this TVM exposes no TIR mutator to
Python), each at the one line that stores its score, named below per kernel. If a kernel's
text no longer has exactly one such line the compile fails by name rather than run
uncapped. One kernel (the CPU decode without a window) does not print as text that parses
back: the access regions its parser inferred name a buffer the block allocates, so the
printer declares it twice; those printed regions are dropped for the parser to infer them
again (`parseable_script`). A model without a cap never enters this module: its kernels
are TVM's, unchanged. FlashInfer's kernels are compiled by FlashInfer and are refused with
a cap (attention.py).
"""

from __future__ import annotations

import math
import re

import tvm
from tvm import tirx

LOG2E = math.log2(math.e)
_FLOAT = r"T\.float32\([0-9.e+-]+\)"

_CPU_PAGED_SCORE = re.compile(
    rf"^(?P<indent>\s*)(?P<lhs>S_val\[0\]) = (?P<value>S_val\[0\] \* \(sm_scale \* {_FLOAT}\))$"
)
"""CPU paged prefill and decode: the dot product scaled in place."""
_CPU_RAGGED_SCORE = re.compile(
    rf"^(?P<indent>\s*)(?P<lhs>attention_score\[0\]) = "
    rf"(?P<value>result\[0\] \* {_FLOAT} \* sm_scale)$"
)
"""CPU ragged prefill and tree attention: the unmasked branch's score."""
_GPU_TILE_SCORE = re.compile(
    r"^(?P<indent>\s*)(?P<lhs>S_smem\[i, j\]) = (?P<value>S_local\[i, j\])$"
)
"""GPU prefill kernels: the scaled score tile stored to shared memory before masking."""
_GPU_DECODE_SCORE = re.compile(r"^(?P<indent>\s*)(?P<lhs>S_local\[j\]) = (?P<value>t0\[0\])$")
"""GPU decode: the reduced dot product of a key inside the context."""

CPU_SCORE_STORES: dict[str, re.Pattern[str]] = {
    "batch_prefill_paged_kv_cpu": _CPU_PAGED_SCORE,
    "batch_prefill_paged_kv_cpu_sliding_window": _CPU_PAGED_SCORE,
    "batch_decode_paged_kv_cpu": _CPU_PAGED_SCORE,
    "batch_decode_paged_kv_cpu_sliding_window": _CPU_PAGED_SCORE,
    "tree_attn_paged_kv_cpu": _CPU_PAGED_SCORE,
    "batch_prefill_ragged_kv": _CPU_RAGGED_SCORE,
    "batch_tree_attn": _CPU_RAGGED_SCORE,
}
"""Every attention kernel TVM's paged KV cache registers on CPU (by its symbol), and the
line that stores its score."""
GPU_SCORE_STORES: dict[str, re.Pattern[str]] = {
    "batch_prefill_paged_kv": _GPU_TILE_SCORE,
    "batch_prefill_paged_kv_sliding_window": _GPU_TILE_SCORE,
    "batch_prefill_ragged_kv": _GPU_TILE_SCORE,
    "batch_tree_attn": _GPU_TILE_SCORE,
    "tree_attn_paged_kv": _GPU_TILE_SCORE,
    "batch_decode_paged_kv": _GPU_DECODE_SCORE,
    "batch_decode_paged_kv_sliding_window": _GPU_DECODE_SCORE,
}
"""The same for its TIR GPU kernels (some share a symbol with a CPU kernel)."""


_DECLARED_BUFFER = re.compile(r"^\s*(?P<name>\w+) = T\.Buffer\(")
_ALLOCATED_BUFFER = re.compile(r"^\s*(?P<name>\w+) = T\.sblock_alloc_buffer\(")
_ACCESS_REGIONS = re.compile(r"^\s*T\.(reads|writes)\(")


class AttentionSoftcapError(RuntimeError):
    """A paged-attention kernel is not the one this rewrite knows."""


def parseable_script(script: str) -> str:
    """`script` without the printed access regions of blocks whose regions read a buffer
    the block itself allocates (declared before them as `T.Buffer`): the parser infers
    those regions again, as it did for TVM's source, which writes none."""
    lines = script.splitlines()
    allocated = {m.group("name") for m in map(_ALLOCATED_BUFFER.match, lines) if m}
    kept: list[str] = []
    dropping = False
    for line in lines:
        declared = _DECLARED_BUFFER.match(line)
        if declared and declared.group("name") in allocated:
            dropping = True
            continue
        if dropping and _ACCESS_REGIONS.match(line):
            continue
        dropping = False
        kept.append(line)
    return "\n".join(kept)


def capped_script(name: str, pattern: re.Pattern[str], script: str, cap: float) -> str:
    """The TVMScript of kernel `name` with its score store (`pattern`) soft-capped at `cap`."""
    scaled_cap = f"T.float32({cap * LOG2E!r})"
    lines = []
    anchors = 0
    for line in parseable_script(script).splitlines():
        match = pattern.match(line)
        if match:
            anchors += 1
            line = (
                f"{match.group('indent')}{match.group('lhs')} = "
                f"{scaled_cap} * T.tanh({match.group('value')} / {scaled_cap})"
            )
        lines.append(line)
    if anchors != 1:
        raise AttentionSoftcapError(
            f"{name} has {anchors} score stores where the soft-cap expects one: this TVM "
            "version's kernel is not supported with attn_logit_softcapping"
        )
    return "\n".join(lines)


def softcap_attention_kernels(mod: tvm.IRModule, cap: float, gpu: bool) -> tvm.IRModule:
    """`mod` with the scores of every paged-attention kernel (the GPU kernels when `gpu`)
    soft-capped at `cap`."""
    stores = GPU_SCORE_STORES if gpu else CPU_SCORE_STORES
    found = 0
    for global_var, func in list(mod.functions_items()):
        if not isinstance(func, tirx.PrimFunc) or func.attrs is None:
            continue
        symbol = str(func.attrs.get("global_symbol", ""))
        if symbol not in stores:
            continue
        script = capped_script(symbol, stores[symbol], func.script(), cap)
        mod[global_var] = tvm.script.from_source(script)
        found += 1
    if not found:
        raise AttentionSoftcapError(
            "the model has none of TVM's paged-attention kernels: " + ", ".join(stores)
        )
    return mod
