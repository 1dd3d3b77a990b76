"""Engine-level decode-only throughput (vllm_tvm.benchmarking.decode_only, and the script
benchmarks/engine_decode.py) on the tiny Llama on the CPU: vLLM's formula, warm-up with every
batch before any timing, exact token counts, and a JSON that compare.py can check."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import pytest

from vllm_tvm.benchmarking import decode_only
from vllm_tvm.benchmarking.decode_only import BatchRun, DecodeOnly, measure_decode_only

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"
sys.path[:0] = [str(BENCHMARKS), str(BENCHMARKS / "peers")]

import compare  # noqa: E402  (benchmarks/peers/compare.py)
import engine_decode  # noqa: E402  (benchmarks/engine_decode.py)

BATCHES = (1, 3)
INPUT_LEN, OUTPUT_LEN = 6, 5


def test_decode_only_is_vllms_difference_of_medians() -> None:
    def run(batch: int, output_len: int, seconds: float) -> BatchRun:
        return BatchRun(batch, output_len, seconds, seconds / 2, batch * (output_len - 1))

    result = DecodeOnly(
        batch=4,
        input_len=8,
        output_len=5,
        full=[run(4, 5, 2.0), run(4, 5, 2.2), run(4, 5, 9.0)],
        first=[run(4, 1, 1.0), run(4, 1, 1.2), run(4, 1, 0.1)],
    )
    assert result.tok_s == pytest.approx(4 * 4 / (2.2 - 1.0))
    assert result.after_prefill_tok_s == pytest.approx(16 / 1.1)
    assert result.aggregate_tok_s == pytest.approx(4 * 5 / 2.2)


def test_every_batch_runs_untimed_before_the_first_timed_run(make_llm, monkeypatch) -> None:
    engine = make_llm().engine
    calls: list[tuple[int, int]] = []
    real_run_batch = decode_only.run_batch

    def counting(engine, prompts, output_len):
        calls.append((len(prompts), output_len))
        return real_run_batch(engine, prompts, output_len)

    monkeypatch.setattr(decode_only, "run_batch", counting)
    measure_decode_only(engine, BATCHES, INPUT_LEN, OUTPUT_LEN, repeats=2)
    warmup, timed = calls[: 2 * len(BATCHES)], calls[2 * len(BATCHES) :]
    assert set(warmup) == {(b, n) for b in BATCHES for n in (OUTPUT_LEN, 1)}
    assert sorted(timed) == sorted([(b, n) for b in BATCHES for n in (OUTPUT_LEN, 1)] * 2)


def test_the_tiny_engine_reports_every_batch_with_exact_token_counts(make_llm) -> None:
    engine = make_llm().engine
    results = measure_decode_only(engine, BATCHES, INPUT_LEN, OUTPUT_LEN, repeats=1)
    assert [result.batch for result in results] == list(BATCHES)
    for result in results:
        (full,), (first,) = result.full, result.first
        # The prompts fit one step's token budget: every token after the first is timed.
        assert full.after_prefill_tokens == result.batch * (OUTPUT_LEN - 1)
        # Timings of a millisecond-long tiny run are noise: only that they were taken is
        # checked (their difference can have either sign on a busy machine).
        assert full.seconds > 0 and first.seconds > 0
        assert math.isfinite(result.tok_s) and result.after_prefill_tok_s > 0


def test_a_single_token_output_has_no_decode_step_and_is_refused(make_llm) -> None:
    with pytest.raises(ValueError, match="output_len must be >= 2"):
        measure_decode_only(make_llm().engine, BATCHES, INPUT_LEN, 1)


def test_the_script_writes_values_that_compare_divides_only_against_the_same_level(
    tiny_model_dir, tmp_path: Path, capsys
) -> None:
    out = tmp_path / "ours.json"
    argv = ["--model", str(tiny_model_dir("llama")), "--batches", "2", "--input-len", "6"]
    argv += ["--output-len", "4", "--repeats", "1", "--max-num-batched-tokens", "64"]
    assert engine_decode.main([*argv, "--out", str(out)]) == 0
    ours = json.loads(out.read_text())
    assert ours["conditions"]["level"] == "engine"
    assert ours["conditions"]["warmup"] == "each-batch"
    assert ours["conditions"]["shape"]["hidden_size"] == 64
    assert ours["metric_conditions"]["decode_b2_tok_s"] == {
        "input_len": 6,
        "output_len": 4,
        "batch": 2,
    }
    assert math.isfinite(ours["decode_b2_tok_s"]) and len(ours["raw"]["b2_out4_s"]) == 1
    # A tiny run's decode rate is noise of either sign on a busy machine (see above): the
    # division is checked on a set value.
    ours["decode_b2_tok_s"] = 100.0
    out.write_text(json.dumps(ours))
    alike = {**ours, "decode_b2_tok_s": ours["decode_b2_tok_s"] / 2}
    runner = {**alike, "conditions": {**ours["conditions"], "level": "runner"}}
    capsys.readouterr()
    for peer, expected in ((alike, "2.00x"), (runner, "refused")):
        (tmp_path / "peer.json").write_text(json.dumps(peer))
        compare.main(["--ours", str(out), "--vllm", str(tmp_path / "peer.json"), "--batches", "2"])
        line = next(
            line for line in capsys.readouterr().out.splitlines() if "decode-only b2" in line
        )
        assert line.rstrip(" |").endswith(expected)


def test_ttft_requests_record_the_lone_prompt_time_compare_divides(
    tiny_model_dir, tmp_path: Path, capsys
) -> None:
    # The tiny model holds 512 positions: a 500-token prompt stands in for 1,024 and its key
    # is renamed to vLLM's for the division; the recorded workload is checked as written.
    out = tmp_path / "ours.json"
    argv = ["--model", str(tiny_model_dir("llama")), "--batches", "1", "--input-len", "500"]
    argv += ["--output-len", "2", "--repeats", "1", "--ttft-requests", "3"]
    argv += ["--max-num-batched-tokens", "512"]
    assert engine_decode.main([*argv, "--out", str(out)]) == 0
    ours = json.loads(out.read_text())
    assert len(ours["raw"]["ttft_500_s"]) == 3
    assert ours["ttft_500_ms_median"] == pytest.approx(sorted(ours["raw"]["ttft_500_s"])[1] * 1e3)
    workload = {"input_len": 500, "output_len": 1, "batch": 1}
    assert ours["metric_conditions"]["ttft_500_ms_median"] == workload
    ours["ttft_1024_ms_median"] = ours["ttft_500_ms_median"]
    ours["metric_conditions"]["ttft_1024_ms_median"] = {**workload, "input_len": 1024}
    out.write_text(json.dumps(ours))
    peer = {**ours, "ttft_1024_ms_median": ours["ttft_1024_ms_median"] * 2}
    (tmp_path / "peer.json").write_text(json.dumps(peer))
    capsys.readouterr()
    compare.main(["--ours", str(out), "--vllm", str(tmp_path / "peer.json"), "--batches", "1"])
    line = next(line for line in capsys.readouterr().out.splitlines() if "TTFT" in line)
    assert line.rstrip(" |").endswith("0.50x")
