"""Decode attention over KV pages the step owns, reading its metadata from fixed device buffers.

Why: TVM's `PagedKVCache` runs its attention kernels from C++ behind an opaque builtin and
feeds them metadata it planned on the host that step (`begin_forward`), so Relax's
`RewriteCUDAGraph` cannot capture a decode step across attention. Here the append kernel
TVM's cache launches (`tir_kv_cache_transpose_append`) and a decode-attention kernel are
plain `call_tir`s of a Relax function whose every argument is a buffer the runtime keeps at
a fixed address (the KV pages, and runtime/kv/decode_step_buffers.py's metadata views), so
the whole step becomes one captured region: the graph records the addresses once and replays.

The attention kernel is ours by default (schedules/paged_decode_attention.py: a thread block
per GQA group sharing each K/V load); TVM's `batch_decode_paged_kv` stays selectable, to
measure the one against the other.

The function is marked `num_input = 1`: to `RewriteCUDAGraph` every argument after q is
static, as weights are. That is a promise the caller keeps: the same tensors on every call of a
bucket (new values copied into them, never new tensors), or a replay reads the old ones.

RoPE is not applied here (`rotary_mode` 0): q and k arrive rotated, as the model's own
rotary kernel leaves them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import tvm
from tvm import relax, tirx
from tvm.relax.frontend.nn.llm._decode_kernels import _attention_decode, _attention_decode_cpu
from tvm.relax.frontend.nn.llm._page_kernels import _kv_cache_transpose_append

from vllm_tvm.schedules.paged_decode_attention import paged_decode_attention

STEP_FUNCTION = "decode_attention_step"
APPEND_KERNEL = "device_decode_kv_append"
DECODE_KERNEL = "device_decode_attention"
OWN_KERNEL, TVM_KERNEL = "own", "tvm"
"""The decode-attention kernels the step can call: ours, or TVM's `batch_decode_paged_kv`."""
METADATA_ARGUMENTS = ("page_indptr", "page_values", "last_page_len", "positions", "append_slots")
"""The metadata the step takes after q, k and v, in DecodeStepBuffers.kernel_arguments order."""

_ROTARY_OFF = 0
_ROPE_UNUSED = 1.0
"""rope_scale and rope_theta mean nothing with RoPE off; any value does."""


@dataclass(frozen=True)
class DecodeAttentionShape:
    """The attention of one layer: heads, head size, storage dtype, tokens per KV page."""

    num_q_heads: int
    num_kv_heads: int
    head_dim: int
    dtype: str
    page_size: int = 16

    def pages_shape(self, num_pages: int) -> tuple[int, ...]:
        """One layer's KV pages, TVM's layout: [page, k/v, kv head, slot, head dim]."""
        return (num_pages, 2, self.num_kv_heads, self.page_size, self.head_dim)

    def pages_type(self, num_pages: int) -> relax.TensorType:
        return relax.TensorType(self.pages_shape(num_pages), self.dtype)


def decode_attention_kernels(
    shape: DecodeAttentionShape, target: tvm.target.Target, kernel: str = OWN_KERNEL
) -> tuple[tirx.PrimFunc, tirx.PrimFunc]:
    """The KV-append kernel and the decode-attention kernel `kernel` for `target`, both
    with RoPE off and the 1/sqrt(head_dim) scale bound."""
    append = _kv_cache_transpose_append(
        shape.num_kv_heads, shape.head_dim, shape.dtype, shape.page_size
    )
    if kernel == OWN_KERNEL:
        decode = paged_decode_attention(
            shape.num_q_heads,
            shape.num_kv_heads,
            shape.head_dim,
            shape.dtype,
            shape.page_size,
            gpu=target.kind.name != "llvm",
        )
    elif kernel == TVM_KERNEL:
        decode = _tvm_decode_kernel(shape, target)
    else:
        raise ValueError(
            f"decode-attention kernel {kernel!r}: expected {OWN_KERNEL!r} or {TVM_KERNEL!r}"
        )
    # Own symbols: the pipeline's CPU pass swaps TVM's decode kernel, found by its symbol,
    # for one that takes RoPE arguments these calls no longer pass.
    return (
        append.with_attr("global_symbol", APPEND_KERNEL),
        decode.with_attr("global_symbol", DECODE_KERNEL),
    )


def _tvm_decode_kernel(shape: DecodeAttentionShape, target: tvm.target.Target) -> tirx.PrimFunc:
    """TVM's GPU kernel on GPUs, its scalar one on CPUs, specialised to RoPE off. It takes
    our kernel's arguments and then the positions twice (its RoPE offsets, unused)."""
    arguments = (shape.num_kv_heads, shape.num_q_heads, shape.head_dim, shape.dtype, False, {})
    if target.kind.name == "llvm":
        decode = _attention_decode_cpu(*arguments, page_size=shape.page_size)
    else:
        decode = _attention_decode(*arguments, target, page_size=shape.page_size)
    rotary_mode, rope_scale, rope_theta, sm_scale = decode.params[-4:]
    return decode.specialize(
        {
            rotary_mode: tirx.IntImm("int32", _ROTARY_OFF),
            rope_scale: tirx.FloatImm("float32", _ROPE_UNUSED),
            rope_theta: tirx.FloatImm("float32", _ROPE_UNUSED),
            sm_scale: tirx.FloatImm("float32", shape.head_dim**-0.5),
        }
    )


def _merge_parts(
    output: relax.Expr, lse: relax.Expr, rows: int, splits: int, shape: DecodeAttentionShape
) -> relax.Expr:
    """The attention of each row from its `splits` parts: their outputs weighed by
    exp2(lse - max lse) (the kernel's lse is in log2 units), in fp32. An empty part's lse of
    -5e4 weighs nothing beside a part with keys."""
    op = relax.op
    heads, dim = shape.num_q_heads, shape.head_dim
    parts = op.astype(op.reshape(output, (rows, splits, heads, dim)), "float32")
    lse = op.reshape(lse, (rows, splits, heads))
    weights = op.exp(
        op.multiply(
            op.subtract(lse, op.max(lse, axis=1, keepdims=True)),
            relax.const(math.log(2), "float32"),
        )
    )
    total = op.sum(op.multiply(parts, op.expand_dims(weights, -1)), axis=1)
    merged = op.divide(total, op.expand_dims(op.sum(weights, axis=1), -1))
    return op.astype(merged, shape.dtype)


def build_decode_attention_step(
    shape: DecodeAttentionShape,
    layers: int,
    rows: int,
    pages_per_row: int,
    num_pages: int,
    target: tvm.target.Target,
    splits: int = 1,
    kernel: str = OWN_KERNEL,
) -> tvm.IRModule:
    """A module with `decode_attention_step(q, k, v, <metadata>, pages_0 .. pages_{L-1})`.

    Each layer appends k and v at the rows' append slots of its pages, then attends with the
    previous layer's output as its query (so the layers depend on each other as a model's
    do); the result is the last layer's output [rows, q heads, head dim]. With `splits` > 1
    each row's keys are attended in that many parts (runtime/kv/decode_step_buffers.py)
    and merged. This is the attention of a decode step in isolation: what the model's decode
    function emits per layer, to test and to time capture with.

    Two kernels stay outside the graph, both for TVM 0.27's `RewriteCUDAGraph`, which (seen
    lowering this function) fetches a captured region's buffers only after the region when
    the region starts at the function's first binding, and drops the region's outputs when
    they are the function's result. So the step starts with a kernel reading its one
    dynamic input (q), and its last kernel writes a fresh result."""
    append, decode = decode_attention_kernels(shape, target, kernel)
    tensor = relax.TensorType
    parts = rows * splits
    q = relax.Var("q", tensor((rows, shape.num_q_heads, shape.head_dim), shape.dtype))
    kv_type = tensor((rows, shape.num_kv_heads, shape.head_dim), shape.dtype)
    k, v = relax.Var("k", kv_type), relax.Var("v", kv_type)
    sizes = (parts + 1, rows * pages_per_row, parts, parts, rows)
    metadata = [
        relax.Var(name, tensor((size,), "int32"))
        for name, size in zip(METADATA_ARGUMENTS, sizes, strict=True)
    ]
    indptr, values, last_page_len, positions, append_slots = metadata
    rope_positions = [positions, positions] if kernel == TVM_KERNEL else []
    pages = [relax.Var(f"pages_{layer}", shape.pages_type(num_pages)) for layer in range(layers)]
    out_type = [
        tensor((parts, shape.num_q_heads, shape.head_dim), shape.dtype),
        tensor((parts, shape.num_q_heads), "float32"),
    ]
    builder = relax.BlockBuilder()
    with builder.function(STEP_FUNCTION, [q, k, v, *metadata, *pages], attrs={"num_input": 1}):
        append_var = builder.add_func(append, APPEND_KERNEL)
        decode_var = builder.add_func(decode, DECODE_KERNEL)
        with builder.dataflow():
            # q read by a kernel, exactly (a plain copy would lower to a view, no kernel).
            query: relax.Expr = builder.emit(relax.op.negative(relax.op.negative(q)))
            for layer_pages in pages:
                written = builder.emit(
                    relax.call_tir_inplace(
                        append_var,
                        [layer_pages, k, v, append_slots],
                        inplace_indices=[0],
                        out_ty=layer_pages.ty,
                    )
                )
                part_query = query if splits == 1 else relax.op.repeat(query, splits, axis=0)
                inputs = [part_query, written, indptr, values, last_page_len, *rope_positions]
                attended = builder.emit(relax.call_tir(decode_var, inputs, out_ty=out_type))
                output = relax.TupleGetItem(attended, 0)
                if splits > 1:
                    output = _merge_parts(
                        output, relax.TupleGetItem(attended, 1), rows, splits, shape
                    )
                query = builder.emit(output)
            result = builder.emit_output(query)
        builder.emit_func_output(result)
    return builder.get()
