"""benchmarks/peers/run_llamacpp.py: llama.cpp's benchmark output becomes compare.py's keys.

The inputs are real outputs of `llama-bench -o json` and `llama-batched-bench --output-format
jsonl` (the llama-cpp-python 0.3.36 sources, built for the CPU, on a 2-layer random GGUF from
write_random_gguf.py); expected values are recomputed here from the raw fields.
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks" / "peers"))

from result_conditions import EACH_BATCH, merge_results
from run_llamacpp import BATCHED_WARMUP, parse_batched_bench, parse_llama_bench

DATA = Path(__file__).parent / "data"
BENCH = (DATA / "peers_llama_bench_cpu.json").read_text()
BATCHED = (DATA / "peers_batched_bench_cpu.jsonl").read_text()


def test_prompt_test_gives_median_prefill_time() -> None:
    pp = next(t for t in json.loads(BENCH) if t["n_gen"] == 0)
    result = parse_llama_bench(BENCH)
    expected_ms = statistics.median(pp["samples_ns"]) / 1e6
    assert result[f"ttft_{pp['n_prompt']}_ms_median"] == pytest.approx(expected_ms)


def test_generation_test_gives_median_decode_rate() -> None:
    tg = next(t for t in json.loads(BENCH) if t["n_prompt"] == 0)
    result = parse_llama_bench(BENCH)
    expected = tg["n_gen"] / (statistics.median(tg["samples_ns"]) / 1e9)
    assert result["decode_b1_tok_s"] == pytest.approx(expected)


def test_output_without_generation_test_is_refused() -> None:
    only_pp = json.dumps([t for t in json.loads(BENCH) if t["n_gen"] == 0])
    with pytest.raises(ValueError, match="lacks a pp or tg test"):
        parse_llama_bench(only_pp)


def test_batched_rows_give_aggregate_and_decode_only_rates() -> None:
    result = parse_batched_bench("log line\n" + BATCHED + "\nllama_perf_context_print: ...\n")
    for line in filter(None, BATCHED.splitlines()):
        row = json.loads(line)
        b = row["pl"]
        prefix = "batched_" if b == 1 else ""
        assert result[f"{prefix}aggregate_b{b}_tok_s"] == pytest.approx(
            b * row["tg"] / (row["t_pp"] + row["t_tg"])
        )
        assert result[f"{prefix}decode_b{b}_tok_s"] == pytest.approx(row["speed_tg"])


def test_batched_b1_row_does_not_replace_llama_bench_b1() -> None:
    result = parse_batched_bench(BATCHED)
    assert "decode_b1_tok_s" not in result and "aggregate_b1_tok_s" not in result


def test_repeated_batch_size_keeps_its_first_row() -> None:
    rows = [json.loads(line) for line in filter(None, BATCHED.splitlines())]
    second = dict(rows[1], speed_tg=rows[1]["speed_tg"] * 10)
    result = parse_batched_bench(BATCHED + json.dumps(second) + "\n")
    assert result[f"decode_b{rows[1]['pl']}_tok_s"] == pytest.approx(rows[1]["speed_tg"])


def test_batched_output_without_rows_is_refused() -> None:
    with pytest.raises(ValueError, match="no jsonl rows"):
        parse_batched_bench("main: n_kv_max = 1024\n")


def test_each_number_records_its_workload_and_warm_up() -> None:
    tests = json.loads(BENCH)
    pp = next(t for t in tests if t["n_gen"] == 0)
    tg = next(t for t in tests if t["n_prompt"] == 0)
    bench = parse_llama_bench(BENCH)["metric_conditions"]
    assert bench[f"ttft_{pp['n_prompt']}_ms_median"] == {
        "input_len": pp["n_prompt"],
        "output_len": 0,
        "batch": 1,
        "warmup": EACH_BATCH,
    }
    assert bench["decode_b1_tok_s"]["output_len"] == tg["n_gen"]
    batched = parse_batched_bench(BATCHED)["metric_conditions"]
    for line in filter(None, BATCHED.splitlines()):
        row = json.loads(line)
        if row["pl"] == 1:
            continue
        assert batched[f"decode_b{row['pl']}_tok_s"] == {
            "input_len": row["pp"],
            "output_len": row["tg"],
            "batch": row["pl"],
            "warmup": BATCHED_WARMUP,
        }


def test_merging_both_tools_keeps_every_numbers_conditions() -> None:
    report: dict = {"conditions": {"level": "runner"}}
    merge_results(report, parse_llama_bench(BENCH))
    merge_results(report, parse_batched_bench(BATCHED))
    assert "decode_b1_tok_s" in report["metric_conditions"]
    batched_keys = [key for key in report["metric_conditions"] if key.startswith("decode_b")]
    assert len(batched_keys) > 1
    assert report["conditions"] == {"level": "runner"}
