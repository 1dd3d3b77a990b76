"""benchmarks/peers/compare.py: the ratio table of ours against the peers.

Inputs are synthetic result files in the formats of benchmarks/engine_decode.py (ours) and
benchmarks/peers/run_*.py; expected ratios are recomputed here from the inputs. Unless a test
says otherwise every file records the same conditions, so every ratio may be taken.
"""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

PEERS = Path(__file__).resolve().parents[1] / "benchmarks" / "peers"
sys.path.insert(0, str(PEERS))
spec = importlib.util.spec_from_file_location("peers_compare", PEERS / "compare.py")
assert spec is not None and spec.loader is not None
compare = importlib.util.module_from_spec(spec)
sys.modules["peers_compare"] = compare  # dataclasses look their module up there
spec.loader.exec_module(compare)

SHAPE = {
    "hidden_size": 4096,
    "intermediate_size": 14336,
    "num_hidden_layers": 32,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "head_dim": 128,
    "vocab_size": 128256,
}
CONDITIONS = {
    "level": "engine",
    "input_len": 1024,
    "output_len": 256,
    "dtype": "bfloat16",
    "shape": SHAPE,
    "warmup": "each-batch",
}
PER_METRIC = {
    "decode_b1_tok_s": {"input_len": 128, "output_len": 257, "batch": 1},
    "ttft_1024_ms_median": {"output_len": 1, "batch": 1},
    **{f"{kind}_b{b}_tok_s": {"batch": b} for kind in ("aggregate", "decode") for b in (32, 64)},
}
OURS = {
    "conditions": CONDITIONS,
    "metric_conditions": PER_METRIC,
    "decode_b1_tok_s": 198.0,
    "ttft_1024_ms_median": 88.0,
    "decode_b32_tok_s": 2400.0,
    "decode_b1_ms_per_step": 5.05,
    "profile_decode_b1": {"x": [1.0, 2]},
}
VLLM = {
    "engine": "vllm",
    "conditions": CONDITIONS,
    "metric_conditions": PER_METRIC,
    "decode_b1_tok_s": 200.0,
    "ttft_1024_ms_median": 35.2,
    "aggregate_b32_tok_s": 5072.0,
    "decode_b32_tok_s": 6000.0,
    "aggregate_b64_tok_s": 8401.0,
    "decode_b64_tok_s": 9800.0,
}
LLAMACPP = {
    "engine": "llama.cpp",
    "conditions": CONDITIONS,
    "metric_conditions": PER_METRIC,
    "decode_b1_tok_s": 209.5,
    "ttft_1024_ms_median": 39.5,
    "decode_b32_tok_s": 3600.0,
    "error": "RuntimeError: batched-bench skipped [64]",
}


def row(text: str, label: str) -> list[str]:
    line = next(line for line in text.splitlines() if line.startswith(f"| {label}"))
    return [cell.strip() for cell in line.strip("|").split("|")]


def test_b1_decode_ratio_is_ours_over_each_peer() -> None:
    text = compare.table(OURS, {"vllm": VLLM, "llamacpp": LLAMACPP, "hf": None}, [32, 64])
    cells = row(text, "b1 decode")
    assert cells[1:] == ["198.0", "200.0", f"{198 / 200:.2f}x", "209.5", f"{198 / 209.5:.2f}x"]


def test_ttft_row_is_marked_lower_is_better() -> None:
    text = compare.table(OURS, {"vllm": VLLM, "llamacpp": None, "hf": None}, [32])
    cells = row(text, "TTFT@1024")
    assert cells[0] == "TTFT@1024 (ms) ↓"
    assert cells[-1] == f"{88 / 35.2:.2f}x"


def test_metric_missing_on_one_side_is_not_divided() -> None:
    text = compare.table(OURS, {"vllm": VLLM, "llamacpp": None, "hf": None}, [32, 64])
    assert row(text, "aggregate b32")[1:] == ["n/a", "5,072", "n/a"]
    assert row(text, "decode-only b32")[1:] == ["2,400", "6,000", f"{2400 / 6000:.2f}x"]


def test_rows_nobody_measured_are_left_out() -> None:
    text = compare.table(OURS, {"vllm": VLLM, "llamacpp": None, "hf": None}, [32, 64, 256])
    assert "b256" not in text


def test_peers_without_a_file_get_no_column() -> None:
    text = compare.table(OURS, {"vllm": None, "llamacpp": LLAMACPP, "hf": None}, [32])
    header = text.splitlines()[0]
    assert "llama.cpp" in header and "vLLM" not in header and "HF" not in header


def test_failed_peer_run_is_reported_under_the_table() -> None:
    text = compare.table(OURS, {"vllm": None, "llamacpp": LLAMACPP, "hf": None}, [32])
    assert "llama.cpp run failed: RuntimeError: batched-bench skipped [64]" in text


def test_command_line_prints_and_writes_the_table(tmp_path: Path, capsys) -> None:
    files = {}
    for name, data in (("ours", OURS), ("vllm", VLLM)):
        files[name] = tmp_path / f"{name}.json"
        files[name].write_text(json.dumps(data))
    out = tmp_path / "table.md"
    argv = ["--ours", str(files["ours"]), "--vllm", str(files["vllm"]), "--out", str(out)]
    assert compare.main(argv) == 0
    assert capsys.readouterr().out == out.read_text()
    assert "| metric | ours | vLLM | ours ÷ vLLM |" in out.read_text()


def test_unreadable_result_file_names_the_file(tmp_path: Path) -> None:
    broken = tmp_path / "vllm.json"
    broken.write_text("{not json")
    with pytest.raises(SystemExit, match=r"vllm\.json"):
        compare.main(["--ours", str(broken)])


def with_conditions(result: dict, key: str, **changes) -> dict:
    """`result` with the conditions of metric `key` changed (or removed, where None)."""
    per_metric = {**result["metric_conditions"].get(key, {}), **changes}
    metric_conditions = {**result["metric_conditions"], key: per_metric}
    return {**result, "metric_conditions": metric_conditions}


def without_field(result: dict, field: str) -> dict:
    conditions = {k: v for k, v in result["conditions"].items() if k != field}
    per_metric = {
        key: {k: v for k, v in fields.items() if k != field}
        for key, fields in result["metric_conditions"].items()
    }
    return {**result, "conditions": conditions, "metric_conditions": per_metric}


@pytest.mark.parametrize(
    ("field", "ours_value", "peer_value"),
    [
        ("level", "runner", "engine"),
        ("input_len", 1024, 128),
        ("output_len", 256, 128),
        ("batch", 32, 64),
        ("dtype", "bfloat16", "float16"),
        ("warmup", "each-batch", "one 8-prompt call"),
    ],
)
def test_a_ratio_across_unlike_conditions_is_refused_naming_the_field(
    field: str, ours_value, peer_value
) -> None:
    ours = with_conditions(OURS, "decode_b32_tok_s", **{field: ours_value})
    peer = with_conditions(VLLM, "decode_b32_tok_s", **{field: peer_value})
    text = compare.table(ours, {"vllm": peer, "llamacpp": None, "hf": None}, [32])
    assert row(text, "decode-only b32")[1:] == ["2,400", "6,000", "refused"]
    assert (
        f"- decode-only b32 (tok/s), ours ÷ vLLM refused: {field} differs "
        f"(ours {ours_value}, vLLM {peer_value})"
    ) in text
    assert row(text, "b1 decode")[-1] == f"{198 / 200:.2f}x"  # other rows still divide


def test_a_different_model_shape_is_refused_naming_the_dimension() -> None:
    peer_shape = {**SHAPE, "num_hidden_layers": 16}
    peer = {**VLLM, "conditions": {**CONDITIONS, "shape": peer_shape}}
    text = compare.table(OURS, {"vllm": peer, "llamacpp": None, "hf": None}, [32])
    assert row(text, "b1 decode")[-1] == "refused"
    assert "shape.num_hidden_layers differs (ours 32, vLLM 16)" in text


@pytest.mark.parametrize("field", ["level", "input_len", "batch", "dtype", "shape", "warmup"])
def test_a_file_that_does_not_record_a_condition_is_refused_not_guessed(field: str) -> None:
    peer = without_field(LLAMACPP, field)
    text = compare.table(OURS, {"vllm": None, "llamacpp": peer, "hf": None}, [32])
    assert row(text, "b1 decode")[1:] == ["198.0", "209.5", "refused"]
    assert f"{field} not recorded (llama.cpp)" in text


def test_historical_files_without_conditions_are_refused_on_every_row() -> None:
    bare = {k: v for k, v in VLLM.items() if k not in ("conditions", "metric_conditions")}
    text = compare.table(OURS, {"vllm": bare, "llamacpp": None, "hf": None}, [32, 64])
    for label in ("b1 decode", "TTFT@1024", "decode-only b32"):  # both sides have a value
        assert row(text, label)[-1] == "refused"
    assert "level not recorded (vLLM)" in text


def test_several_ours_files_keep_each_metrics_own_conditions(tmp_path: Path, capsys) -> None:
    runner = {
        "conditions": {**CONDITIONS, "level": "runner"},
        "metric_conditions": {"decode_b32_tok_s": {"batch": 32}},
        "decode_b32_tok_s": 2400.0,
    }
    engine = {k: v for k, v in OURS.items() if k != "decode_b32_tok_s"}
    files = []
    for name, data in (("runner", runner), ("engine", engine), ("vllm", VLLM)):
        files.append(tmp_path / f"{name}.json")
        files[-1].write_text(json.dumps(data))
    assert compare.main(["--ours", str(files[0]), str(files[1]), "--vllm", str(files[2])]) == 0
    text = capsys.readouterr().out
    assert row(text, "decode-only b32")[-1] == "refused"
    assert "level differs (ours runner, vLLM engine)" in text
    assert row(text, "b1 decode")[-1] == f"{198 / 200:.2f}x"


def test_one_metric_in_two_ours_files_is_refused(tmp_path: Path) -> None:
    first, second = tmp_path / "a.json", tmp_path / "b.json"
    for path in (first, second):
        path.write_text(json.dumps(OURS))
    with pytest.raises(SystemExit, match="decode_b1_tok_s is in more than one --ours file"):
        compare.main(["--ours", str(first), str(second)])


def bench_report(**conditions) -> dict:
    """A `vllm-tvm bench` report of one level at concurrency 32, 1,024 in / 256 out."""
    recorded = {
        "level": "engine",
        "dtype": "bfloat16",
        "model_config": {**SHAPE, "architecture": "LlamaForCausalLM", "rope_theta": 5e5},
        "workload": "random",
        "input_len": 1024,
        "output_len": 256,
        "warmup": {"prompt_len": 1024, "output_len": 4, "concurrency": [32]},
        **conditions,
    }
    level = {"concurrency": 32, "output_throughput": 2850.0}
    return {"schema": "vllm-tvm-bench/1", "conditions": recorded, "levels": [level]}


def compare_bench_report(tmp_path: Path, capsys, report: dict) -> str:
    ours, vllm = tmp_path / "ours.json", tmp_path / "vllm.json"
    ours.write_text(json.dumps(report))
    vllm.write_text(json.dumps(VLLM))
    compare.main(["--ours", str(ours), "--vllm", str(vllm), "--batches", "32"])
    return capsys.readouterr().out


def test_a_bench_report_gives_its_aggregates_with_their_conditions(tmp_path, capsys) -> None:
    text = compare_bench_report(tmp_path, capsys, bench_report())
    assert row(text, "aggregate b32")[1:] == ["2,850", "5,072", f"{2850 / 5072:.2f}x"]


def test_a_bench_report_that_did_not_warm_every_level_is_refused(tmp_path, capsys) -> None:
    warmup = {"prompt_len": 1024, "output_len": 4, "concurrency": [1]}
    text = compare_bench_report(tmp_path, capsys, bench_report(warmup=warmup))
    assert row(text, "aggregate b32")[-1] == "refused"
    assert "warmup not recorded (ours)" in text


def test_a_bench_report_from_before_conditions_were_recorded_is_refused(tmp_path, capsys) -> None:
    committed = PEERS.parents[0] / "results" / "h200_same_run_2026-11-30" / "ours_engine_c32.json"
    text = compare_bench_report(tmp_path, capsys, json.loads(committed.read_text()))
    assert row(text, "aggregate b32")[1:3] == ["2,850", "5,072"]
    assert row(text, "aggregate b32")[-1] == "refused"
    for field in ("level", "shape", "warmup"):
        assert f"{field} not recorded (ours)" in text
