"""Qwen3.5's vision tower compiled by TVM equals transformers' `Qwen3_5VisionModel`.

Oracle: transformers' tower (eager attention, fp32) on tiny random weights (every parameter
perturbed, the position table included), fed by transformers' own image processor for
Qwen3.5 (Qwen2-VL's, as its auto class maps it) over three images of different sizes at
once. Ours is compiled once from the same weights; its merged tokens equal the tower's
`pooler_output` within 1e-4, and the host's bilinear taps into the position table equal
transformers' `get_vision_interpolation_indices_and_weights` exactly.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
import tvm
from tvm import relax
from tvm.relax.frontend import nn

from vllm_tvm.compiler.pipeline import lowering_pipeline
from vllm_tvm.model_defs.qwen3_5_vision import (
    Qwen3_5VisionTower,
    parse_qwen3_5_vision_config,
    qwen3_5_vision_weight_source,
)
from vllm_tvm.runtime.multimodal.learned_position_layout import learned_position_layout

TOLERANCE = 1e-4
VISION = {
    "depth": 2,
    "hidden_size": 32,
    "intermediate_size": 64,
    "num_heads": 2,
    "out_hidden_size": 48,
    "patch_size": 16,
    "spatial_merge_size": 2,
    "temporal_patch_size": 2,
    "num_position_embeddings": 16,
}
IMAGE_SIZES = ((40, 90), (64, 64), (130, 50))
"""(height, width): grids smaller, equal and larger than the 4 x 4 position table."""


class _Refused(Exception):
    pass


@pytest.fixture(scope="module")
def hf_tower() -> torch.nn.Module:
    from transformers import Qwen3_5VisionConfig
    from transformers.models.qwen3_5.modeling_qwen3_5 import Qwen3_5VisionModel

    config = Qwen3_5VisionConfig(**VISION)
    config._attn_implementation = "eager"
    tower = Qwen3_5VisionModel(config)
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for param in tower.parameters():
            param.add_(torch.randn(param.shape, generator=generator) * 0.2)
    return tower.float().eval()


@pytest.fixture(scope="module")
def processed() -> dict[str, torch.Tensor]:
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import (
        Qwen2VLImageProcessorPil,
    )

    processor = Qwen2VLImageProcessorPil(
        patch_size=VISION["patch_size"],
        merge_size=VISION["spatial_merge_size"],
        temporal_patch_size=VISION["temporal_patch_size"],
        min_pixels=32 * 32,
        max_pixels=32 * 32 * 24,
    )
    rng = np.random.default_rng(0)
    images = [rng.integers(0, 256, (h, w, 3), dtype=np.uint8) for h, w in IMAGE_SIZES]
    return processor(images, return_tensors="pt")


@pytest.fixture(scope="module")
def encoder(hf_tower):
    config = parse_qwen3_5_vision_config(VISION, _Refused)
    tower = Qwen3_5VisionTower(config, "float32")
    unit, taps = config.merge_unit, 4
    spec = {
        "forward": {
            "patches": nn.spec.Tensor(["units", unit, config.patch_width], "float32"),
            "patch_positions": nn.spec.Tensor(["units", unit, 2], "int32"),
            "interpolation_indices": nn.spec.Tensor(["units", unit, taps], "int32"),
            "interpolation_weights": nn.spec.Tensor(["units", unit, taps], "float32"),
            "frame_segments": nn.spec.Tensor(["units", unit], "int32"),
            "$": {"param_mode": "packed", "effect_mode": "none"},
        }
    }
    mod, named_params = tower.export_tvm(spec=spec)
    target = tvm.target.Target("llvm")
    executable = tvm.compile(mod, target=target, relax_pipeline=lowering_pipeline(target))
    vm = relax.VirtualMachine(executable, tvm.cpu())
    hf = hf_tower.state_dict()
    params = [
        tvm.runtime.tensor(hf[qwen3_5_vision_weight_source(name)].numpy().astype(np.float32))
        for name, _ in named_params
    ]
    return config, vm, params


def test_grids_span_several_sizes(processed) -> None:
    grids = processed["image_grid_thw"].tolist()
    assert len({tuple(grid) for grid in grids}) == len(IMAGE_SIZES)
    sides = [side for _, h, w in grids for side in (h, w)]
    assert min(sides) < 4 < max(sides)


def test_interpolation_taps_equal_transformers(encoder, processed) -> None:
    from transformers.vision_utils import get_vision_interpolation_indices_and_weights

    config = encoder[0]
    grids = processed["image_grid_thw"]
    layout = learned_position_layout(
        grids.numpy(), config.spatial_merge_size, config.num_position_embeddings
    )
    indices, weights = get_vision_interpolation_indices_and_weights(
        grids,
        num_grid_per_side=config.position_grid_side,
        mode="bilinear",
        align_corners=True,
        spatial_merge_size=config.spatial_merge_size,
    )
    np.testing.assert_array_equal(layout.interpolation_indices.reshape(-1, 4), indices.numpy())
    np.testing.assert_array_equal(layout.interpolation_weights.reshape(-1, 4), weights.numpy())


def test_encoder_output_equals_transformers(encoder, hf_tower, processed) -> None:
    config, vm, params = encoder
    grids = processed["image_grid_thw"]
    layout = learned_position_layout(
        grids.numpy(), config.spatial_merge_size, config.num_position_embeddings
    )
    pixels = processed["pixel_values"].numpy().astype(np.float32)
    patches = pixels.reshape(-1, config.merge_unit, config.patch_width)
    inputs = [tvm.runtime.tensor(np.ascontiguousarray(a)) for a in (patches, *layout.arrays())]
    ours = vm["forward"](*inputs, params).numpy()
    with torch.no_grad():
        expected = hf_tower(processed["pixel_values"], grid_thw=grids).pooler_output.numpy()
    assert ours.shape == expected.shape == (patches.shape[0], VISION["out_hidden_size"])
    np.testing.assert_allclose(ours, expected, atol=TOLERANCE, rtol=0)


@pytest.mark.parametrize(
    ("change", "named"),
    [
        ({"hidden_act": "silu"}, "hidden_act 'silu'"),
        ({"num_position_embeddings": 20}, "num_position_embeddings 20"),
        ({"rope_parameters": {"rope_type": "yarn"}}, "rope_type 'yarn'"),
    ],
)
def test_unsupported_configs_are_refused_by_name(change, named) -> None:
    with pytest.raises(_Refused, match=named):
        parse_qwen3_5_vision_config({**VISION, **change}, _Refused)
