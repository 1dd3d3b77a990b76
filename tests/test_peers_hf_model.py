"""benchmarks/peers/run_hf.py: the random model built on meta and materialised is sound.

The oracle is transformers itself: a model made the ordinary way (`from_config` on the CPU)
has the rotary buffers the meta-built one must have after its rebuild.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks" / "peers"))

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from llama31_8b import config_json, tiny_shape  # noqa: E402
from run_hf import build_random_model  # noqa: E402


@pytest.fixture(scope="module")
def model():
    return build_random_model(tiny_shape(), "cpu", seed=0)


def test_rotary_buffers_equal_an_ordinarily_built_model(model) -> None:
    config = transformers.LlamaConfig(**config_json(tiny_shape()))
    reference = transformers.AutoModelForCausalLM.from_config(config)
    torch.testing.assert_close(model.model.rotary_emb.inv_freq, reference.model.rotary_emb.inv_freq)
    assert model.model.rotary_emb.attention_scaling == reference.model.rotary_emb.attention_scaling


def test_weights_are_bf16_random_and_norms_one(model) -> None:
    q = model.model.layers[0].self_attn.q_proj.weight
    assert q.dtype == torch.bfloat16
    assert 0.01 < q.float().std().item() < 0.03
    assert torch.all(model.model.layers[1].post_attention_layernorm.weight == 1)
    assert torch.all(model.model.norm.weight == 1)


def test_forward_gives_finite_logits(model) -> None:
    with torch.no_grad():
        logits = model(torch.tensor([[5, 6, 7, 8]])).logits
    assert logits.shape == (1, 4, tiny_shape().vocab_size)
    assert torch.isfinite(logits).all()


def test_generation_never_stops_at_eos(model) -> None:
    assert model.generation_config.eos_token_id is None
