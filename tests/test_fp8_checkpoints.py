"""FP8 E4M3 safetensors checkpoints: per-tensor, per-channel and block scales.

The checkpoints are made here from a tiny fp32 model with a quantizer written from the
formats' public descriptions (vLLM's `fp8` per-tensor layout, compressed-tensors
`float-quantized` per-channel, transformers/DeepSeek block scales `weight_scale_inv`):
q = fp8(w / s) with s = absmax / 448 per tensor, row or block, stored by torch as
`float8_e4m3fn`. Oracle: transformers with every weight replaced by q * s (fp32). Our fused
kernel decodes the E4M3 bytes in TIR and multiplies by the same scale, so logits agree
within 1e-4 and greedy tokens exactly; `--weight-format dequantized` multiplies at load.
"""

from __future__ import annotations

import shutil

import numpy as np
import pytest
import torch
from quantized_checkpoints import (
    assert_equals_oracle,
    dequantized_oracle,
    prefill_logits,
    rewrite_checkpoint,
)

from vllm_tvm.artifacts.compile_options import CompileOptions
from vllm_tvm.checkpoints.prequantized import check_prequantized
from vllm_tvm.compiler.build import make_request
from vllm_tvm.entrypoints.llm import LLM

E4M3_MAX = 448.0
BLOCK = 32

SCHEMES = {
    "per_tensor": {"quant_method": "fp8", "activation_scheme": "dynamic"},
    "per_channel": {
        "quant_method": "compressed-tensors",
        "format": "float-quantized",
        "config_groups": {
            "group_0": {
                "targets": ["Linear"],
                "weights": {"num_bits": 8, "type": "float", "strategy": "channel"},
            }
        },
        "ignore": ["lm_head"],
    },
    "block": {
        "quant_method": "fp8",
        "activation_scheme": "dynamic",
        "weight_block_size": [BLOCK, BLOCK],
    },
}


def _scales(weight: torch.Tensor, scheme: str) -> tuple[torch.Tensor, torch.Tensor]:
    """(stored scale tensor, scale expanded to the weight's shape)."""
    rows, columns = weight.shape
    if scheme == "per_tensor":
        scale = weight.abs().max() / E4M3_MAX
        return scale.reshape(()), scale.expand(rows, columns)
    if scheme == "per_channel":
        scale = weight.abs().amax(dim=1, keepdim=True) / E4M3_MAX
        return scale, scale.expand(rows, columns)
    blocks = weight.reshape(rows // BLOCK, BLOCK, columns // BLOCK, BLOCK)
    scale = blocks.abs().amax(dim=(1, 3)) / E4M3_MAX
    expanded = scale.repeat_interleave(BLOCK, 0).repeat_interleave(BLOCK, 1)
    return scale, expanded


def fp8_quantizer(scheme: str):
    """q = fp8(w / s), stored with its scale under the scheme's name; dequantized q * s."""
    scale_suffix = "weight_scale_inv" if scheme == "block" else "weight_scale"

    def quantize(weight: np.ndarray) -> tuple[dict[str, torch.Tensor], np.ndarray]:
        stored, scale = _scales(torch.from_numpy(weight), scheme)
        values = (torch.from_numpy(weight) / scale).clamp(-E4M3_MAX, E4M3_MAX)
        values = values.to(torch.float8_e4m3fn)
        parts = {"weight": values, scale_suffix: stored}
        return parts, (values.float() * scale).numpy()

    return quantize


@pytest.fixture(scope="module")
def fp8_checkpoints(tiny_model_dir, tmp_path_factory):
    root = tmp_path_factory.mktemp("fp8")
    shutil.copytree(tiny_model_dir("llama"), root / "float")
    return {
        scheme: (
            root / scheme,
            rewrite_checkpoint(root / "float", root / scheme, config, fp8_quantizer(scheme)),
        )
        for scheme, config in SCHEMES.items()
    }


@pytest.mark.parametrize("scheme", sorted(SCHEMES))
def test_fp8_fused_equals_transformers_on_dequantized_weights(scheme, fp8_checkpoints) -> None:
    model_dir, dequantized = fp8_checkpoints[scheme]
    llm = LLM(model_dir, device="cpu", show_progress=False)
    assert "fp8_e4m3" in {p.format for p in llm.runner.manifest.params}
    assert_equals_oracle(llm, dequantized_oracle(model_dir.parent / "float", dequantized))


def test_fp8_dequantized_at_load_equals_fused(fp8_checkpoints) -> None:
    model_dir, dequantized = fp8_checkpoints["block"]
    llm = LLM(model_dir, device="cpu", weight_format="dequantized", show_progress=False)
    assert {p.format for p in llm.runner.manifest.params} == {"float"}
    oracle = dequantized_oracle(model_dir.parent / "float", dequantized)
    ids = llm.tokenizer.encode("Once upon a time")
    with torch.no_grad():
        expected = oracle(torch.tensor([ids])).logits[0].numpy()
    assert np.abs(prefill_logits(llm, ids) - expected).max() <= 1e-4


@pytest.mark.parametrize(
    ("quantization_config", "message"),
    [
        ({"quant_method": "awq", "bits": 3}, "awq with 3 bits is not supported"),
        ({"quant_method": "bitsandbytes"}, "method 'bitsandbytes' is not supported"),
        ({"quant_method": "hqq"}, "method 'hqq' is not supported"),
        ({"quant_method": "exl2"}, "method 'exl2' is not supported"),
        (
            {"quant_method": "compressed-tensors", "format": "marlin-24"},
            "format 'marlin-24' is not supported",
        ),
    ],
)
def test_unsupported_checkpoint_quantization_refused_by_name(quantization_config, message):
    with pytest.raises(ValueError, match=message):
        check_prequantized({"quantization_config": quantization_config})


def test_group_quantization_of_an_fp8_checkpoint_refused(fp8_checkpoints) -> None:
    model_dir, _ = fp8_checkpoints["per_tensor"]
    with pytest.raises(ValueError, match="already quantized"):
        make_request(CompileOptions(model_dir, quantization="q4_0"))
