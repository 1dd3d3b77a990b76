"""On a CUDA machine: Gemma 3 images and the hybrids' MTP drafts, on prebuilt sm_90a artifacts
(no compile there), against transformers fp32 on the same GPU and the same weights.

Why this exists: the CPU suite proves both paths token-exact (tests/test_gemma3_vision_engine.py,
tests/test_hybrid_mtp.py) and CI proves they build for sm_90a; only a GPU run checks the
cubins they run as. Checks:
- Gemma 3 (tiny random Gemma3ForConditionalGeneration, tests/tiny_vlm.py): the compiled
  encoder's soft-token embeddings against transformers' `get_image_features` on the same
  pixel values (max abs difference), and greedy 24 tokens x 3 prompts with one or two
  images of different sizes (our preprocessing) against transformers' generate with its own
  Gemma 3 image processor; fp32 must be equal, bf16 reports the rows that agree.
- Qwen3.5 (tiny random hybrid with an `mtp.*` layer, tests/hybrid_checkpoints.py): greedy
  24 tokens x 3 prompts with MTP off and MTP on (1 and 2 drafts a step), each equal
  transformers' fp32 greedy; drafts and accepted tokens counted.

usage:
  here:     PYTHONPATH=.:tests python3 benchmarks/h200_vision_mtp_check.py build --root DIR
  GPU box:  PYTHONPATH=<tvm bundle>:. python3 benchmarks/h200_vision_mtp_check.py run \
                --root DIR --out FILE.json
"""

from __future__ import annotations

import argparse
import json
import sys
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

TARGET = "cuda:sm_90a"
VISION_DTYPES = ("float32", "bfloat16")
NEW_TOKENS = 24
MTP_PROMPT_LENGTHS = (70, 9, 23)
GEMMA3, HYBRID = "gemma3", "qwen3_5_mtp"


def _compile(model: Path, out: Path, dtype: str, role: str | None = None) -> None:
    from vllm_tvm.artifacts.compile_options import CompileOptions
    from vllm_tvm.compiler.build import compile_model, make_request

    options = CompileOptions(model=model, target=TARGET, dtype=dtype, speculative_role=role)
    compile_model(make_request(options), out, show_progress=False)


def build(root: Path) -> None:
    """The two tiny checkpoints and their sm_90a artifacts under `root`."""
    from hybrid_checkpoints import SHAPE, add_mtp_layer, hf_hybrid_model
    from tiny_vlm import gemma3_vlm_checkpoint

    from vllm_tvm.artifacts.speculative_roles import HEAD_ROLES, TARGET_ROLES
    from vllm_tvm.checkpoints.families.qwen3_next import QWEN3_5

    vlm = gemma3_vlm_checkpoint(_fresh(root / GEMMA3))
    (root / GEMMA3 / "tiny_vlm.json").write_text(
        json.dumps({"boi": vlm.boi_token_id, "image": vlm.image_token_id})
    )
    for dtype in VISION_DTYPES:
        _compile(vlm.path, root / f"art_{GEMMA3}_{dtype}", dtype)
    hybrid_dir = _fresh(root / HYBRID)
    hf = hf_hybrid_model(QWEN3_5)
    hf.save_pretrained(hybrid_dir)
    add_mtp_layer(hybrid_dir, hf)
    rng = np.random.default_rng(1)
    prompts = [rng.integers(0, SHAPE["vocab_size"], n).tolist() for n in MTP_PROMPT_LENGTHS]
    (hybrid_dir / "prompts.json").write_text(json.dumps(prompts))
    _compile(hybrid_dir, root / f"art_{HYBRID}_target", "float32", TARGET_ROLES["mtp"])
    _compile(hybrid_dir, root / f"art_{HYBRID}_head", "float32", HEAD_ROLES["mtp"])


def _fresh(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    return path


def _images() -> list[list[np.ndarray]]:
    """One or two random RGB images per prompt, of different sizes (as the CPU test)."""

    def image(height: int, width: int, seed: int) -> np.ndarray:
        rng = np.random.default_rng(seed)
        return rng.integers(0, 256, (height, width, 3), dtype=np.uint8)

    return [[image(40, 30, 1)], [image(70, 90, 2), image(56, 56, 3)], [image(20, 100, 4)]]


def _vision_prompts(llm: Any, boi: int) -> list[list[int]]:
    encode = llm.tokenizer.encode
    return [
        [*encode("Describe this:"), boi, *encode(" in a few words.")],
        [*encode("Compare"), boi, *encode(" and"), boi, *encode(".")],
        [boi, *encode("Once upon a time there was")],
    ]


def _image_features(hf: Any, pixel_values: Any) -> Any:
    """transformers' projected soft-token embeddings (a tensor, or in newer releases an
    output object carrying them as `pooler_output`)."""
    out = hf.get_image_features(pixel_values=pixel_values)
    return out if hasattr(out, "shape") else out.pooler_output


def check_vision(root: Path, dtype: str) -> dict[str, Any]:
    import torch
    import transformers
    from engine_helpers import run_to_completion
    from transformers_greedy import greedy_tokens

    from vllm_tvm.entrypoints.llm import LLM
    from vllm_tvm.runtime.multimodal.image_decoding import DecodedImage
    from vllm_tvm.runtime.sampling.params import SamplingParams

    model = root / GEMMA3
    tokens_of = json.loads((model / "tiny_vlm.json").read_text())
    artifact = str(root / f"art_{GEMMA3}_{dtype}")
    llm = LLM(model, artifact=artifact, device="cuda", show_progress=False)
    hf = transformers.Gemma3ForConditionalGeneration.from_pretrained(model, dtype=torch.float32)
    hf = hf.cuda().eval()
    processor = transformers.Gemma3ImageProcessor.from_pretrained(model)
    greedy = SamplingParams(temperature=0.0, max_tokens=NEW_TOKENS, ignore_eos=True)
    report: dict[str, Any] = {"dtype": dtype, "encoder_max_abs_diff": [], "rows": []}
    for ids, images in zip(_vision_prompts(llm, tokens_of["boi"]), _images(), strict=True):
        pixel_values = processor(images, return_tensors="pt")["pixel_values"]
        ours_embeddings = llm.runner.encode_images(pixel_values.numpy()).astype(np.float32)
        with torch.no_grad():
            expected = _image_features(hf, pixel_values.cuda()).float().cpu().numpy()
        expected = expected.reshape(ours_embeddings.shape)
        diff = float(np.abs(ours_embeddings - expected).max())
        report["encoder_max_abs_diff"].append(diff)
        decoded = [DecodedImage(pixels=image, part_index=0) for image in images]
        request_id = llm.engine.add_request(None, ids, greedy, images=decoded)
        output = run_to_completion(llm)[request_id]
        expanded = list(output.prompt_token_ids)
        theirs = greedy_tokens(
            hf,
            expanded,
            NEW_TOKENS,
            pixel_values=pixel_values.cuda(),
            image_token_id=tokens_of["image"],
        )
        ours = list(output.outputs[0].token_ids)
        report["rows"].append(
            {"images": len(images), "equal": ours == theirs, "ours": ours, "transformers": theirs}
        )
    report["rows_equal"] = sum(row["equal"] for row in report["rows"])
    return report


def check_mtp(root: Path) -> dict[str, Any]:
    import torch
    from transformers import AutoModelForCausalLM
    from transformers_greedy import greedy_continuations

    from vllm_tvm.entrypoints.llm import LLM
    from vllm_tvm.runtime.sampling.params import SamplingParams
    from vllm_tvm.runtime.speculative.config import SpeculativeConfig

    model = root / HYBRID
    prompts = json.loads((model / "prompts.json").read_text())
    hf = AutoModelForCausalLM.from_pretrained(model, dtype=torch.float32).cuda().eval()
    expected = greedy_continuations(hf, prompts, NEW_TOKENS)
    del hf
    greedy = SamplingParams(temperature=0.0, max_tokens=NEW_TOKENS, ignore_eos=True)
    common = {"device": "cuda", "show_progress": False, "skip_tokenizer_init": True}
    target = str(root / f"art_{HYBRID}_target")
    report: dict[str, Any] = {"transformers_fp32": expected}

    def tokens(llm: Any) -> list[list[int]]:
        return [list(output.outputs[0].token_ids) for output in llm.generate(prompts, greedy)]

    plain = LLM(model, artifact=target, max_model_len=256, **common)
    report["mtp_off"] = tokens(plain)
    report["mtp_off_equal_transformers"] = report["mtp_off"] == expected
    del plain
    for k in (1, 2):
        head = str(root / f"art_{HYBRID}_head")
        spec = SpeculativeConfig("mtp", k, model=str(model), draft_artifact=head)
        llm = LLM(model, artifact=target, max_model_len=256, speculative_config=spec, **common)
        got = tokens(llm)
        stats = llm.engine.metrics.snapshot()
        report[f"mtp_k{k}"] = {
            "equal_transformers": got == expected,
            "equal_mtp_off": got == report["mtp_off"],
            "tokens": got,
            "drafts": stats.spec_decode_num_drafts,
            "draft_tokens": stats.spec_decode_num_draft_tokens,
            "accepted_tokens": stats.spec_decode_num_accepted_tokens,
        }
        del llm
    return report


def fp32_oracle() -> None:
    """transformers in true fp32 on the GPU: cuDNN's convolutions (the patch embeddings)
    default to TF32 on Hopper, and would put the oracle itself ~1e-4 off."""
    import torch

    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False


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
            "weights": "tiny random checkpoints of the CPU tests (tests/tiny_vlm.py, "
            "tests/hybrid_checkpoints.py), artifacts compiled off the device",
            "oracle": "transformers fp32 on the same GPU (TF32 off in cuDNN and matmul)",
            "new_tokens": NEW_TOKENS,
        }
    }
    checks = {f"vision_{dtype}": (check_vision, (root, dtype)) for dtype in VISION_DTYPES}
    checks["hybrid_mtp_fp32"] = (check_mtp, (root,))
    for name, (check, arguments) in checks.items():
        try:
            report[name] = check(*arguments)
        except Exception:  # one failing check must not hide the others' results
            report[name] = {"error": traceback.format_exc()}
        out.write_text(json.dumps(report, indent=1))
        print(name, json.dumps(report[name])[:600], flush=True)


def build_or_run(
    description: str, build: Callable[[Path], None], run: Callable[[Path, Path], None]
) -> None:
    """The command line of a GPU check: `build --root DIR` here, `run --root DIR --out FILE`
    on the GPU machine."""
    parser = argparse.ArgumentParser(description=description)
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("build").add_argument("--root", type=Path, required=True)
    run_args = sub.add_parser("run")
    run_args.add_argument("--root", type=Path, required=True)
    run_args.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    if args.command == "build":
        build(args.root)
    else:
        run(args.root, args.out)


def main() -> None:
    build_or_run(__doc__.split("\n")[0], build, run)


if __name__ == "__main__":
    main()
