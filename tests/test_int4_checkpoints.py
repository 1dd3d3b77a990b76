"""Group-quantized int4 checkpoints: GPTQ (v1, with and without act-order), AWQ (gemm) and
compressed-tensors `pack-quantized`.

The checkpoints are made here from a tiny fp32 model, groups of 32 input columns per output
row. GPTQ and AWQ are packed by code written from their published layouts (GPTQ: eight
inputs per int32 of `qweight` [in/8, out], zeros minus one, eight outputs per int32 of
`qzeros`; AWQ: eight outputs per int32 in the order 0 2 4 6 1 3 5 7); compressed-tensors
weights are quantized and packed by the `compressed-tensors` package itself. Oracle:
transformers with every weight replaced by s * (q - z) in fp32.
"""

from __future__ import annotations

import shutil

import numpy as np
import pytest
import torch
from quantized_checkpoints import assert_equals_oracle, dequantized_oracle, rewrite_checkpoint

from vllm_tvm.entrypoints.llm import LLM

GROUP = 32
AWQ_ORDER = [0, 2, 4, 6, 1, 3, 5, 7]


def _asymmetric(weight: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(q uint8 [out, in], fp16 scales [out, groups], zeros uint8 [out, groups])."""
    out, columns = weight.shape
    groups = weight.reshape(out, columns // GROUP, GROUP)
    low, high = groups.min(-1), groups.max(-1)
    scale = ((high - low) / 15).astype(np.float16)
    # Zero points from 1: the original GPTQ format cannot store a zero of 0 (kept minus one).
    zero = np.clip(np.round(-low / scale.astype(np.float32)), 1, 15).astype(np.uint8)
    q = np.round(groups / scale.astype(np.float32)[..., None]) + zero[..., None]
    return np.clip(q, 0, 15).astype(np.uint8).reshape(out, columns), scale, zero


def _words(values: np.ndarray, order: list[int] | None = None) -> np.ndarray:
    """[rows, 8n] 4-bit values -> int32 [rows, n]; nibble j holds value order[j] of its eight."""
    rows = values.reshape(values.shape[0], -1, 8).astype(np.uint32) & np.uint32(15)
    if order is not None:
        rows = rows[:, :, order]
    packed = np.zeros(rows.shape[:2], np.uint32)
    for j in range(8):
        packed |= rows[:, :, j] << np.uint32(4 * j)
    return packed.view(np.int32)


def _gptq(weight: np.ndarray, act_order: bool) -> tuple[dict[str, np.ndarray], np.ndarray]:
    q, scale, zero = _asymmetric(weight)
    g_idx = np.arange(weight.shape[1], dtype=np.int32) // GROUP
    if act_order:
        # Columns quantized in a permuted order: a column's group is its rank // GROUP.
        permutation = np.random.default_rng(0).permutation(weight.shape[1])
        g_idx = (np.argsort(permutation) // GROUP).astype(np.int32)
        q, scale, zero = _grouped_by(weight, g_idx)
    dequantized = scale.astype(np.float32)[:, g_idx] * (q.astype(np.float32) - zero[:, g_idx])
    tensors = {
        "qweight": _words(q).T.copy(),
        # The original GPTQ format stores each zero minus one.
        "qzeros": _words(zero.T - 1),
        "scales": scale.T.copy(),
        "g_idx": g_idx,
    }
    return tensors, dequantized


def _grouped_by(weight: np.ndarray, g_idx: np.ndarray):
    out, columns = weight.shape
    groups = columns // GROUP
    q = np.zeros((out, columns), np.uint8)
    scale = np.zeros((out, groups), np.float16)
    zero = np.zeros((out, groups), np.uint8)
    for g in range(groups):
        cols = np.flatnonzero(g_idx == g)
        q[:, cols], scale[:, g : g + 1], zero[:, g : g + 1] = _asymmetric(weight[:, cols])
    return q, scale, zero


def _awq(weight: np.ndarray) -> tuple[dict[str, np.ndarray], np.ndarray]:
    q, scale, zero = _asymmetric(weight)
    columns = np.arange(weight.shape[1]) // GROUP
    dequantized = scale.astype(np.float32)[:, columns] * (q.astype(np.float32) - zero[:, columns])
    tensors = {
        "qweight": _words(q.T.copy(), AWQ_ORDER),
        "qzeros": _words(zero.T.copy(), AWQ_ORDER),
        "scales": scale.T.copy(),
    }
    return tensors, dequantized


def _compressed_tensors(weight: np.ndarray) -> tuple[dict[str, np.ndarray], np.ndarray]:
    from compressed_tensors.compressors.pack_quantized.helpers import pack_to_int32
    from compressed_tensors.quantization import QuantizationArgs
    from compressed_tensors.quantization.lifecycle.forward import dequantize, quantize

    args = QuantizationArgs(num_bits=4, type="int", strategy="group", group_size=GROUP)
    w = torch.from_numpy(weight)
    groups = w.reshape(w.shape[0], -1, GROUP)
    scale = (groups.abs().amax(-1) / 7.5).to(torch.float16)
    zero = torch.zeros_like(scale, dtype=torch.int8)
    q = quantize(w, scale, zero, args, dtype=torch.int8)
    # The package's own dequantize rounds s * q to the scale's fp16; the oracle is exact.
    fp16_rounded = dequantize(q, scale, zero, args, dtype=torch.float32)
    dequantized = scale.float().repeat_interleave(GROUP, 1) * q.float()
    assert (fp16_rounded - dequantized).abs().max() <= 2e-3
    tensors = {
        "weight_packed": pack_to_int32(q, 4).numpy(),
        "weight_scale": scale.numpy(),
        "weight_shape": np.array(weight.shape, np.int64),
    }
    return tensors, dequantized.numpy()


CONFIGS = {
    "gptq": {
        "quant_method": "gptq",
        "bits": 4,
        "group_size": GROUP,
        "sym": False,
        "desc_act": False,
        "checkpoint_format": "gptq",
    },
    "gptq_act_order": {
        "quant_method": "gptq",
        "bits": 4,
        "group_size": GROUP,
        "sym": False,
        "desc_act": True,
        "checkpoint_format": "gptq",
    },
    "awq": {
        "quant_method": "awq",
        "bits": 4,
        "group_size": GROUP,
        "zero_point": True,
        "version": "gemm",
    },
    "compressed_tensors": {
        "quant_method": "compressed-tensors",
        "format": "pack-quantized",
        "config_groups": {
            "group_0": {
                "targets": ["Linear"],
                "weights": {
                    "num_bits": 4,
                    "type": "int",
                    "strategy": "group",
                    "group_size": GROUP,
                    "symmetric": True,
                },
            }
        },
        "ignore": ["lm_head"],
    },
}


def _quantize(weight: np.ndarray, layout: str):
    if layout.startswith("gptq"):
        return _gptq(weight, act_order=layout == "gptq_act_order")
    return _awq(weight) if layout == "awq" else _compressed_tensors(weight)


@pytest.fixture(scope="module")
def int4_checkpoints(tiny_model_dir, tmp_path_factory):
    root = tmp_path_factory.mktemp("int4")
    shutil.copytree(tiny_model_dir("llama"), root / "float")
    return {
        layout: (
            root / layout,
            rewrite_checkpoint(
                root / "float", root / layout, config, lambda w, layout=layout: _quantize(w, layout)
            ),
        )
        for layout, config in CONFIGS.items()
    }


@pytest.mark.parametrize("layout", sorted(CONFIGS))
def test_int4_equals_transformers_on_dequantized_weights(layout, int4_checkpoints) -> None:
    model_dir, dequantized = int4_checkpoints[layout]
    llm = LLM(model_dir, device="cpu", show_progress=False)
    formats = {p.format for p in llm.runner.manifest.params}
    # Act-order groups are not runs of columns: those weights are dequantized at load.
    assert formats == ({"float"} if layout == "gptq_act_order" else {"float", "int4_g32"})
    assert_equals_oracle(llm, dequantized_oracle(model_dir.parent / "float", dequantized))
