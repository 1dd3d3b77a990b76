"""Attention over KV pages the forward owns: the stand-in for TVM's `PagedKVCache` in the
`prefill_owned` / `decode_owned` functions (causal_lm.py).

Why: TVM's cache runs attention from C++ behind an opaque builtin with metadata it planned on
the host that step, so a decode step cannot be captured whole into one CUDA graph. Here the
pages of every layer and the step's metadata (block tables as CSR, lengths, positions,
append slots) are plain function arguments, and attention is a few `call_tir`s of kernels
the compiler hands in (`OwnedKernels`: TVM's append, ragged and paged prefill and merge
kernels, and a decode kernel), so `RewriteCUDAGraph` sees a static step. The ragged
(causal, own chunk) product may instead be a packed function the runtime registers
(`OwnedKernels.ragged_extern`: FlashInfer's ragged prefill, planned by the runtime for the
forward's rows), since a prefill is not captured. The runtime keeps
the pages and one metadata buffer per batch-size bucket at fixed addresses
(runtime/kv/owned_kv_cache.py).

The object answers the two calls a layer makes of a cache (`get_query_positions`,
`attention_with_fused_qkv`), so model definitions run over it unchanged. It rotates q and k
itself (rotary.py's formula) at the positions the runtime passes, and the kernels run with
their RoPE off.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from tvm import relax, tirx
from tvm.relax.frontend.nn import Tensor, op
from tvm.relax.frontend.nn.core import wrap_nested

from vllm_tvm.model_defs.rotary import rotate_at

DECODE_METADATA = ("page_indptr", "page_values", "last_page_len", "positions", "append_slots")
"""The decode step's metadata arguments, in runtime/kv/decode_step_buffers.py's order: the
rows' pages as CSR over every token, the new one included."""
PREFILL_METADATA = (
    "q_indptr",
    "page_indptr",
    "page_values",
    "last_page_len",
    "positions",
    "append_slots",
)
"""The prefill's metadata arguments: per sequence CSR of its query rows and of the pages of
its tokens cached before this forward (none: no pages, last_page_len the page size), the
last such page's fill; per token its position and its append slot. Each row attends to
its own chunk (the ragged kernel, causal) and to its cached tokens (the paged kernel, no
mask), the two merged by their log-sum-exps, as TVM's cache does."""
FRESH_PREFILL_METADATA = ("q_indptr", "k_rope_offsets", "positions", "append_slots")
"""A prefill of sequences with nothing cached: its keys are its own new rows, so attention
runs over q/k/v as they are (TVM's ragged kernel) and the pages are only written; the k
RoPE offsets (zeros) go unread with RoPE off."""
MIXED_PREFILL_METADATA = (
    "decode_rows",
    "decode_page_indptr",
    "decode_page_values",
    "decode_last_page_len",
    "prompt_rows",
    "q_indptr",
    "page_indptr",
    "page_values",
    "last_page_len",
    "row_order",
    "positions",
    "append_slots",
)
"""A step of one-token rows of sequences with cached tokens beside prompt chunks: the
one-token rows (`decode_rows`, with DECODE_METADATA's page CSR) go through the decode
kernel, the prompt rows (`prompt_rows`, with PREFILL_METADATA's CSRs) through the ragged and
paged kernels, and `row_order` puts [decoded rows, prompt rows] back in the step's row
order; per row (step order) its position and append slot. Why: the paged prefill kernel
run over every row of such a step made the decode-only b256 ramp 0.74x the cache path's
on the H200 (docs/BENCHMARKS.md)."""

_OWN_DECODE_ARGUMENTS = 7


@dataclass(frozen=True)
class OwnedKernels:
    """The TIR kernels of owned-page attention for one model shape and target, all with RoPE
    off and the model's softmax scale bound (compiler/owned_kv_kernels.py makes them).

    - `append(pages, k, v, slots)`: in place, k/v row i at slot i (page * page_size + offset);
    - `decode(q, pages, page_indptr, page_values, last_page_len[, positions, positions])
      -> (out, lse)`;
    - `prefill(q, q_indptr, pages, page_indptr, page_values, last_page_len, k_rope_offsets,
      positions) -> (out, lse)`: every row over all of its sequence's paged keys, no mask;
    - `ragged(q, q_indptr, k, v, kv_indptr, positions, k_rope_offsets) -> (out, lse)`:
      causal over the rows' own k/v; None when `ragged_extern` names the packed function
      `(q, k, v, q_indptr, out, lse)` the runtime registers for it (its lse in the base-2
      convention of TVM's kernels, which `merge` reads);
    - `merge(out, lse, other_out, other_lse)`: in place, the first pair becomes the
      attention over both key sets."""

    append: tirx.PrimFunc
    decode: tirx.PrimFunc
    prefill: tirx.PrimFunc
    ragged: tirx.PrimFunc | None
    merge: tirx.PrimFunc
    page_size: int
    ragged_extern: str | None = None

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
        """`metadata`: DECODE_METADATA, PREFILL_METADATA, FRESH_PREFILL_METADATA or
        MIXED_PREFILL_METADATA by name (a prefill has `q_indptr`); `rotary`: (inverse
        frequencies, cos/sin factor) the cache would have rotated with, None when the model
        rotates every layer itself."""
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
        meta = self.metadata
        if "decode_rows" in meta:
            output = self._mixed_attention(q, k, v, pages)
        elif "k_rope_offsets" in meta:
            output = self._ragged(q, k, v, meta["positions"], meta["k_rope_offsets"])[0]
        elif self.is_prefill:
            output = self._chunk_attention(q, k, v, pages, meta["positions"])
        else:
            inputs = [q, pages, meta["page_indptr"], meta["page_values"], meta["last_page_len"]]
            if self.kernels.decode_takes_positions:
                inputs += [meta["positions"], meta["positions"]]
            output = self._call(self.kernels.decode, "owned_decode_attention", inputs)[0]
        return output.reshape(batch, seq_len, num_q_heads, head_dim)

    def _call(self, kernel: tirx.PrimFunc, name: str, inputs: list[Tensor]) -> tuple[Tensor, ...]:
        """`kernel` over `inputs` (query rows first) -> (out like the rows, lse [rows, heads])."""
        q = inputs[0]
        outputs = [
            Tensor.placeholder(q.shape, q.dtype),
            Tensor.placeholder([q.shape[0], q.shape[1]], "float32"),
        ]
        return tuple(op.tensor_ir_op(kernel, name, inputs, outputs))

    def _ragged(
        self, q: Tensor, k: Tensor, v: Tensor, positions: Tensor, unread: Tensor
    ) -> tuple[Tensor, Tensor]:
        """Each row of q over its own chunk's k/v (causal) -> (out, lse); `unread`: the k
        RoPE offsets TVM's kernel takes and, with RoPE off, does not read."""
        q_indptr = self.metadata["q_indptr"]
        if self.kernels.ragged_extern is None:
            assert self.kernels.ragged is not None
            inputs = [q, q_indptr, k, v, q_indptr, positions, unread]
            out, lse = self._call(self.kernels.ragged, "owned_ragged_prefill_attention", inputs)
            return out, lse
        # Not nn's `op.extern`: it types two outputs as one tuple, which relax refuses.
        outputs = [
            relax.TensorType([*q.shape], q.dtype),
            relax.TensorType([q.shape[0], q.shape[1]], "float32"),
        ]
        inputs = relax.Tuple([x._expr for x in (q, k, v, q_indptr)])
        call = relax.op.call_dps_packed(self.kernels.ragged_extern, inputs, out_ty=outputs)
        out, lse = wrap_nested(call, "owned_ragged_prefill_attention")
        return out, lse

    def _chunk_attention(
        self, q: Tensor, k: Tensor, v: Tensor, pages: Tensor, positions: Tensor
    ) -> Tensor:
        """PREFILL_METADATA's attention of chunk rows q/k/v (k/v already appended): each row
        over its own chunk (causal) merged with its sequence's cached tokens."""
        meta = self.metadata
        # The k RoPE offsets (last_page_len again) go unread with RoPE off.
        unread = meta["last_page_len"]
        out, lse = self._ragged(q, k, v, positions, unread)
        inputs = [q, meta["q_indptr"], pages, meta["page_indptr"], meta["page_values"]]
        inputs += [meta["last_page_len"], unread, positions]
        cached, cached_lse = self._call(self.kernels.prefill, "owned_prefill_attention", inputs)
        merged = op.tensor_ir_inplace_op(
            self.kernels.merge,
            "owned_merge_attention",
            [out, lse, cached, cached_lse],
            [0, 1],
            [Tensor.placeholder(out.shape, out.dtype), Tensor.placeholder(lse.shape, "float32")],
        )
        return merged[0]

    def _mixed_attention(self, q: Tensor, k: Tensor, v: Tensor, pages: Tensor) -> Tensor:
        """MIXED_PREFILL_METADATA's attention: the one-token rows over their pages (k/v
        already appended) with the decode kernel, the prompt rows as a prefill's chunk
        rows; [rows, q heads, d] in the step's row order."""
        meta = self.metadata
        decode_q = op.take(q, meta["decode_rows"], axis=0)
        inputs = [decode_q, pages, meta["decode_page_indptr"], meta["decode_page_values"]]
        inputs += [meta["decode_last_page_len"]]
        if self.kernels.decode_takes_positions:
            decode_positions = op.take(meta["positions"], meta["decode_rows"], axis=0)
            inputs += [decode_positions, decode_positions]
        decoded = self._call(self.kernels.decode, "owned_decode_attention", inputs)[0]
        rows = meta["prompt_rows"]
        prompt_q, prompt_k, prompt_v = (op.take(x, rows, axis=0) for x in (q, k, v))
        positions = op.take(meta["positions"], rows, axis=0)
        prompted = self._chunk_attention(prompt_q, prompt_k, prompt_v, pages, positions)
        return op.take(op.concat([decoded, prompted], dim=0), meta["row_order"], axis=0)
