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
  `pixel_values` and `image_grid_thw`); fp32 must be equal, bf16 reports the rows that agree
  and, per row, where ours and transformers' own bf16 (the same weights cast) first leave
  fp32, with the top-2 logit gaps there (ours, and fp32's teacher-forced on the common
  prefix): a departure at a near-tie is bf16 rounding, one at a wide fp32 gap is a bug.
`run` checks every family and dtype whose artifacts (art_<family>_<dtype>) are under the root.

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


def _hf_inputs(hf: Any, ids: list[int], processed: Any, image_token_id: int) -> dict[str, Any]:
    """transformers' inputs for `ids` (the expanded prompt, maybe with a continuation) and the
    processor's images, on the GPU; the pixels in the model's dtype."""
    import torch

    device = hf.device
    tensor = torch.tensor([ids], device=device)
    inputs = {
        "input_ids": tensor,
        "attention_mask": torch.ones_like(tensor),
        "pixel_values": processed["pixel_values"].to(device, hf.dtype),
        "image_grid_thw": processed["image_grid_thw"].to(device),
    }
    if "mm_token_type_ids" in inspect.signature(hf.model.get_rope_index).parameters:
        inputs["mm_token_type_ids"] = (tensor == image_token_id).int()
    hf.model.rope_deltas = None  # transformers keeps the last call's
    return inputs


def _hf_greedy(hf: Any, expanded: list[int], processed: Any, image_token_id: int) -> list[int]:
    """transformers' greedy tokens after the expanded prompt with the processor's images."""
    import torch

    inputs = _hf_inputs(hf, expanded, processed, image_token_id)
    with torch.no_grad():
        out = hf.generate(
            **inputs, max_new_tokens=NEW_TOKENS, do_sample=False, eos_token_id=None, pad_token_id=0
        )
    return out[0, len(expanded) :].tolist()


def _hf_step_logits(hf: Any, inputs: tuple[list[int], Any, int], continuation: list[int]) -> Any:
    """transformers' logits ([steps, vocab], fp32 on the CPU) that choose each token of
    `continuation` after the prompt of `inputs`, teacher-forced: one forward over both."""
    import torch

    expanded, processed, image_token_id = inputs
    model_inputs = _hf_inputs(hf, expanded + continuation, processed, image_token_id)
    with torch.no_grad():
        logits = hf(**model_inputs).logits[0].float().cpu()
    return logits[len(expanded) - 1 : len(expanded) - 1 + len(continuation)]


def _top2_gaps(logits: Any) -> list[float]:
    """Per row, the best logit minus the second best: how near a tie each greedy step was."""
    import torch

    top = torch.topk(logits, 2, dim=-1).values
    return (top[:, 0] - top[:, 1]).tolist()


def _first_difference(tokens: list[int], reference: list[int]) -> int | None:
    """The first step where `tokens` leaves `reference` (None where they are equal)."""
    return next((i for i, (a, b) in enumerate(zip(tokens, reference, strict=True)) if a != b), None)


def bf16_departures(
    hf: Any,
    hf_bf16: Any,
    inputs: tuple[list[int], Any, int],
    ours: list[int],
    our_top2_gaps: list[float],
    fp32_tokens: list[int],
) -> dict[str, Any]:
    """Near-tie evidence for a bf16 row: where ours and transformers' own bf16 (the same
    weights cast, on the GPU) leave transformers fp32, and the top-2 gaps there. At a step
    both runs share the fp32 prefix, so the fp32 gap (teacher-forced on its own tokens) says
    whether bf16 rounding could flip that choice; `inputs` is (expanded ids, processed images,
    image token id)."""
    fp32_logits = _hf_step_logits(hf, inputs, fp32_tokens)
    fp32_gaps = _top2_gaps(fp32_logits)
    theirs_bf16 = _hf_greedy(hf_bf16, *inputs)
    bf16_gaps = _top2_gaps(_hf_step_logits(hf_bf16, inputs, fp32_tokens))
    ours_at = _first_difference(ours, fp32_tokens)
    theirs_at = _first_difference(theirs_bf16, fp32_tokens)
    report: dict[str, Any] = {
        "fp32_top2_gaps": fp32_gaps,
        "fp32_teacher_forced_argmax_equal": fp32_logits.argmax(-1).tolist() == fp32_tokens,
        "ours_first_diff": ours_at,
        "transformers_bf16": theirs_bf16,
        "transformers_bf16_first_diff": theirs_at,
        "transformers_bf16_equal_ours": theirs_bf16 == ours,
    }
    if ours_at is not None:
        best = float(fp32_logits[ours_at].max())
        report["ours_top2_gap_at_diff"] = our_top2_gaps[ours_at]
        report["fp32_top2_gap_at_ours_diff"] = fp32_gaps[ours_at]
        report["fp32_gap_to_our_token_at_diff"] = best - float(fp32_logits[ours_at, ours[ours_at]])
    if theirs_at is not None:
        report["transformers_bf16_top2_gap_at_its_diff"] = bf16_gaps[theirs_at]
        report["fp32_top2_gap_at_transformers_bf16_diff"] = fp32_gaps[theirs_at]
    return report


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
    reduced = dtype != "float32"
    hf_bf16 = (
        hf_class.from_pretrained(model, dtype=torch.bfloat16).cuda().eval() if reduced else None
    )
    processor = _hf_processor(model)
    # Two raw logprobs per step: their difference is the logits' top-2 gap.
    greedy = SamplingParams(
        temperature=0.0, max_tokens=NEW_TOKENS, ignore_eos=True, logprobs=2 if reduced else None
    )
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
        hf_inputs = (list(output.prompt_token_ids), processed, tokens_of["image"])
        theirs = _hf_greedy(hf, *hf_inputs)
        completion = output.outputs[0]
        ours = list(completion.token_ids)
        row = {"images": len(images), "equal": ours == theirs, "ours": ours, "transformers": theirs}
        if hf_bf16 is not None:
            our_gaps = [float(e.top_logprobs[0] - e.top_logprobs[1]) for e in completion.logprobs]
            row |= bf16_departures(hf, hf_bf16, hf_inputs, ours, our_gaps, theirs)
        report["rows"].append(row)
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
