"""The GPU check of expert models (benchmarks/h200_moe_check.py) run on the CPU: the artifact
builder's layout is what the check reads, and its verdicts hold on CPU artifacts (which the
test suite proves token-exact), so the GPU run fails only on what the GPU changes."""

from __future__ import annotations

import json
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT / "benchmarks"))
sys.path.insert(0, str(REPO_ROOT / "scripts"))

import build_moe_cuda_artifacts  # noqa: E402
import h200_moe_check  # noqa: E402


def test_the_check_passes_on_cpu_artifacts_built_by_the_builder(tmp_path: Path) -> None:
    root = tmp_path / "moe"
    build_moe_cuda_artifacts.build(root, ["qwen3_moe_sparse_step"], ["float32"], "llvm")
    out = tmp_path / "check.json"
    assert h200_moe_check.main(["--root", str(root), "--out", str(out), "--device", "cpu"]) == 0
    (report,) = json.loads(out.read_text())["results"]
    assert report["model"] == "qwen3_moe_sparse_step"
    assert report["equals_transformers"] and report["batched_equals_sequential"]
    assert report["one_forward_per_step"]
    assert 0 <= report["max_logit_difference"] <= h200_moe_check.LOGIT_TOLERANCE


def test_a_report_fails_on_an_error_or_a_token_difference() -> None:
    good = {"batched_equals_sequential": True, "equals_transformers": True}
    assert h200_moe_check.passed(good)
    assert h200_moe_check.passed({"batched_equals_sequential": True})  # 16-bit: no oracle
    assert not h200_moe_check.passed({**good, "equals_transformers": False})
    assert not h200_moe_check.passed({**good, "batched_equals_sequential": False})
    assert not h200_moe_check.passed({**good, "logits_within_tolerance": False})
    assert not h200_moe_check.passed({**good, "error": "Traceback ..."})
