"""Build the tiny expert / MLA checkpoints and their sm_90a artifacts for the GPU check.

Why: the GPU box runs a runtime-only TVM and never compiles; everything
benchmarks/h200_moe_check.py needs is made here (nvcc, no GPU) and carried there:

    PYTHONPATH=. .venv/bin/python scripts/build_moe_cuda_artifacts.py --out .device/moe

Layout under `--out` (.device/ is gitignored): `<model>/model/` the tiny random HF
checkpoint (tests/tiny_models.py, seed 0) and `<model>/<dtype>/` its artifact for `--target`
(float32, and bfloat16 with TIR GEMMs, so the check does not depend on the cuBLASLt
extension). The default set is 13 MiB; it built in 11 minutes on a loaded 2-core machine.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
CHECKED_MODELS = ("qwen3_moe_sparse_step", "mixtral_top2", "deepseek_v3_mla_qlora_groups")
"""Tiny configs of tests/tiny_models.py: Qwen3-MoE, Mixtral, DeepSeek-V3 (MLA, groups)."""
DTYPES = ("float32", "bfloat16")
MODEL_DIR = "model"
"""Each model's checkpoint directory name under its folder (artifacts sit beside it)."""


def build(out: Path, models: list[str], dtypes: list[str], target: str) -> list[Path]:
    """Write each model's checkpoint and one artifact per dtype; the artifact paths."""
    sys.path.insert(0, str(REPO_ROOT / "tests"))
    from tiny_models import TINY_MODELS, make_tiny_model

    from vllm_tvm.artifacts.compile_options import CompileOptions
    from vllm_tvm.compiler.build import compile_model, make_request

    artifacts = []
    for name in models:
        model_dir = make_tiny_model(TINY_MODELS[name], out / name / MODEL_DIR)
        for dtype in dtypes:
            gemm = "tir" if dtype != "float32" else "auto"
            request = make_request(CompileOptions(model_dir, target, dtype, gemm=gemm))
            artifacts.append(compile_model(request, out / name / dtype))
    return artifacts


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, default=REPO_ROOT / ".device" / "moe")
    parser.add_argument("--model", action="append", choices=CHECKED_MODELS)
    parser.add_argument("--dtype", action="append", choices=DTYPES)
    parser.add_argument("--target", default="cuda:sm_90a", help="llvm for a CPU dry run")
    args = parser.parse_args(argv)
    for artifact in build(
        args.out, args.model or list(CHECKED_MODELS), args.dtype or list(DTYPES), args.target
    ):
        print(artifact)


if __name__ == "__main__":
    main()
