"""The kernels a model's owned-page functions call (model_defs/owned_kv.py), and the choice
of whether a build exports those functions.

Why here: the model definition may not import kernels (the layering test), so the compiler
makes them for the model's shape and target and hands them in before export: TVM's append
kernel and our decode kernel (compiler/device_decode_attention.py's pair), TVM's TIR ragged
(causal) and paged (unmasked, over the cached tokens) prefill kernels, all specialised to
RoPE off and 1/sqrt(head_dim), and TVM's merge of two attention states. The
decode kernel is ours on CUDA; on CPUs TVM's, which takes the positions twice more (its
RoPE offsets, unused): our kernel's CPU form, exact on its own, gave wrong attention inside
a model's module on llvm (not yet understood), so the CPU path keeps TVM's.

With attention `flashinfer` the ragged product is FlashInfer's instead
(`OWNED_RAGGED_ATTENTION`, artifacts/owned_kv.py): the runtime plans it for each prefill's
rows and calls the kernel the model library links for TVM's FlashInfer cache. Why: TVM's
TIR ragged kernel took about 2.8 ms a layer for one 1,024-token prompt at the 8B shape on
the H200, leaving TTFT near 100 ms (docs/BENCHMARKS.md).

The choice is the `owned_kv` compile option (artifacts/compile_options.py), on any target
(the CPU tests check the same functions against transformers); the runtime spec's
`owned_pages` then tells the runtime to run them. `decode_owned` is marked for
`RewriteCUDAGraph` (`mark_owned_decode`).
"""

from __future__ import annotations

import tvm
from tvm import tirx
from tvm.relax.frontend.nn.llm._decode_kernels import (
    _merge_state_inplace,
    _merge_state_inplace_cpu,
)
from tvm.relax.frontend.nn.llm._prefill_kernels import (
    _attention_prefill,
    _attention_prefill_cpu,
    _attention_prefill_ragged,
    _attention_prefill_ragged_cpu,
)

from vllm_tvm.artifacts.backends import ATTENTION_FLASHINFER
from vllm_tvm.artifacts.owned_kv import (
    OWNED_DECODE,
    OWNED_DECODE_MAX_BATCH,
    OWNED_DECODE_SINGLE,
    OWNED_RAGGED_ATTENTION,
)
from vllm_tvm.compiler.device_decode_attention import (
    OWN_KERNEL,
    TVM_KERNEL,
    DecodeAttentionShape,
    decode_attention_kernels,
)
from vllm_tvm.model_defs.causal_lm import PagedCausalLM
from vllm_tvm.model_defs.owned_kv import OwnedKernels

PREFILL_KERNEL = "owned_prefill_paged_kv"
RAGGED_KERNEL = "owned_prefill_ragged_kv"
MERGE_KERNEL = "owned_merge_attention_states"
"""Own symbols: TVM's cache adds `batch_prefill_paged_kv` / `batch_prefill_ragged_kv` /
`tir_attention_merge_state` to the same library."""
PAGE_SIZE = 16
_CAUSAL, _UNMASKED, _ROTARY_OFF, _ROPE_UNUSED = 1, 0, 0, 1.0
_OPAQUE = 8
"""relax's OpPatternKind kOpaque."""


def attach_owned_kernels(
    model: PagedCausalLM,
    target: tvm.target.Target,
    speculative_role: str | None,
    quantized_weights: bool,
    attention: str,
) -> None:
    """Give `model` (asked for with the `owned_kv` option) its owned-page kernels, the
    ragged product FlashInfer's when `attention` is `flashinfer`; a model,
    a speculative build or weights compiled quantized they do not serve are refused by name
    (their forwards have only been checked for float weights and plain decoding)."""
    refusal = model.owned_kv_refusal()
    if refusal is None and speculative_role is not None:
        refusal = f"the speculative build {speculative_role!r}"
    if refusal is None and quantized_weights:
        refusal = "weights compiled quantized (use --weight-format dequantized)"
    if refusal is not None:
        raise ValueError(f"owned_kv: owned KV pages do not serve {refusal}")
    q_heads, kv_heads = model.cache_heads()
    shape = DecodeAttentionShape(q_heads, kv_heads, model.config.head_dim, model.dtype, PAGE_SIZE)
    kernel = OWN_KERNEL if target.kind.name == "cuda" else TVM_KERNEL
    append, decode = decode_attention_kernels(shape, target, kernel)
    extern = OWNED_RAGGED_ATTENTION if attention == ATTENTION_FLASHINFER else None
    ragged = None if extern is not None else _opaque(_ragged_kernel(shape, target))
    append, decode, prefill, merge = (
        _opaque(kernel)
        for kernel in (append, decode, _prefill_kernel(shape, target), _merge_kernel(shape, target))
    )
    model.owned_kernels = OwnedKernels(append, decode, prefill, ragged, merge, PAGE_SIZE, extern)


def _opaque(kernel: tirx.PrimFunc) -> tirx.PrimFunc:
    """`kernel` kept whole by FuseOps: fused with the elementwise ops after it (as its
    analysis would allow the decode kernel), its shared scratch buffers broke the result."""
    return kernel.with_attr("op_pattern", _OPAQUE)


def _prefill_kernel(shape: DecodeAttentionShape, target: tvm.target.Target) -> tirx.PrimFunc:
    arguments = (shape.num_kv_heads, shape.num_q_heads, shape.head_dim, shape.dtype, False, {})
    if target.kind.name == "llvm":
        prefill = _attention_prefill_cpu(*arguments, page_size=shape.page_size)
    else:
        prefill = _attention_prefill(*arguments, target, page_size=shape.page_size)
    return _without_rope(prefill, shape, _UNMASKED).with_attr("global_symbol", PREFILL_KERNEL)


def _ragged_kernel(shape: DecodeAttentionShape, target: tvm.target.Target) -> tirx.PrimFunc:
    heads = (shape.num_kv_heads, shape.num_q_heads, shape.head_dim, shape.head_dim)
    if target.kind.name == "llvm":
        ragged = _attention_prefill_ragged_cpu(*heads, shape.dtype, {})
    else:
        ragged = _attention_prefill_ragged(*heads, shape.dtype, {}, target)
    return _without_rope(ragged, shape, _CAUSAL).with_attr("global_symbol", RAGGED_KERNEL)


def _merge_kernel(shape: DecodeAttentionShape, target: tvm.target.Target) -> tirx.PrimFunc:
    if target.kind.name == "llvm":
        merge = _merge_state_inplace_cpu(shape.dtype)
    else:
        merge = _merge_state_inplace(shape.num_q_heads, shape.head_dim, shape.dtype, target)
    return merge.with_attr("global_symbol", MERGE_KERNEL)


def _without_rope(kernel: tirx.PrimFunc, shape: DecodeAttentionShape, mask: int) -> tirx.PrimFunc:
    """A TVM prefill kernel with its trailing scalars bound: `mask` (_CAUSAL, _UNMASKED),
    RoPE off, our scale."""
    causal, rotary_mode, rope_scale, rope_theta, sm_scale = kernel.params[-5:]
    return kernel.specialize(
        {
            causal: tirx.IntImm("int32", mask),
            rotary_mode: tirx.IntImm("int32", _ROTARY_OFF),
            rope_scale: tirx.FloatImm("float32", _ROPE_UNUSED),
            rope_theta: tirx.FloatImm("float32", _ROPE_UNUSED),
            sm_scale: tirx.FloatImm("float32", shape.head_dim**-0.5),
        }
    )


def mark_owned_decode(mod: tvm.IRModule) -> tvm.IRModule:
    """`decode_owned` and `decode_owned_single` with one dynamic input (the token ids) for
    `RewriteCUDAGraph`: the metadata, pages and weights after it are the same tensors on
    every call of a bucket (runtime/kv/owned_kv_cache.py keeps them), and the batched
    step's buffers planned for `OWNED_DECODE_MAX_BATCH` rows, so each batch size is
    captured once and replayed."""
    if OWNED_DECODE not in [gv.name_hint for gv in mod.functions]:
        return mod
    function = mod[OWNED_DECODE].with_attr("num_input", 1)
    function = function.with_attr("tir_var_upper_bound", {"batch_size": OWNED_DECODE_MAX_BATCH})
    mod[OWNED_DECODE] = function
    mod[OWNED_DECODE_SINGLE] = mod[OWNED_DECODE_SINGLE].with_attr("num_input", 1)
    return mod
