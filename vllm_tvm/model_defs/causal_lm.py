"""The compiled contract every decoder-only model exports, written once.

Why: the functions the runtime calls (`prefill`, `decode`, `decode_single`,
`create_kv_cache`; docs/ARCHITECTURE.md) and their signatures do not depend on the family.
A model definition (llama.py, learned_positions.py) subclasses `PagedCausalLM` and supplies
its body `model(hidden, kv_cache)`, `embed`, `logits` and the KV cache's RoPE arguments
(`cache_rope`), and may set its layers' attention kinds (`cache_layers`: sliding windows);
the paged KV cache itself is built here from the config's head shape.
"""

from __future__ import annotations

from typing import Any, Protocol

from tvm import relax as rx
from tvm import tirx
from tvm.relax.frontend import nn
from tvm.relax.frontend.nn import Tensor, op
from tvm.relax.frontend.nn.llm.kv_cache import (
    FlashInferPagedKVCache,
    PagedKVCache,
    RopeMode,
    TIRPagedKVCache,
)
from tvm.target import Target

from vllm_tvm.model_defs.owned_kv import (
    DECODE_METADATA,
    FRESH_PREFILL_METADATA,
    MIXED_PREFILL_METADATA,
    PREFILL_METADATA,
    OwnedKernels,
    OwnedPagedAttention,
)
from vllm_tvm.model_defs.rope_scaling import cache_rope_frequencies


class HeadShape(Protocol):
    """What the contract reads from a model config."""

    hidden_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int


class PagedCausalLM(nn.Module):
    """Exported functions over a paged KV cache; subclasses define the network."""

    model: nn.Module
    owned_kv_ready = False
    """Whether this definition has run over owned KV pages (owned_kv.py) against its oracle;
    the others keep TVM's cache on every target."""

    def __init__(self, config: Any, dtype: str, target: Target, attention: str = "tir") -> None:
        """`attention`: `tir` (TVM's TIR kernels) or `flashinfer` (compiler/attention.py)."""
        self.config = config
        self.dtype = dtype
        self.target = target
        self.attention = attention
        self.kv_cache_extern_mods: list[Any] = []
        """Compiled objects the KV cache's kernels live in (FlashInfer), set by export."""
        self.exports_hidden_states = False
        """Whether `prefill_hidden` is exported too (a target drafted for by EAGLE or MTP)."""
        self.owned_kernels: OwnedKernels | None = None
        """Set by export when the model also runs over KV pages it owns (owned_kv.py): then
        `prefill_owned`, `decode_owned` and `decode_owned_single` are exported beside the
        cache's functions."""

    def owned_kv_refusal(self) -> str | None:
        """Why this model cannot run over owned KV pages, None when it can: owned_kv.py's
        kernels attend every key of the sequence at scale 1/sqrt(head_dim), one rank."""
        cfg = self.config
        if not self.owned_kv_ready:
            return f"{type(self).__name__} (not yet checked over owned pages)"
        if any(kind != "mha" for kind in self.cache_layers()["attn_kind"]):
            return "layers other than full attention"
        if getattr(cfg, "attn_logit_softcapping", None) is not None:
            return "attention logit soft-capping"
        if abs(getattr(cfg, "attention_scale", cfg.head_dim**-0.5) - cfg.head_dim**-0.5) > 0:
            return "an attention scale other than 1/sqrt(head_dim)"
        if getattr(cfg, "tensor_parallel_shards", 1) != 1:
            return "tensor parallelism"
        return None

    def _owned_attention(self, pages: Any, metadata: dict[str, Tensor]) -> OwnedPagedAttention:
        """The cache stand-in of an owned-page forward, rotating as the cache would."""
        if self.owned_kernels is None:
            raise ValueError("the model was exported without owned-KV kernels")
        rope = self.cache_rope()
        rotary = None
        if rope["rope_mode"] != RopeMode.NONE:  # NONE: the model rotates every layer itself
            rope_type = rope["rope_scaling"].get("rope_type", "default")
            params = rope["rope_scaling"]
            if rope["rope_scale"] != 1.0:  # linear: the cache scales positions
                rope_type, params = "linear", {"factor": 1.0 / rope["rope_scale"]}
            rotary = cache_rope_frequencies(
                rope_type, params, rope["rope_theta"], rope["rotary_dim"]
            )
        _, kv_heads = self.cache_heads()
        return OwnedPagedAttention(self.owned_kernels, list(pages), metadata, rotary, kv_heads)

    def prefill_owned(
        self,
        input_embed: Tensor,
        logit_positions: Tensor,
        q_indptr: Tensor,
        page_indptr: Tensor,
        page_values: Tensor,
        last_page_len: Tensor,
        positions: Tensor,
        append_slots: Tensor,
        pages: Any,
    ) -> Tensor:
        """`prefill` over owned pages (PREFILL_METADATA); the pages are written in place."""
        values = (q_indptr, page_indptr, page_values, last_page_len, positions, append_slots)
        attention = self._owned_attention(pages, dict(zip(PREFILL_METADATA, values, strict=True)))
        hidden = self.model(input_embed, attention)
        return self.logits(op.take(hidden, logit_positions, axis=1))

    def prefill_owned_fresh(
        self,
        input_embed: Tensor,
        logit_positions: Tensor,
        q_indptr: Tensor,
        k_rope_offsets: Tensor,
        positions: Tensor,
        append_slots: Tensor,
        pages: Any,
    ) -> tuple[Tensor, ...]:
        """`prefill_owned` of sequences with nothing cached (FRESH_PREFILL_METADATA):
        the logits, then every layer's pages (the same tensors, written in place)."""
        values = (q_indptr, k_rope_offsets, positions, append_slots)
        metadata = dict(zip(FRESH_PREFILL_METADATA, values, strict=True))
        attention = self._owned_attention(pages, metadata)
        hidden = self.model(input_embed, attention)
        return (self.logits(op.take(hidden, logit_positions, axis=1)), *attention.written)

    def prefill_owned_mixed(
        self,
        input_embed: Tensor,
        logit_positions: Tensor,
        decode_rows: Tensor,
        decode_page_indptr: Tensor,
        decode_page_values: Tensor,
        decode_last_page_len: Tensor,
        prompt_rows: Tensor,
        q_indptr: Tensor,
        page_indptr: Tensor,
        page_values: Tensor,
        last_page_len: Tensor,
        row_order: Tensor,
        positions: Tensor,
        append_slots: Tensor,
        pages: Any,
    ) -> Tensor:
        """`prefill_owned` of one-token rows of cached sequences beside prompt chunks
        (MIXED_PREFILL_METADATA): the former on the decode kernel."""
        values = (decode_rows, decode_page_indptr, decode_page_values, decode_last_page_len)
        values += (prompt_rows, q_indptr, page_indptr, page_values, last_page_len, row_order)
        metadata = dict(
            zip(MIXED_PREFILL_METADATA, (*values, positions, append_slots), strict=True)
        )
        hidden = self.model(input_embed, self._owned_attention(pages, metadata))
        return self.logits(op.take(hidden, logit_positions, axis=1))

    def decode_owned(
        self,
        input_ids: Tensor,
        page_indptr: Tensor,
        page_values: Tensor,
        last_page_len: Tensor,
        positions: Tensor,
        append_slots: Tensor,
        pages: Any,
    ) -> Tensor:
        """One decode step over owned pages from the token ids (DECODE_METADATA): embedding
        to fp32 logits [batch, vocab] in one function, so one CUDA graph holds it all."""
        values = (page_indptr, page_values, last_page_len, positions, append_slots)
        attention = self._owned_attention(pages, dict(zip(DECODE_METADATA, values, strict=True)))
        hidden = self.embed(input_ids)
        hidden = self.model(op.reshape(hidden, (input_ids.shape[0], 1, -1)), attention)
        return op.reshape(self.logits(hidden), (input_ids.shape[0], -1))

    def embed(self, input_ids: Tensor) -> Tensor:
        """Token ids [n] -> embeddings [n, hidden]."""
        raise NotImplementedError

    def logits(self, hidden: Tensor) -> Tensor:
        """fp32 logits of final hidden states."""
        raise NotImplementedError

    def cache_rope(self) -> dict[str, Any]:
        """`rope_mode`, `rope_scale`, `rope_theta`, `rope_scaling`, `rotary_dim` of the cache."""
        raise NotImplementedError

    def cache_heads(self) -> tuple[int, int]:
        """(q heads, KV heads) the paged KV cache is built for."""
        cfg: HeadShape = self.config
        return cfg.num_attention_heads, cfg.num_key_value_heads

    def cache_layers(self) -> dict[str, Any]:
        """`attn_kind` (one TVM attention kind per KV-cache layer) and optionally
        `layer_sliding_window_size` of the cache: by default every layer attends to all."""
        return {"attn_kind": ["mha"] * self.config.num_hidden_layers}

    def prefill(
        self, input_embed: Tensor, logit_positions: Tensor, kv_cache: PagedKVCache
    ) -> tuple[Tensor, PagedKVCache]:
        """Ragged prefill of the sequences begun in `kv_cache`; fp32 logits at the positions."""
        hidden = self.model(input_embed, kv_cache)
        hidden = op.take(hidden, logit_positions, axis=1)
        return self.logits(hidden), kv_cache

    def prefill_hidden(
        self, input_embed: Tensor, logit_positions: Tensor, kv_cache: PagedKVCache
    ) -> tuple[Tensor, Tensor, PagedKVCache]:
        """`prefill`, and the final-norm hidden states of every token [1, seq_len, hidden]."""
        hidden = self.model(input_embed, kv_cache)
        logits = self.logits(op.take(hidden, logit_positions, axis=1))
        return logits, hidden, kv_cache

    def decode(self, input_embed: Tensor, kv_cache: PagedKVCache) -> tuple[Tensor, PagedKVCache]:
        """One token for each of `batch` sequences; fp32 logits [batch, 1, vocab]."""
        hidden = self.model(input_embed, kv_cache)
        return self.logits(hidden), kv_cache

    def decode_single(
        self, input_embed: Tensor, kv_cache: PagedKVCache
    ) -> tuple[Tensor, PagedKVCache]:
        """`decode` for exactly one sequence: static shapes let every projection be
        scheduled as a plain GEMV (the batch-1 case is the latency-critical one)."""
        return self.decode(input_embed, kv_cache)

    def create_kv_cache(
        self,
        max_batch_size: tirx.Var,
        max_total_seq_len: tirx.Var,
        prefill_chunk_size: tirx.Var,
        page_size: tirx.Var,
        support_sliding_window: tirx.Var,
    ) -> PagedKVCache:
        """The paged KV cache object, sized at run time."""
        cfg: HeadShape = self.config
        cache_class = FlashInferPagedKVCache if self.attention == "flashinfer" else TIRPagedKVCache
        layers = self.cache_layers()
        num_layers = len(layers["attn_kind"])
        q_heads, kv_heads = self.cache_heads()
        cache = cache_class(
            **layers,
            max_batch_size=max_batch_size,
            max_total_seq_len=max_total_seq_len,
            prefill_chunk_size=prefill_chunk_size,
            page_size=page_size,
            support_sliding_window=support_sliding_window,
            layer_partition=rx.ShapeExpr([0, num_layers]),
            num_hidden_layers=num_layers,
            num_attention_heads=q_heads,
            num_key_value_heads=kv_heads,
            qk_head_dim=cfg.head_dim,
            v_head_dim=cfg.head_dim,
            mla_original_qk_head_dim=0,
            mla_original_v_head_dim=0,
            rope_ext_factors=rx.prim_value(0),
            **self.cache_rope(),
            enable_disaggregation=False,
            dtype=self.dtype,
            target=self.target,
        )
        self.kv_cache_extern_mods = list(getattr(cache, "extern_mods", []))
        return cache

    def decode_owned_single(
        self,
        input_ids: Tensor,
        page_indptr: Tensor,
        page_values: Tensor,
        last_page_len: Tensor,
        positions: Tensor,
        append_slots: Tensor,
        pages: Any,
    ) -> Tensor:
        """`decode_owned` for exactly one sequence (static shapes, GEMV projections)."""
        metadata = (page_indptr, page_values, last_page_len, positions, append_slots)
        return self.decode_owned(input_ids, *metadata, pages)

    def _owned_spec(self) -> dict[str, Any]:
        """Signatures of `prefill_owned` / `decode_owned` when exported."""
        if self.owned_kernels is None:
            return {}
        cfg: HeadShape = self.config
        _, kv_heads = self.cache_heads()
        page_size = self.owned_kernels.page_size
        page = ["num_pages", 2, kv_heads, page_size, cfg.head_dim]
        pages = [nn.spec.Tensor(page, self.dtype) for _ in range(cfg.num_hidden_layers)]
        packed = {"param_mode": "packed", "effect_mode": "none"}

        def ints(size: str | int) -> nn.spec.Tensor:
            return nn.spec.Tensor([size], "int32")

        def decode(rows: str | int, indptr: str | int) -> dict[str, Any]:
            return {
                "input_ids": ints(rows),
                "page_indptr": ints(indptr),
                "page_values": ints("num_page_values"),
                "last_page_len": ints(rows),
                "positions": ints(rows),
                "append_slots": ints(rows),
                "pages": pages,
                "$": packed,
            }

        return {
            "prefill_owned": {
                "input_embed": nn.spec.Tensor([1, "seq_len", cfg.hidden_size], self.dtype),
                "logit_positions": ints("num_logits"),
                "q_indptr": ints("num_seqs_plus_one"),
                "page_indptr": ints("num_seqs_plus_one"),
                "page_values": ints("num_page_values"),
                "last_page_len": ints("num_seqs"),
                "positions": ints("seq_len"),
                "append_slots": ints("seq_len"),
                "pages": pages,
                "$": packed,
            },
            "prefill_owned_fresh": {
                "input_embed": nn.spec.Tensor([1, "seq_len", cfg.hidden_size], self.dtype),
                "logit_positions": ints("num_logits"),
                "q_indptr": ints("num_seqs_plus_one"),
                "k_rope_offsets": ints("num_seqs"),
                "positions": ints("seq_len"),
                "append_slots": ints("seq_len"),
                "pages": pages,
                "$": packed,
            },
            "prefill_owned_mixed": {
                "input_embed": nn.spec.Tensor([1, "seq_len", cfg.hidden_size], self.dtype),
                "logit_positions": ints("num_logits"),
                "decode_rows": ints("num_decode"),
                "decode_page_indptr": ints("num_decode_plus_one"),
                "decode_page_values": ints("num_decode_page_values"),
                "decode_last_page_len": ints("num_decode"),
                "prompt_rows": ints("num_prompt_rows"),
                "q_indptr": ints("num_seqs_plus_one"),
                "page_indptr": ints("num_seqs_plus_one"),
                "page_values": ints("num_page_values"),
                "last_page_len": ints("num_seqs"),
                "row_order": ints("seq_len"),
                "positions": ints("seq_len"),
                "append_slots": ints("seq_len"),
                "pages": pages,
                "$": packed,
            },
            "decode_owned": decode("batch_size", "num_parts_plus_one"),
            "decode_owned_single": decode(1, 2),
        }

    def export_spec(self) -> dict[str, Any]:
        """Signatures of the exported functions (symbolic sizes named)."""
        hidden = self.config.hidden_size
        packed = {"param_mode": "packed", "effect_mode": "none"}
        kv = nn.spec.Object(object_type=PagedKVCache)
        prefill = {
            "input_embed": nn.spec.Tensor([1, "seq_len", hidden], self.dtype),
            "logit_positions": nn.spec.Tensor(["num_logits"], "int32"),
            "kv_cache": kv,
            "$": packed,
        }
        hidden_states = {"prefill_hidden": dict(prefill)} if self.exports_hidden_states else {}
        return {
            "embed": {"input_ids": nn.spec.Tensor(["seq_len"], "int32"), "$": packed},
            "prefill": prefill,
            **hidden_states,
            "decode": {
                "input_embed": nn.spec.Tensor(["batch_size", 1, hidden], self.dtype),
                "kv_cache": kv,
                "$": packed,
            },
            "decode_single": {
                "input_embed": nn.spec.Tensor([1, 1, hidden], self.dtype),
                "kv_cache": kv,
                "$": packed,
            },
            **self._owned_spec(),
            "create_kv_cache": {
                "max_batch_size": int,
                "max_total_seq_len": int,
                "prefill_chunk_size": int,
                "page_size": int,
                "support_sliding_window": int,
                "$": {"param_mode": "none", "effect_mode": "none"},
            },
        }
