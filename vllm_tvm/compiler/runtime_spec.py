"""The runtime spec of an exported model (artifacts/runtime_spec.py), made from the model
definition the compiler built and its parsed config.

Why in the compiler: it is the one place that knows the family, the attention kind of
every KV-cache layer, the heads a rank caches and the functions it exported. Writing these
facts down here lets the runtime serve a new attention variant without learning its config
keys.
"""

from __future__ import annotations

import math
from collections import Counter
from typing import Any

from vllm_tvm.artifacts.owned_kv import OWNED_DECODE, RAGGED_FLASHINFER, RAGGED_TIR
from vllm_tvm.artifacts.runtime_spec import (
    FULL_ATTENTION,
    GATED_DELTA_NET,
    LATENT_ATTENTION,
    PAGED_KV,
    PAGED_LATENT,
    RAGGED_LATENT,
    RAGGED_PREFILL,
    SLIDING_ATTENTION,
    AttentionLayerSpec,
    DraftHeadSpec,
    HiddenStatesSpec,
    OwnedPagesSpec,
    PatchMergeSpec,
    RecurrentStateSpec,
    RuntimeSpec,
    VisionSpec,
)
from vllm_tvm.artifacts.speculative_roles import (
    HEAD_ARCHITECTURES,
    HIDDEN_STATES_FUNCTION,
    head_architectures,
)
from vllm_tvm.model_defs.causal_lm import PagedCausalLM
from vllm_tvm.model_defs.gated_delta_net import STATE_DTYPE
from vllm_tvm.model_defs.gemma3_multimodal import ENCODE_IMAGES
from vllm_tvm.model_defs.qwen2_5_vl import Qwen2_5_VLConfig
from vllm_tvm.model_defs.qwen3_5_vl import Qwen3_5VLConfig
from vllm_tvm.model_defs.qwen3_next import HybridForCausalLM

DTYPE_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2}

MLA_MAX_NUM_SEQS = 31
"""Sequences per step for latent-attention (MLA) models: when 32 or more sequences of a
decode step share cached blocks, TVM's paged KV cache merges their attention over those
blocks into one pass that does not see the token appended in that step (wrong output), so
such a step must never be scheduled."""

MLA_BATCH_REASON = (
    "TVM's KV cache merges the decode of 32+ sequences sharing cached blocks into a pass "
    "that misses the new token"
)

TVM_ATTENTION_KINDS = {"mha": FULL_ATTENTION, "mha_sliding": SLIDING_ATTENTION}
"""The spec's name of each TVM attention kind a paged KV cache of keys and values holds."""


def runtime_spec_for(
    model: PagedCausalLM, config: Any, dtype: str, functions: list[str]
) -> RuntimeSpec:
    """The runtime spec of `model` (built from `config`) exporting `functions`."""
    attention = _attention_layers(model, config, dtype)
    latent = attention[0].kind == LATENT_ATTENTION
    window = getattr(config, "sliding_window", None)
    sliding = any(layers.kind == SLIDING_ATTENTION for layers in attention)
    recurrent = _recurrent_state(model)
    vision = _vision(config, functions)
    return RuntimeSpec(
        vocab_size=config.vocab_size,
        hidden_size=config.hidden_size,
        num_layers=config.num_hidden_layers,
        context_limit=config.max_position_embeddings,
        attention=attention,
        recurrent_state=recurrent,
        context_limit_reason=_context_limit_reason(config),
        prefill_chunk_limit=window if sliding else None,
        max_num_seqs=MLA_MAX_NUM_SEQS if latent else None,
        max_num_seqs_reason=MLA_BATCH_REASON if latent else "",
        # A shared block holds keys and values but not the recurrent state after it. Image
        # soft tokens share one placeholder id; the runtime keys their blocks by the
        # image's digest (runtime/kv/prefix_cache.py), so images do not stop caching. With
        # M-RoPE the cache holds keys already rotated at the prompt's 3-D positions, and the
        # suffix after a hit takes them from the hit's end (PromptImages.positions).
        prefix_caching=not sliding and not recurrent,
        ragged_dispatch=RAGGED_LATENT if "extend" in functions else RAGGED_PREFILL,
        decode_single="decode_single" in functions,
        device_sampling="argmax" in functions and "sample" in functions,
        hidden_states=_hidden_states(config, functions),
        draft_head=_draft_head(config),
        vision=vision,
        owned_pages=_owned_pages(model, config, functions),
    )


def _attention_layers(
    model: PagedCausalLM, config: Any, dtype: str
) -> tuple[AttentionLayerSpec, ...]:
    """The KV-cache layers of each attention kind, in the order they first appear."""
    size = DTYPE_BYTES[dtype]
    if getattr(config, "kv_lora_rank", 0):  # one latent + rotary key per token (mla_cache.py)
        layers = len(model.model.layers)
        width = config.kv_lora_rank + config.qk_rope_head_dim
        return (AttentionLayerSpec(LATENT_ATTENTION, layers, layers * width * size, PAGED_LATENT),)
    _, kv_heads = model.cache_heads()  # a tensor-parallel rank's share
    per_layer = 2 * kv_heads * config.head_dim * size
    counts = Counter(model.cache_layers()["attn_kind"])
    window = getattr(config, "sliding_window", None)
    return tuple(
        AttentionLayerSpec(
            kind=TVM_ATTENTION_KINDS[tvm_kind],
            layers=count,
            kv_bytes_per_token=count * per_layer,
            cache_layout=PAGED_KV,
            sliding_window=window if tvm_kind == "mha_sliding" else None,
        )
        for tvm_kind, count in counts.items()
    )


def _recurrent_state(model: PagedCausalLM) -> tuple[RecurrentStateSpec, ...]:
    """The per-sequence state of a hybrid's Gated DeltaNet layers (none for other models)."""
    if not isinstance(model, HybridForCausalLM):
        return ()
    conv, ssm = model.state_shapes()
    size = DTYPE_BYTES[STATE_DTYPE]
    return (
        RecurrentStateSpec(
            kind=GATED_DELTA_NET,
            layers=len(model.config.linear_layers),
            conv_state_bytes=math.prod(conv) * size,
            ssm_state_bytes=math.prod(ssm) * size,
        ),
    )


def _hidden_states(config: Any, functions: list[str]) -> HiddenStatesSpec | None:
    """What a target built for drafting returns from its `*_hidden` forwards."""
    if HIDDEN_STATES_FUNCTION not in functions:
        return None
    layers = tuple(getattr(config, "aux_hidden_layers", ()))
    return HiddenStatesSpec(config.hidden_size * max(1, len(layers)), layers)


def _draft_head(config: Any) -> DraftHeadSpec | None:
    """What a head reads of its target (model_defs/eagle3.py's config for EAGLE-3)."""
    if not any(config.architecture in head_architectures(method) for method in HEAD_ARCHITECTURES):
        return None
    return DraftHeadSpec(
        getattr(config, "draft_vocab_size", config.vocab_size),
        tuple(getattr(config, "eagle_aux_hidden_state_layer_ids", ())),
    )


def _owned_pages(model: PagedCausalLM, config: Any, functions: list[str]) -> OwnedPagesSpec | None:
    """The pages of a model that exports the owned-page functions (every layer full
    attention: model_defs/owned_kv.py refuses the others)."""
    if OWNED_DECODE not in functions:
        return None
    q_heads, kv_heads = model.cache_heads()
    kernels = model.owned_kernels
    ragged = RAGGED_FLASHINFER if kernels and kernels.ragged_extern else RAGGED_TIR
    return OwnedPagesSpec(config.num_hidden_layers, kv_heads, config.head_dim, q_heads, ragged)


def _vision(config: Any, functions: list[str]) -> VisionSpec | None:
    """The image encoder of a model that exports one (model_defs/gemma3_multimodal.py,
    qwen2_5_vl.py, qwen3_5_vl.py)."""
    if ENCODE_IMAGES not in functions:
        return None
    if isinstance(config, Qwen2_5_VLConfig | Qwen3_5VLConfig):
        vision = config.vision
        learned = isinstance(config, Qwen3_5VLConfig)
        return VisionSpec(
            encoder_function=ENCODE_IMAGES,
            image_size=None,
            tokens_per_image=None,
            image_token_id=config.image_token_id,
            begin_image_token_id=config.vision_start_token_id,
            end_image_token_id=config.vision_end_token_id,
            patch_merge=PatchMergeSpec(
                vision.patch_size,
                vision.spatial_merge_size,
                0 if learned else vision.window_size,
                position_embeddings=vision.num_position_embeddings if learned else 0,
            ),
            multimodal_rope=True,
        )
    side = config.vision.image_size
    return VisionSpec(
        encoder_function=ENCODE_IMAGES,
        image_size=(side, side),
        tokens_per_image=config.mm_tokens_per_image,
        image_token_id=config.image_token_id,
        begin_image_token_id=config.boi_token_id,
        end_image_token_id=config.eoi_token_id,
        bidirectional_image_attention=True,
    )


def _context_limit_reason(config: Any) -> str:
    """Why a longrope model compiled with its short factors has its original length as its
    limit (model_defs/rope_scaling.py: compiled with the long factors, it has the full one)."""
    if getattr(config, "rope_type", None) != "longrope":
        return ""
    original = int(config.rope_scaling["original_max_position_embeddings"])
    if config.max_position_embeddings > original:
        return ""
    return (
        "longrope: past original_max_position_embeddings transformers rotates with the "
        "long factors, which the paged cache cannot apply to keys already rotated with the "
        "short ones; an artifact compiled for a longer max_model_len runs the long factors "
        "at every position"
    )
