"""The runtime spec: what a compiled model tells the runtime about itself, typed.

Why it exists: the runtime used to re-derive model facts (KV bytes per token, the context
limit, whether prefix caching is safe, the MLA batch cap) from the HF config keys stored in
the manifest, so every new attention variant edited the runtime. The compiler knows the
family and the model it built; it writes these facts here (compiler/runtime_spec.py) and
the runtime reads only them. A layer kind the runtime does not know, or recurrent state it
cannot yet hold, is refused by name when the artifact is loaded.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from vllm_tvm.artifacts.owned_kv import RAGGED_TIR

FULL_ATTENTION = "full_attention"
SLIDING_ATTENTION = "sliding_attention"
LATENT_ATTENTION = "latent_attention"
ATTENTION_KINDS = (FULL_ATTENTION, SLIDING_ATTENTION, LATENT_ATTENTION)

PAGED_KV = "paged_kv"
"""Cache layout: a key row and a value row per KV head and token, in TVM's pages."""
PAGED_LATENT = "paged_latent"
"""Cache layout: one compressed latent plus its rotary key per token (MLA)."""

RAGGED_PREFILL = "prefill"
"""Every ragged batch runs the compiled `prefill`."""
RAGGED_LATENT = "latent"
"""A latent-attention cache appends one-token steps before attention: a batch of one-token
chunks runs `decode`, one where some sequence has cached tokens `extend`, else `prefill`."""


@dataclass(frozen=True)
class AttentionLayerSpec:
    """The KV-cache layers of one attention kind."""

    kind: str
    """FULL_ATTENTION, SLIDING_ATTENTION or LATENT_ATTENTION."""
    layers: int
    kv_bytes_per_token: int
    """Device bytes one token takes in these layers together, on each rank."""
    cache_layout: str
    """PAGED_KV or PAGED_LATENT."""
    sliding_window: int | None = None
    """Tokens a sliding layer attends to (None: the whole context)."""


@dataclass(frozen=True)
class OwnedPagesSpec:
    """The KV pages the runtime allocates for an artifact that exports the owned-page
    functions (artifacts/owned_kv.py): per layer one [pages, 2, kv_heads, page, head_dim]
    tensor in the artifact's dtype."""

    layers: int
    kv_heads: int
    """Key-value heads on each rank."""
    head_dim: int
    q_heads: int = 0
    """Query heads on each rank (0 in manifests written before FlashInfer's ragged
    product: they need none)."""
    ragged_attention: str = RAGGED_TIR
    """RAGGED_TIR, or RAGGED_FLASHINFER: the prefill's own-chunk product is the packed
    function the runtime registers (artifacts/owned_kv.py's OWNED_RAGGED_ATTENTION)."""


GATED_DELTA_NET = "gated_delta_net"
"""Recurrent state kind: per layer a causal-conv state and a delta-rule state, both fp32."""


@dataclass(frozen=True)
class RecurrentStateSpec:
    """The per-sequence state of recurrent layers (gated delta net: a convolution state and
    an SSM state per linear-attention layer), which lives outside the paged KV cache."""

    kind: str
    """GATED_DELTA_NET."""
    layers: int
    conv_state_bytes: int
    """Device bytes of one sequence's convolution state in one layer."""
    ssm_state_bytes: int
    """Device bytes of one sequence's SSM state in one layer."""


@dataclass(frozen=True)
class HiddenStatesSpec:
    """What the `*_hidden` forwards of a target built for drafting return per token."""

    width: int
    """Columns per token."""
    layers: tuple[int, ...] = ()
    """The layers whose inputs are returned, concatenated (an EAGLE-3 target); empty: the
    final-norm hidden state."""


@dataclass(frozen=True)
class DraftHeadSpec:
    """What a head that drafts from hidden states (EAGLE, EAGLE-3, MTP) reads."""

    draft_vocab_size: int
    """Rows of its LM head (an EAGLE-3 head's draft vocabulary; else `vocab_size`)."""
    target_layers: tuple[int, ...] = ()
    """The target layers an EAGLE-3 head's config names (empty: vLLM's default for the
    target, checkpoints/eagle3_config.py)."""


@dataclass(frozen=True)
class PatchMergeSpec:
    """An encoder over patches of images at their own resolution (Qwen2.5-VL, Qwen3.5): what
    the runtime needs to lay its inputs out (runtime/multimodal/)."""

    patch_size: int
    """Pixels on a patch's side."""
    spatial_merge_size: int
    """Patches on the side of the square that becomes one soft token."""
    window_size: int
    """Pixels on the side of an attention window (0: none, full attention per frame)."""
    position_embeddings: int = 0
    """Entries of the learned position table the encoder resamples to each image's grid
    (Qwen3.5: runtime/multimodal/learned_position_layout.py); 0: none, the encoder takes
    attention windows (Qwen2.5-VL: patch_merge_layout.py)."""


@dataclass(frozen=True)
class VisionSpec:
    """An artifact's image encoder: the compiled function that turns pixel values into the
    embeddings of an image's soft tokens, and the tokens a prompt marks them with."""

    encoder_function: str
    """Exported function: pixel values [images, 3, H, W] -> [images, tokens, hidden]; with
    `patch_merge`, the patch layout's inputs -> [tokens of all images, hidden]."""
    image_size: tuple[int, int] | None
    """(height, width) of the pixel values it takes; None: each image at its own size."""
    tokens_per_image: int | None
    """None: as many as the image's patches make (`patch_merge`)."""
    image_token_id: int
    """The placeholder each soft token stands for in the prompt (its embedding replaced)."""
    begin_image_token_id: int
    end_image_token_id: int
    bidirectional_image_attention: bool = False
    """Whether one image's soft tokens attend to each other both ways during prefill."""
    patch_merge: PatchMergeSpec | None = None
    multimodal_rope: bool = False
    """Whether a forward over a sequence with images takes its 3-D rotary positions (the
    image prefill's `rope_positions` [3, tokens], M-RoPE) instead of the attention bias."""


@dataclass(frozen=True)
class RuntimeSpec:
    """Everything the runtime knows about a compiled model (module doc)."""

    vocab_size: int
    """Columns of the logits (the target's vocabulary for an EAGLE-3 head, whose rows the
    runtime widens)."""
    hidden_size: int
    """Width of the embeddings the forwards take."""
    num_layers: int
    """Decoder layers of the model."""
    context_limit: int
    """The longest sequence the model runs exactly."""
    attention: tuple[AttentionLayerSpec, ...]
    recurrent_state: tuple[RecurrentStateSpec, ...] = ()
    context_limit_reason: str = ""
    """Said after the limit when a longer `max_model_len` is refused."""
    prefill_chunk_limit: int | None = None
    """Most tokens one forward may append (a sliding layer's window: TVM's cache windows
    the cached past but not the chunk being appended); None: no limit of the model's."""
    max_num_seqs: int | None = None
    """Most sequences one step may run (None: no limit of the model's)."""
    max_num_seqs_reason: str = ""
    prefix_caching: bool = True
    """Whether sequences may share cached blocks (TVM windows each shared block on its own,
    so a sliding layer would see more than its window)."""
    ragged_dispatch: str = RAGGED_PREFILL
    """RAGGED_PREFILL or RAGGED_LATENT: which compiled forward a ragged batch runs."""
    decode_single: bool = True
    """Whether `decode_single` (batch 1, static shapes) exists; else batch 1 runs `decode`."""
    device_sampling: bool = True
    """Whether `argmax` and `sample` exist."""
    hidden_states: HiddenStatesSpec | None = None
    """The `*_hidden` forwards of a target built for drafting; None: none."""
    draft_head: DraftHeadSpec | None = None
    """Set for a head that drafts from hidden states."""
    vision: VisionSpec | None = None
    """The image encoder of an artifact that carries a vision tower; None: text only."""
    owned_pages: OwnedPagesSpec | None = None
    """The pages of an artifact whose forwards run over KV pages the runtime owns; None:
    TVM's cache."""

    @property
    def kv_bytes_per_token(self) -> int:
        """Device bytes one token's cache entries take over all layers (on each rank)."""
        return sum(layers.kv_bytes_per_token for layers in self.attention)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RuntimeSpec:
        """The spec of a manifest's JSON (lists back to tuples, nested specs typed)."""
        fields = dict(data)
        fields["attention"] = tuple(AttentionLayerSpec(**layer) for layer in data["attention"])
        for layers in fields["attention"]:
            if layers.kind not in ATTENTION_KINDS:
                raise ValueError(
                    f"attention layer kind {layers.kind!r} is not supported; supported: "
                    + ", ".join(ATTENTION_KINDS)
                )
        fields["recurrent_state"] = tuple(
            RecurrentStateSpec(**state) for state in data.get("recurrent_state", ())
        )
        if data.get("hidden_states") is not None:
            hidden = dict(data["hidden_states"])
            fields["hidden_states"] = HiddenStatesSpec(hidden["width"], tuple(hidden["layers"]))
        if data.get("draft_head") is not None:
            head = dict(data["draft_head"])
            fields["draft_head"] = DraftHeadSpec(
                head["draft_vocab_size"], tuple(head["target_layers"])
            )
        if data.get("vision") is not None:
            vision = dict(data["vision"])
            if vision.get("image_size") is not None:
                vision["image_size"] = tuple(vision["image_size"])
            if vision.get("patch_merge") is not None:
                vision["patch_merge"] = PatchMergeSpec(**vision["patch_merge"])
            fields["vision"] = VisionSpec(**vision)
        if data.get("owned_pages") is not None:
            fields["owned_pages"] = OwnedPagesSpec(**data["owned_pages"])
        return cls(**fields)
