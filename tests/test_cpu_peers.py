"""benchmarks/cpu_peers.py: llama-bench's command and figures, our side's child process, the
per-round ratios and their summary.

llama-bench is stood in for by a script printing a real `llama-bench -o json` output
(tests/data/peers_llama_bench_cpu.json: a 32-token prompt test and an 8-token decode test); our
side runs for real on a tiny model.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

import cpu_peers

DATA = Path(__file__).parent / "data" / "peers_llama_bench_cpu.json"


def _args(**overrides: object) -> argparse.Namespace:
    values = {"prompts": "32", "decode": 8, "repetitions": 2} | overrides
    return argparse.Namespace(**values)


def test_llamacpp_side_runs_llama_bench_on_every_usable_cpu(tmp_path: Path) -> None:
    calls = tmp_path / "calls"
    tool = tmp_path / "llama-bench"
    tool.write_text(f'#!/bin/sh\necho "$@" > {calls}\ncat {DATA}\n')
    tool.chmod(0o755)
    figures = cpu_peers.run_llamacpp(tmp_path, Path("model.gguf"), _args())
    threads = len(os.sched_getaffinity(0))
    assert calls.read_text().split() == [
        *("-m", "model.gguf", "-t", str(threads), "-o", "json"),
        *("-p", "32", "-n", "8", "-r", "2"),
    ]
    tests = json.loads(DATA.read_text())
    prompt_ms = statistics.median(ns / 1e6 for ns in tests[0]["samples_ns"])
    decode_ms = statistics.median(ns / 1e6 for ns in tests[1]["samples_ns"])
    assert figures["prefill_32_tok_s"] == pytest.approx(32 / prompt_ms * 1e3)
    assert figures["decode_b1_tok_s"] == pytest.approx(8 / decode_ms * 1e3)
    assert figures["threads"] == threads


def test_summary_takes_medians_over_rounds() -> None:
    rounds = [
        {
            "vllm-tvm": {"decode_b1_tok_s": ours},
            "llama.cpp": {"decode_b1_tok_s": peer},
            "ratio": {"decode_b1_tok_s": ours / peer},
        }
        for ours, peer in [(10.0, 20.0), (30.0, 20.0), (12.0, 40.0)]
    ]
    summary = cpu_peers.summarize(rounds)["decode_b1_tok_s"]
    assert summary["vllm-tvm"] == 12.0
    assert summary["llama.cpp"] == 20.0
    assert (summary["ratio_min"], summary["ratio_median"], summary["ratio_max"]) == (0.3, 0.5, 1.5)


def test_our_side_times_the_runner_in_a_child_process(tiny_model_dir) -> None:
    model = tiny_model_dir("llama")
    env = {"PYTHONPATH": os.getcwd(), "VLLM_TVM_CPU_THREADS": "1"}
    figures = cpu_peers.run_ours(model, _args(prompts="16,24", decode=4), env)
    assert figures["threads"] == 1
    assert figures["artifact"]["cpu_int8_activations"] == "off"  # the default, recorded
    assert sorted(key for key in figures if key.endswith("_tok_s")) == [
        "decode_b1_tok_s",
        "prefill_16_tok_s",
        "prefill_24_tok_s",
    ]
    assert len(figures["raw"]["prefill_24_s"]) == 2
    assert figures["decode_b1_tok_s"] == pytest.approx(
        4 / statistics.median(figures["raw"]["decode_b1_s"])
    )
