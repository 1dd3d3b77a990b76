"""The gated full-attention layer and the zero-centred RMSNorm equal transformers' modules.

Oracles: `Qwen3NextAttention` and `Qwen3_5Attention` (output gate interleaved per head in
q_proj, zero-centred q/k norms, partial rotary: 8 of 32 channels rotate) with eager
attention under a causal mask, fp32, on tiny random weights; `Qwen3_5RMSNorm`. Ours runs
through the paged KV cache created by the layer's own compiled `create_kv_cache`: a ragged
prefill of two sequences (one longer than a KV page run), then batched decode steps; each
row equals transformers' full-sequence forward within 1e-4.
"""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
import torch
import tvm
from tvm import relax
from tvm.relax.frontend import nn
from tvm.relax.frontend.nn import Tensor
from tvm.relax.frontend.nn.llm.kv_cache import PagedKVCache as KVCacheObject

from vllm_tvm.compiler.pipeline import lowering_pipeline
from vllm_tvm.model_defs.causal_lm import PagedCausalLM
from vllm_tvm.model_defs.gated_attention import (
    GatedAttention,
    GatedAttentionOptions,
    ZeroCentredRMSNorm,
)
from vllm_tvm.model_defs.llama import fused_weight_sources
from vllm_tvm.runtime.kv.kv_cache import KVCacheConfig, PagedKVCache

TOLERANCE = 1e-4
HF_SHAPE = {
    "hidden_size": 48,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 32,
    "rms_norm_eps": 1e-6,
    "num_hidden_layers": 1,
    "layer_types": ["full_attention"],
}
ROPE = {"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.25}
PROMPTS = [37, 6]
DECODE_STEPS = 3
FAMILIES = ("qwen3_next", "qwen3_5")


def _hf_modules(family: str) -> tuple[torch.nn.Module, torch.nn.Module, torch.nn.Module, object]:
    """(attention, its rotary embedding, a zero-centred RMSNorm, config), the same random
    weights for both families (their parameter names agree)."""
    if family == "qwen3_next":
        from transformers import Qwen3NextConfig
        from transformers.models.qwen3_next import modeling_qwen3_next as modeling

        config = Qwen3NextConfig(**HF_SHAPE, rope_parameters=ROPE)
        attention = modeling.Qwen3NextAttention(config, 0)
        rotary = modeling.Qwen3NextRotaryEmbedding(config)
        norm = modeling.Qwen3NextRMSNorm(HF_SHAPE["hidden_size"], HF_SHAPE["rms_norm_eps"])
    else:
        from transformers import Qwen3_5TextConfig
        from transformers.models.qwen3_5 import modeling_qwen3_5 as modeling

        rope = {**ROPE, "mrope_section": [2, 1, 1]}
        config = Qwen3_5TextConfig(**HF_SHAPE, rope_parameters=rope)
        attention = modeling.Qwen3_5Attention(config, 0)
        rotary = modeling.Qwen3_5TextRotaryEmbedding(config)
        norm = modeling.Qwen3_5RMSNorm(HF_SHAPE["hidden_size"], HF_SHAPE["rms_norm_eps"])
    config._attn_implementation = "eager"
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for param in [*attention.parameters(), *norm.parameters()]:
            param.copy_(torch.randn(param.shape, generator=generator) * 0.3)
    return attention.float().eval(), rotary, norm.float().eval(), config


class _AttentionModel(PagedCausalLM):
    """One gated attention layer (`self_attn.`) over its own paged KV cache, and a norm."""

    def __init__(self, options: GatedAttentionOptions) -> None:
        head_shape = SimpleNamespace(
            hidden_size=options.hidden_size,
            num_hidden_layers=1,
            num_attention_heads=options.num_q_heads,
            num_key_value_heads=options.num_kv_heads,
            head_dim=options.head_dim,
        )
        super().__init__(head_shape, "float32", tvm.target.Target("llvm"))
        self.options = options
        self.self_attn = GatedAttention(options, "float32")
        self.norm = ZeroCentredRMSNorm(options.hidden_size, options.rms_norm_eps, "float32")

    def cache_rope(self) -> dict:
        return self.options.cache_rope()

    def attend(self, hidden: Tensor, kv_cache: KVCacheObject):
        return self.self_attn(hidden, kv_cache, 0), kv_cache

    def normalise(self, hidden: Tensor) -> Tensor:
        return self.norm(hidden)

    def export_spec(self) -> dict:
        width = self.options.hidden_size
        kv = nn.spec.Object(object_type=KVCacheObject)
        packed = {"param_mode": "packed", "effect_mode": "none"}
        return {
            "attend": {
                "hidden": nn.spec.Tensor(["b", "s", width], "float32"),
                "kv_cache": kv,
                "$": packed,
            },
            "normalise": {"hidden": nn.spec.Tensor(["n", width], "float32"), "$": packed},
            "create_kv_cache": super().export_spec()["create_kv_cache"],
        }


class _Compiled:
    def __init__(self, attention: torch.nn.Module, norm: torch.nn.Module, config: object) -> None:
        options = GatedAttentionOptions.from_hf_config(config.to_dict())
        model = _AttentionModel(options)
        mod, named_params = model.export_tvm(spec=model.export_spec())
        target = tvm.target.Target("llvm")
        executable = tvm.compile(mod, target=target, relax_pipeline=lowering_pipeline(target))
        self.vm = relax.VirtualMachine(executable, tvm.cpu())
        hf = {f"self_attn.{k}": v for k, v in attention.state_dict().items()}
        hf.update({f"norm.{k}": v for k, v in norm.state_dict().items()})
        self.params = []
        for name, _ in named_params:
            # The fused-name table matches names inside a model (`model.layers.N.`).
            sources, axis = fused_weight_sources(f"model.{name}")
            arrays = [hf[s.removeprefix("model.")].detach().numpy() for s in sources]
            array = np.concatenate(arrays, axis=axis)
            self.params.append(tvm.runtime.tensor(array.astype(np.float32)))
        self.kv_cache = PagedKVCache(
            self.vm["create_kv_cache"],
            KVCacheConfig(max_batch_size=4, max_total_seq_len=512, prefill_chunk_size=128),
        )

    def attend(self, hidden: np.ndarray, seq_ids: list[int], lengths: list[int]) -> np.ndarray:
        self.kv_cache.begin_forward(seq_ids, lengths)
        out, _ = self.vm["attend"](tvm.runtime.tensor(hidden), self.kv_cache.handle, self.params)
        self.kv_cache.end_forward()
        return out.numpy()


@pytest.fixture(scope="module")
def compiled() -> _Compiled:
    """Ours, compiled once with the weights both families' modules share."""
    attention, _, norm, config = _hf_modules(FAMILIES[0])
    return _Compiled(attention, norm, config)


@pytest.fixture(scope="module", params=FAMILIES)
def layers(request: pytest.FixtureRequest, compiled: _Compiled):
    """(HF attention, rotary, norm, config, ours compiled) for each family."""
    return (*_hf_modules(request.param), compiled)


def _hf_attention(attention, rotary, hidden: np.ndarray) -> np.ndarray:
    """transformers' layer over a whole sequence [1, n, hidden] under a causal mask."""
    x = torch.from_numpy(hidden)
    n = x.shape[1]
    positions = torch.arange(n)[None]
    mask = torch.full((n, n), float("-inf")).triu(1)[None, None]
    with torch.no_grad():
        out, _ = attention(x, position_embeddings=rotary(x, positions), attention_mask=mask)
    return out.numpy()


def test_prefill_then_decode_through_the_kv_cache_matches_transformers(layers) -> None:
    attention, rotary, _, _, ours = layers
    rng = np.random.default_rng(0)
    width = HF_SHAPE["hidden_size"]
    total = [length + DECODE_STEPS for length in PROMPTS]
    sequences = [rng.standard_normal((1, n, width)).astype(np.float32) for n in total]
    seq_ids = list(range(len(PROMPTS)))
    for seq_id in seq_ids:
        ours.kv_cache.add_sequence(seq_id)
    try:
        prompt = np.concatenate([s[:, :n] for s, n in zip(sequences, PROMPTS, strict=True)], axis=1)
        prefill = ours.attend(prompt, seq_ids, PROMPTS)
        steps = []
        for step in range(DECODE_STEPS):
            rows = np.concatenate([s[:, n + step] for s, n in zip(sequences, PROMPTS, strict=True)])
            steps.append(ours.attend(rows[:, None], seq_ids, [1] * len(seq_ids)))
    finally:
        ours.kv_cache.clear()
    offsets = np.concatenate([[0], np.cumsum(PROMPTS)])
    for seq, (sequence, n) in enumerate(zip(sequences, PROMPTS, strict=True)):
        want = _hf_attention(attention, rotary, sequence)[0]
        got_prefill = prefill[0, offsets[seq] : offsets[seq + 1]]
        np.testing.assert_allclose(got_prefill, want[:n], atol=TOLERANCE, rtol=0)
        got_steps = np.stack([step[seq, 0] for step in steps])
        np.testing.assert_allclose(got_steps, want[n:], atol=TOLERANCE, rtol=0)


def test_zero_centred_rms_norm_matches_transformers(layers) -> None:
    _, _, norm, _, ours = layers
    x = np.random.default_rng(1).standard_normal((5, HF_SHAPE["hidden_size"])).astype(np.float32)
    got = ours.vm["normalise"](tvm.runtime.tensor(x), ours.params).numpy()
    with torch.no_grad():
        want = norm(torch.from_numpy(x)).numpy()
    np.testing.assert_allclose(got, want, atol=TOLERANCE, rtol=0)
