"""Attention over KV pages the forward owns: the stand-in for TVM's `PagedKVCache` in the
`prefill_owned` / `decode_owned` functions (causal_lm.py).

Why: TVM's cache runs attention from C++ behind an opaque builtin with metadata it planned on
the host that step, so a decode step cannot be captured whole into one CUDA graph. Here the
pages of every layer and the step's metadata (block tables as CSR, lengths, positions,
append slots) are plain function arguments, and attention is a few `call_tir`s of kernels
the compiler hands in (`OwnedKernels`: TVM's append and paged prefill kernels, and a decode
kernel), so `RewriteCUDAGraph` sees a static step. The runtime keeps the pages and one
metadata buffer per batch-size bucket at fixed addresses (runtime/kv/owned_kv_cache.py).

The object answers the two calls a layer makes of a cache (`get_query_positions`,
`attention_with_fused_qkv`), so model definitions run over it unchanged. It rotates q and k
itself (rotary.py's formula) at the positions the runtime passes, and the kernels run with
their RoPE off.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from tvm import tirx
from tvm.relax.frontend.nn import Tensor, op

from vllm_tvm.model_defs.rotary import rotate_at

DECODE_METADATA = ("page_indptr", "page_values", "last_page_len", "positions", "append_slots")
"""The decode step's metadata arguments, in runtime/kv/decode_step_buffers.py's order."""
PREFILL_METADATA = (
    "q_indptr",
    "page_indptr",
    "page_values",
    "last_page_len",
    "positions",
    "append_slots",
)
"""The prefill's metadata arguments: per sequence CSR of its query rows and of its pages,
its last page's fill; per token its position and its append slot."""
FRESH_PREFILL_METADATA = ("q_indptr", "k_rope_offsets", "positions", "append_slots")
"""A prefill of sequences with nothing cached: its keys are its own new rows, so attention
runs over q/k/v as they are (TVM's ragged kernel) and the pages are only written; the k
RoPE offsets (zeros) go unread with RoPE off."""

MIXED_PREFILL_METADATA = (
    "decode_rows",
    "page_indptr",
    "page_values",
    "last_page_len",
    "prompt_rows",
    "q_indptr",
    "k_rope_offsets",
    "row_order",
    "positions",
    "append_slots",
)
"""A step of one-token rows of sequences with cached tokens beside prompts with nothing
cached: the one-token rows (`decode_rows`, with DECODE_METADATA's page CSR) go through the
decode kernel, the prompts' rows (`prompt_rows`, CSR `q_indptr`) through the ragged kernel
over their own k/v, and `row_order` puts [decoded rows, prompt rows] back in the step's
row order. Per row (step order): its position and append slot. Why: the paged prefill
kernel run over every row of such a step made the decode-only b256 ramp 0.74x the cache
path's on the H200 (docs/BENCHMARKS.md)."""


_OWN_DECODE_ARGUMENTS = 7


@dataclass(frozen=True)
class OwnedKernels:
    """The TIR kernels of owned-page attention for one model shape and target, all with RoPE
    off and the model's softmax scale bound (compiler/owned_kv_kernels.py makes them).

    - `append(pages, k, v, slots)`: in place, k/v row i at slot i (page * page_size + offset);
    - `decode(q, pages, page_indptr, page_values, last_page_len[, positions, positions])
      -> (out, lse)`;
    - `prefill(q, q_indptr, pages, page_indptr, page_values, last_page_len, k_rope_offsets,
      positions) -> (out, lse)`: causal, each sequence's rows the last of its keys;
    - `ragged(q, q_indptr, k, v, kv_indptr, positions, k_rope_offsets) -> (out, lse)`:
      causal over the rows' own k/v."""

    append: tirx.PrimFunc
    decode: tirx.PrimFunc
    prefill: tirx.PrimFunc
    ragged: tirx.PrimFunc
    page_size: int

    @property
    def decode_takes_positions(self) -> bool:
        """TVM's decode kernel takes the positions twice after our kernel's arguments (its
        RoPE offsets, unread with RoPE off)."""
        return len(self.decode.params) > _OWN_DECODE_ARGUMENTS


class OwnedPagedAttention:
    """The pages and metadata of one forward, answering a layer's cache calls."""

    def __init__(
        self,
        kernels: OwnedKernels,
        pages: Sequence[Tensor],
        metadata: dict[str, Tensor],
        rotary: tuple[np.ndarray, float] | None,
        num_kv_heads: int,
    ) -> None:
        """`metadata`: DECODE_METADATA or PREFILL_METADATA by name (a prefill has
        `q_indptr`); `rotary`: (inverse frequencies, cos/sin factor) the cache would have
        rotated with, None when the model rotates every layer itself."""
        self.kernels = kernels
        self.pages = list(pages)
        self.metadata = metadata
        self.rotary = rotary
        self.num_kv_heads = num_kv_heads
        self.written: list[Tensor] = []
        """Each layer's pages after its append, in layer order: a fresh prefill, whose
        attention reads no pages, returns them so the appends are not dead code."""

    @property
    def is_prefill(self) -> bool:
        return "q_indptr" in self.metadata

    def get_query_positions(self, total_length: tirx.PrimExpr) -> Tensor:
        """Each query row's position (what rotary.py rotates at)."""
        return self.metadata["positions"]

    def attention_with_fused_qkv(
        self, layer_id: int, qkv: Tensor, num_q_heads: int, sm_scale: float
    ) -> Tensor:
        """Layer `layer_id`'s attention of qkv [b, s, q + 2 kv heads, d]: k/v appended to its
        pages, then every query row over its sequence's keys; [b, s, q heads, d]."""
        batch, seq_len, heads, head_dim = qkv.shape
        if self.rotary is not None:
            inv_freq, factor = self.rotary
            qkv = rotate_at(
                qkv, self.metadata["positions"], inv_freq, factor, num_q_heads + self.num_kv_heads
            )
        rows = qkv.reshape(batch * seq_len, heads, head_dim)
        kv_heads = self.num_kv_heads
        q, k, v = op.split(rows, [num_q_heads, num_q_heads + kv_heads], axis=1)
        pages = op.tensor_ir_inplace_op(
            self.kernels.append,
            "owned_kv_append",
            [self.pages[layer_id], k, v, self.metadata["append_slots"]],
            0,
            Tensor.placeholder(self.pages[layer_id].shape, self.pages[layer_id].dtype),
        )
        self.written.append(pages)
        out_shape = [Tensor.placeholder(q.shape, q.dtype)]
        lse_shape = [Tensor.placeholder([q.shape[0], num_q_heads], "float32")]
        meta = self.metadata
        if "decode_rows" in meta:
            output = self._mixed_attention(q, k, v, pages, num_q_heads)
            return output.reshape(batch, seq_len, num_q_heads, head_dim)
        if "k_rope_offsets" in meta:
            inputs = [q, meta["q_indptr"], k, v, meta["q_indptr"], meta["positions"]]
            inputs += [meta["k_rope_offsets"]]
            kernel, name = self.kernels.ragged, "owned_ragged_prefill_attention"
        elif self.is_prefill:
            inputs = [q, meta["q_indptr"], pages, meta["page_indptr"], meta["page_values"]]
            # The kernel's k RoPE offsets (last_page_len again) go unread with its RoPE off.
            inputs += [meta["last_page_len"], meta["last_page_len"], meta["positions"]]
            kernel, name = self.kernels.prefill, "owned_prefill_attention"
        else:
            inputs = [q, pages, meta["page_indptr"], meta["page_values"], meta["last_page_len"]]
            kernel, name = self.kernels.decode, "owned_decode_attention"
            if self.kernels.decode_takes_positions:
                inputs += [meta["positions"], meta["positions"]]
        output, _ = op.tensor_ir_op(kernel, name, inputs, [*out_shape, *lse_shape])
        return output.reshape(batch, seq_len, num_q_heads, head_dim)

    def _mixed_attention(
        self, q: Tensor, k: Tensor, v: Tensor, pages: Tensor, num_q_heads: int
    ) -> Tensor:
        """MIXED_PREFILL_METADATA's attention: the one-token rows over their pages (k/v
        already appended) with the decode kernel, the prompt rows over their own k/v with
        the ragged kernel; [rows, q heads, d] in the step's row order."""
        meta = self.metadata

        def outputs(rows: Tensor) -> list[Tensor]:
            return [
                Tensor.placeholder(rows.shape, rows.dtype),
                Tensor.placeholder([rows.shape[0], num_q_heads], "float32"),
            ]

        decode_q = op.take(q, meta["decode_rows"], axis=0)
        inputs = [decode_q, pages, meta["page_indptr"], meta["page_values"]]
        inputs += [meta["last_page_len"]]
        if self.kernels.decode_takes_positions:
            decode_positions = op.take(meta["positions"], meta["decode_rows"], axis=0)
            inputs += [decode_positions, decode_positions]
        decoded, _ = op.tensor_ir_op(
            self.kernels.decode, "owned_decode_attention", inputs, outputs(decode_q)
        )
        rows = meta["prompt_rows"]
        prompt_q, prompt_k, prompt_v = (op.take(x, rows, axis=0) for x in (q, k, v))
        prompt_positions = op.take(meta["positions"], rows, axis=0)
        inputs = [prompt_q, meta["q_indptr"], prompt_k, prompt_v, meta["q_indptr"]]
        inputs += [prompt_positions, meta["k_rope_offsets"]]
        prompted, _ = op.tensor_ir_op(
            self.kernels.ragged, "owned_ragged_prefill_attention", inputs, outputs(prompt_q)
        )
        return op.take(op.concat([decoded, prompted], dim=0), meta["row_order"], axis=0)
