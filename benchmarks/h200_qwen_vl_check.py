"""On a CUDA machine: Qwen2.5-VL and Qwen3.5 / 3.6 images on prebuilt sm_90a artifacts (no
compile there), against transformers fp32 on the same GPU and the same weights.

Why this exists: tests/test_qwen2_5_vl_images.py and tests/test_qwen3_5_vl_images.py prove the
vision towers (Qwen2.5-VL's windows, Qwen3.5's learned position table), M-RoPE prefill and
decode (Qwen3.5's over the hybrid Gated DeltaNet decoder) token-exact on CPU, and
tests/test_qwen2_5_vl_cuda_build.py proves they build for sm_90a; only a GPU run checks the
cubins they run as. On each family's tiny random checkpoint of tests/tiny_qwen_vlm.py
(`Qwen2_5_VLForConditionalGeneration`, `Qwen3_5ForConditionalGeneration`), three prompts with
one to three images of different sizes (as each family's CPU test):
- the compiled encoder's merged tokens against transformers' `model.visual` on its own
  processor's patches (max abs difference; fp32 within ENCODER_TOLERANCE), on the GPU with
  TF32 off and on the CPU;
- greedy 24 tokens per prompt against transformers' generate (its processor's
  `pixel_values` and `image_grid_thw`); fp32 must be equal, bf16 reports the rows that agree.
`run` checks every family whose artifacts are under the root.

usage:
  here:     PYTHONPATH=.:tests python3 benchmarks/h200_qwen_vl_check.py build --root DIR
  GPU box:  PYTHONPATH=<tvm bundle>:.:tests python3 benchmarks/h200_qwen_vl_check.py run \
                --root DIR --out FILE.json
"""

from __future__ import annotations

import inspect
import json
import sys
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from h200_vision_mtp_check import (
    NEW_TOKENS,
    TARGET,
    VISION_DTYPES,
    _compile,
    _fresh,
    build_or_run,
    fp32_oracle,
)

ENCODER_TOLERANCE = 1e-4
"""fp32 bound on the merged tokens' max abs difference, the CPU tests'."""


@dataclass(frozen=True)
class QwenFamily:
    """One Qwen vision family's tiny checkpoint and oracle."""

    name: str
    """The checkpoint's folder under the root; its artifacts are art_<name>_<dtype>."""
    checkpoint_maker: str
    """The function of tests/tiny_qwen_vlm.py that saves the tiny checkpoint."""
    hf_class: str
    """transformers' class of the checkpoint (the oracle)."""
    image_sizes: tuple[tuple[tuple[int, int], ...], ...]
    """(height, width) of each prompt's images, as the family's CPU test."""


FAMILIES = (
    QwenFamily(
        "qwen2_5_vl",
        "qwen2_5_vlm_checkpoint",
        "Qwen2_5_VLForConditionalGeneration",
        (((60, 45),), ((70, 120), (56, 56)), ((20, 100), (90, 60), (30, 30))),
    ),
    QwenFamily(
        "qwen3_5_vl",
        "qwen3_5_vlm_checkpoint",
        "Qwen3_5ForConditionalGeneration",
        (((64, 100),), ((70, 140), (64, 64)), ((30, 130), (100, 60), (32, 32))),
    ),
)


def build(root: Path) -> None:
    """Each family's tiny checkpoint and its sm_90a artifacts under `root`."""
    import tiny_qwen_vlm

    for family in FAMILIES:
        vlm = getattr(tiny_qwen_vlm, family.checkpoint_maker)(_fresh(root / family.name))
        tokens = {
            "start": vlm.vision_start_token_id,
            "end": vlm.vision_end_token_id,
            "image": vlm.image_token_id,
        }
        (root / family.name / "tiny_vlm.json").write_text(json.dumps(tokens))
        for dtype in VISION_DTYPES:
            _compile(vlm.path, root / f"art_{family.name}_{dtype}", dtype)


def _prompts(
    llm: Any, tokens_of: dict[str, int], family: QwenFamily
) -> list[tuple[list[int], list[Any]]]:
    """Token ids with <|vision_start|><|image_pad|><|vision_end|> per image, and the images
    (random RGB pixels, seeded)."""
    from engine_helpers import random_image

    image = [tokens_of["start"], tokens_of["image"], tokens_of["end"]]
    encode = llm.tokenizer.encode
    ids = [
        [*encode("Describe this:"), *image, *encode(" in a few words.")],
        [*encode("Compare"), *image, *encode(" and"), *image, *encode(".")],
        [*image, *encode("Once"), *image, *image, *encode(" upon a time there was")],
    ]
    seeds = iter(range(1, 7))
    images = [[random_image(h, w, next(seeds)) for h, w in sizes] for sizes in family.image_sizes]
    return list(zip(ids, images, strict=True))


def _hf_processor(model: Path) -> Any:
    """transformers' Qwen2-VL image processor: the Pillow one where this release has it."""
    import transformers

    try:
        from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import (
            Qwen2VLImageProcessorPil as processor_class,
        )
    except ImportError:
        processor_class = transformers.Qwen2VLImageProcessor
    return processor_class.from_pretrained(model)


def _visual(hf: Any, pixel_values: Any, grid_thw: Any) -> Any:
    """transformers' merged vision tokens (a tensor, or an output carrying them as
    `pooler_output`)."""
    out = hf.model.visual(pixel_values, grid_thw=grid_thw)
    return out if hasattr(out, "shape") else out.pooler_output


def _hf_greedy(hf: Any, expanded: list[int], processed: Any, image_token_id: int) -> list[int]:
    """transformers' greedy tokens after the expanded prompt with the processor's images."""
    import torch

    ids = torch.tensor([expanded], device="cuda")
    inputs = {
        "input_ids": ids,
        "attention_mask": torch.ones_like(ids),
        "pixel_values": processed["pixel_values"].cuda(),
        "image_grid_thw": processed["image_grid_thw"].cuda(),
    }
    if "mm_token_type_ids" in inspect.signature(hf.model.get_rope_index).parameters:
        inputs["mm_token_type_ids"] = (ids == image_token_id).int()
    hf.model.rope_deltas = None  # transformers keeps the last call's
    with torch.no_grad():
        out = hf.generate(
            **inputs, max_new_tokens=NEW_TOKENS, do_sample=False, eos_token_id=None, pad_token_id=0
        )
    return out[0, len(expanded) :].tolist()


def check_vision(root: Path, family: QwenFamily, dtype: str) -> dict[str, Any]:
    import torch
    import transformers
    from engine_helpers import run_to_completion

    from vllm_tvm.entrypoints.llm import LLM
    from vllm_tvm.runtime.sampling.params import SamplingParams

    model = root / family.name
    tokens_of = json.loads((model / "tiny_vlm.json").read_text())
    artifact = str(root / f"art_{family.name}_{dtype}")
    llm = LLM(model, artifact=artifact, device="cuda", show_progress=False)
    hf_class = getattr(transformers, family.hf_class)
    hf_cpu = hf_class.from_pretrained(model, dtype=torch.float32).eval()
    hf = hf_class.from_pretrained(model, dtype=torch.float32).cuda().eval()
    processor = _hf_processor(model)
    greedy = SamplingParams(temperature=0.0, max_tokens=NEW_TOKENS, ignore_eos=True)
    report: dict[str, Any] = {"dtype": dtype, "encoder": [], "rows": []}
    for ids, images in _prompts(llm, tokens_of, family):
        prompt_images = llm.engine.make_request(ids, greedy, images=images).seqs[0].images
        processed = processor([image.pixels for image in images], return_tensors="pt")
        ours_patches = prompt_images.pixel_values.reshape(-1, prompt_images.pixel_values.shape[-1])
        encoded = llm.runner.encode_images(prompt_images.pixel_values, prompt_images.encoder_layout)
        with torch.no_grad():
            expected = _visual(
                hf, processed["pixel_values"].cuda(), processed["image_grid_thw"].cuda()
            )
        expected = expected.float().cpu().numpy()
        with torch.no_grad():
            on_cpu = _visual(hf_cpu, processed["pixel_values"], processed["image_grid_thw"])
        on_cpu = on_cpu.numpy()
        report["encoder"].append(
            {
                "images": len(images),
                "tokens": int(expected.shape[0]),
                "transformers_max_abs": float(np.abs(expected).max()),
                "patch_max_abs_diff": float(
                    np.abs(ours_patches - processed["pixel_values"].numpy()).max()
                ),
                "max_abs_diff": float(np.abs(encoded.astype(np.float32) - expected).max()),
                "max_abs_diff_vs_transformers_cpu": float(
                    np.abs(encoded.astype(np.float32) - on_cpu).max()
                ),
                "transformers_gpu_vs_cpu": float(np.abs(expected - on_cpu).max()),
            }
        )
        request_id = llm.engine.add_request(None, ids, greedy, images=images)
        output = run_to_completion(llm)[request_id]
        theirs = _hf_greedy(hf, list(output.prompt_token_ids), processed, tokens_of["image"])
        ours = list(output.outputs[0].token_ids)
        report["rows"].append(
            {"images": len(images), "equal": ours == theirs, "ours": ours, "transformers": theirs}
        )
    report["rows_equal"] = sum(row["equal"] for row in report["rows"])
    report["encoder_within_tolerance"] = all(
        entry["max_abs_diff"] <= ENCODER_TOLERANCE for entry in report["encoder"]
    )
    return report


def run(root: Path, out: Path) -> None:
    import torch
    import transformers

    fp32_oracle()
    report: dict[str, Any] = {
        "conditions": {
            "gpu": torch.cuda.get_device_name(),
            "torch": torch.__version__,
            "transformers": transformers.__version__,
            "target": TARGET,
            "weights": "tiny random checkpoints of the CPU tests (tests/tiny_qwen_vlm.py), "
            "artifacts compiled off the device",
            "oracle": "transformers fp32 on the same GPU (TF32 off in cuDNN and matmul), "
            "its own Qwen2-VL image processor; the encoder also against transformers on CPU",
            "new_tokens": NEW_TOKENS,
            "image_sizes": {family.name: family.image_sizes for family in FAMILIES},
            "encoder_tolerance_fp32": ENCODER_TOLERANCE,
        }
    }
    for family in FAMILIES:
        for dtype in VISION_DTYPES:
            name = f"{family.name}_{dtype}"
            if not (root / f"art_{family.name}_{dtype}").is_dir():
                continue
            try:
                report[name] = check_vision(root, family, dtype)
            except Exception:  # one failing check must not hide the others' results
                report[name] = {"error": traceback.format_exc()}
            out.write_text(json.dumps(report, indent=1))
            print(name, json.dumps(report[name])[:600], flush=True)


def main() -> None:
    build_or_run(__doc__.split("\n")[0], build, run)


if __name__ == "__main__":
    main()
