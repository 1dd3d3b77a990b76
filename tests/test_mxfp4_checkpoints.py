"""MXFP4 checkpoints (OCP Microscaling) in gpt-oss's and compressed-tensors' layouts.

Both are made here from a tiny fp32 Llama, with the E8M0 scale the OCP MX spec gives each
block of 32 inputs: 2**(floor(log2(amax)) - 2) (2 = emax of E2M1). The gpt-oss checkpoint is
quantized by code written from the spec (w / scale rounded to nearest, ties to even, on the
E2M1 grid, saturating at 6) and its oracle weights are dequantized by transformers' own MXFP4
dequantizer (gpt-oss's `convert_moe_packed_tensors`, run on CPU), the dequantizer of record.
The compressed-tensors checkpoint is packed and dequantized by that package's MXFP4
compressor."""

from __future__ import annotations

import shutil

import numpy as np
import pytest
import torch
from compressed_tensors.compressors.mxfp4.base import MXFP4PackedCompressor
from compressed_tensors.quantization import QuantizationArgs, QuantizationScheme
from quantized_checkpoints import (
    PROMPTS,
    assert_equals_oracle,
    dequantized_oracle,
    is_projection,
    prefill_logits,
    rewrite_checkpoint,
)
from safetensors.torch import load_file, save_file
from tiny_models import load_oracle
from transformers.integrations.mxfp4 import convert_moe_packed_tensors

from vllm_tvm.checkpoints.mxfp4_weights import GPT_OSS_LAYOUT, Mxfp4Weights
from vllm_tvm.checkpoints.prequantized import check_prequantized
from vllm_tvm.checkpoints.safetensors_weights import SafetensorsWeights
from vllm_tvm.entrypoints.llm import LLM

GPT_OSS = {"quant_method": "mxfp4", "modules_to_not_convert": ["lm_head"]}
COMPRESSED_TENSORS = {
    "quant_method": "compressed-tensors",
    "format": "mxfp4-pack-quantized",
    "config_groups": {
        "group_0": {
            "targets": ["Linear"],
            "weights": {"num_bits": 4, "type": "float", "group_size": 32, "strategy": "group"},
        }
    },
}
CT_SCHEME = QuantizationScheme(
    targets=["Linear"],
    weights=QuantizationArgs(
        num_bits=4, type="float", strategy="group", group_size=32, scale_dtype=torch.uint8
    ),
)
GRID = np.array([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0], np.float32)
"""E2M1 magnitudes; the code of GRID[i] is i (sign in bit 3)."""
WEIGHT_RELATIVE_ERROR = 0.13
"""Bound on ||W - MXFP4(W)|| / ||W|| per weight of the tiny model (measured 0.114-0.121: its
weights are Gaussian, where 4-bit E2M1 under a power-of-two block scale loses about 12%)."""
LOGIT_RELATIVE_RMS = 0.75
"""Bound on the RMS of (MXFP4 logits - float logits) over the RMS of the float logits (measured
0.43-0.51 on transformers: a 2-layer random model amplifies weight noise; a swapped nibble
order or a scale off by a power of two lands well above 1)."""


def _nearest_even(magnitude: np.ndarray) -> np.ndarray:
    """E2M1 code (0-7) of each magnitude: round to nearest, ties to the even code, saturate."""
    low = np.clip(np.searchsorted(GRID, magnitude, side="right") - 1, 0, len(GRID) - 2)
    middle = (GRID[low] + GRID[low + 1]) / 2
    up = (magnitude > middle) | ((magnitude == middle) & (low % 2 == 1))
    return np.where(magnitude >= GRID[-1], len(GRID) - 1, low + up).astype(np.uint8)


def _exponents(weight: np.ndarray) -> np.ndarray:
    """E8M0 exponent (bias 127) of each block of 32: floor(log2(amax)) - 2, as int32."""
    blocks = weight.reshape(weight.shape[0], -1, 32)
    amax = np.maximum(np.abs(blocks).max(-1), np.float32(2.0**-100))
    return np.floor(np.log2(amax)).astype(np.int32) - 2 + 127


def _quantize(weight: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """fp32 [out, in] -> (packed codes uint8 [out, in/2], E8M0 exponents uint8 [out, in/32])."""
    out, columns = weight.shape
    exponents = _exponents(weight)
    scaled = weight.reshape(out, -1, 32) / np.ldexp(np.float32(1), exponents - 127)[..., None]
    codes = (_nearest_even(np.abs(scaled)) + 8 * (scaled < 0)).reshape(out, columns)
    packed = (codes[:, 0::2] | (codes[:, 1::2] << 4)).astype(np.uint8)
    return packed, exponents.astype(np.uint8)


def _transformers_dequantized(packed: np.ndarray, exponents: np.ndarray) -> np.ndarray:
    """transformers' dequantization: it takes expert stacks [E, out, in/32, 16] and returns
    [E, in, out]; one expert of this weight, transposed back."""
    blocks = torch.from_numpy(packed.reshape(*exponents.shape, 16))[None]
    stack = convert_moe_packed_tensors(
        blocks, torch.from_numpy(exponents)[None], dtype=torch.float32
    )
    return stack[0].T.contiguous().numpy()


def _gpt_oss(weight: np.ndarray) -> tuple[dict[str, np.ndarray], np.ndarray]:
    packed, exponents = _quantize(weight)
    blocks = packed.reshape(*exponents.shape, 16)
    parts = {"weight_blocks": blocks, "weight_scales": exponents}
    return parts, _transformers_dequantized(packed, exponents)


def _compressed_tensors(weight: np.ndarray) -> tuple[dict[str, torch.Tensor], np.ndarray]:
    """Packed by compressed-tensors' own MXFP4 compressor (the scales from the OCP rule) and
    dequantized by its decompressor (bfloat16, exact for these values)."""
    scale = torch.from_numpy(np.ldexp(np.float32(1), _exponents(weight) - 127))
    parts = MXFP4PackedCompressor.compress(
        {"weight": torch.from_numpy(weight), "weight_scale": scale}, CT_SCHEME
    )
    dequantized = MXFP4PackedCompressor.decompress(dict(parts), CT_SCHEME)["weight"]
    return parts, dequantized.float().numpy()


@pytest.fixture(scope="module")
def mxfp4_checkpoints(tiny_model_dir, tmp_path_factory):
    root = tmp_path_factory.mktemp("mxfp4")
    shutil.copytree(tiny_model_dir("llama"), root / "float")
    gpt_oss = rewrite_checkpoint(root / "float", root / "gpt_oss", GPT_OSS, _gpt_oss)
    ct = rewrite_checkpoint(root / "float", root / "ct", COMPRESSED_TENSORS, _compressed_tensors)
    return root, gpt_oss, ct


def test_reference_quantizer_rounds_half_to_even_and_saturates() -> None:
    halfway = np.array([0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0, 7.0, 0.26, 5.01], np.float32)
    assert GRID[_nearest_even(halfway)].tolist() == [0, 1, 1, 2, 2, 4, 4, 6, 0.5, 6]


def test_gpt_oss_layout_fused_equals_transformers_on_dequantized_weights(
    mxfp4_checkpoints,
) -> None:
    root, dequantized, _ = mxfp4_checkpoints
    llm = LLM(root / "gpt_oss", device="cpu", show_progress=False)
    assert {p.format for p in llm.runner.manifest.params} == {"float", "mxfp4"}
    assert_equals_oracle(llm, dequantized_oracle(root / "float", dequantized))
    ids = llm.tokenizer.encode(PROMPTS[0])
    with torch.no_grad():
        original = load_oracle(root / "float")(torch.tensor([ids])).logits[0].numpy()
    error = prefill_logits(llm, ids) - original
    assert np.sqrt((error**2).mean() / (original**2).mean()) <= LOGIT_RELATIVE_RMS


def test_compressed_tensors_layout_fused_equals_transformers_on_dequantized_weights(
    mxfp4_checkpoints,
) -> None:
    root, _, dequantized = mxfp4_checkpoints
    llm = LLM(root / "ct", device="cpu", show_progress=False)
    assert {p.format for p in llm.runner.manifest.params} == {"float", "mxfp4"}
    assert_equals_oracle(llm, dequantized_oracle(root / "float", dequantized))


def test_view_dequantizes_as_transformers(mxfp4_checkpoints) -> None:
    root, dequantized, _ = mxfp4_checkpoints
    view = Mxfp4Weights(SafetensorsWeights(root / "gpt_oss"), GPT_OSS_LAYOUT)
    name = "model.layers.0.mlp.down_proj.weight"
    assert view.stored_type(name) == "MXFP4"
    np.testing.assert_array_equal(view.get(name), dequantized[name])
    original = SafetensorsWeights(root / "float")
    for name, weight in dequantized.items():
        reference = original.get(name)
        error = np.linalg.norm(weight - reference) / np.linalg.norm(reference)
        assert error <= WEIGHT_RELATIVE_ERROR, name


def _is_projection_or_expert(name: str) -> bool:
    return is_projection(name) or name.endswith((".w1.weight", ".w2.weight", ".w3.weight"))


def test_moe_expert_weights_dequantized_at_load_equal_transformers(
    tiny_model_dir, tmp_path
) -> None:
    """Mixtral's per-expert 2-D weights in MXFP4 too: the stacked experts are float
    parameters, filled from the dequantized weights; attention stays fused."""
    float_dir, mxfp4_dir = tiny_model_dir("mixtral_top2"), tmp_path / "mxfp4"
    dequantized = rewrite_checkpoint(
        float_dir, mxfp4_dir, GPT_OSS, _gpt_oss, selects=_is_projection_or_expert
    )
    assert any(".experts." in name for name in dequantized)
    # transformers fuses Mixtral's experts on load; its oracle reads a float copy instead.
    oracle_dir = tmp_path / "oracle"
    shutil.copytree(float_dir, oracle_dir)
    state = {}
    for path in oracle_dir.glob("*.safetensors"):
        state.update(load_file(path))
        path.unlink()
    state.update({name: torch.from_numpy(weight) for name, weight in dequantized.items()})
    save_file(state, oracle_dir / "model.safetensors")
    llm = LLM(mxfp4_dir, device="cpu", show_progress=False)
    formats = {p.name: p.format for p in llm.runner.manifest.params}
    assert formats["model.layers.0.self_attn.qkv_proj.weight.qs"] == "mxfp4"
    assert {f for name, f in formats.items() if ".experts." in name} == {"float"}
    assert_equals_oracle(llm, load_oracle(oracle_dir))


class _Stack:
    """A source holding one gpt-oss expert stack."""

    def names(self) -> list[str]:
        return ["experts.down_proj_blocks", "experts.down_proj_scales"]

    def get(self, name: str) -> np.ndarray:
        shape = (2, 8, 1, 16) if name.endswith("_blocks") else (2, 8, 1)
        return np.zeros(shape, np.uint8)


def test_expert_stacks_refused_by_name() -> None:
    view = Mxfp4Weights(_Stack(), GPT_OSS_LAYOUT)
    with pytest.raises(ValueError, match=r"'experts\.down_proj' is a 4-D stack"):
        view.get("experts.down_proj")


def test_other_compressed_tensors_mx_schemes_refused_by_name() -> None:
    config = {"quantization_config": dict(COMPRESSED_TENSORS)}
    config["quantization_config"]["config_groups"] = {
        "group_0": {"weights": {"num_bits": 4, "type": "float", "group_size": 16}}
    }
    with pytest.raises(ValueError, match=r"group 'group_0' has .* supported: \(4, 'float', 32"):
        check_prequantized(config)
