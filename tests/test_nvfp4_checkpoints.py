"""NVFP4 checkpoints in ModelOpt's layout: E2M1 codes, FP8 scales per 16 values, a per-tensor
float32 scale.

The checkpoint is made here from a tiny fp32 model following the published recipe:
weight_scale_2 = amax / (6 * 448); each block of 16 gets an FP8 scale of its amax / 6 /
weight_scale_2; codes are the nearest E2M1 values of w / (scale * weight_scale_2), two per
byte, low nibble first. Oracle: transformers with each weight replaced by
e2m1 * (float(weight_scale) * weight_scale_2) in fp32.
"""

from __future__ import annotations

import shutil

import numpy as np
import pytest
import torch
from quantized_checkpoints import assert_equals_oracle, dequantized_oracle, rewrite_checkpoint

from vllm_tvm.checkpoints.fp4_weights import E2M1_VALUES
from vllm_tvm.checkpoints.prequantized import check_prequantized
from vllm_tvm.entrypoints.llm import LLM

CONFIG = {"quant_method": "modelopt", "quant_algo": "NVFP4", "group_size": 16}
MAGNITUDES = np.array([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0], np.float32)


def _nvfp4(weight: np.ndarray) -> tuple[dict[str, torch.Tensor], np.ndarray]:
    out, columns = weight.shape
    tensor_scale = np.float32(np.abs(weight).max() / (6 * 448))
    blocks = weight.reshape(out, columns // 16, 16)
    block_scale = torch.from_numpy(np.abs(blocks).max(-1) / 6 / tensor_scale).to(
        torch.float8_e4m3fn
    )
    scale = block_scale.float().numpy() * tensor_scale
    scaled = blocks / np.maximum(scale, np.float32(1e-30))[..., None]
    nearest = np.abs(np.abs(scaled)[..., None] - MAGNITUDES).argmin(-1)
    codes = (nearest + 8 * (scaled < 0)).astype(np.uint8).reshape(out, columns)
    packed = codes[:, 0::2] | (codes[:, 1::2] << 4)
    dequantized = E2M1_VALUES[codes] * np.repeat(scale, 16, axis=1)
    tensors = {
        "weight": torch.from_numpy(packed),
        "weight_scale": block_scale,
        "weight_scale_2": torch.tensor(tensor_scale),
        "input_scale": torch.tensor(1.0),
    }
    return tensors, dequantized


@pytest.fixture(scope="module")
def nvfp4_checkpoint(tiny_model_dir, tmp_path_factory):
    root = tmp_path_factory.mktemp("nvfp4")
    shutil.copytree(tiny_model_dir("llama"), root / "float")
    dequantized = rewrite_checkpoint(root / "float", root / "nvfp4", CONFIG, _nvfp4)
    return root / "nvfp4", dequantized


def test_nvfp4_fused_equals_transformers_on_dequantized_weights(nvfp4_checkpoint) -> None:
    model_dir, dequantized = nvfp4_checkpoint
    llm = LLM(model_dir, device="cpu", show_progress=False)
    assert {p.format for p in llm.runner.manifest.params} == {"float", "nvfp4"}
    assert_equals_oracle(llm, dequantized_oracle(model_dir.parent / "float", dequantized))


def test_other_modelopt_algorithms_refused_by_name() -> None:
    config = {"quantization_config": {"quant_method": "modelopt", "quant_algo": "W4A8_AWQ"}}
    with pytest.raises(ValueError, match="quant_algo 'W4A8_AWQ' is not supported"):
        check_prequantized(config)
