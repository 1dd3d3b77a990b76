"""benchmarks/peers/compare.py: the ratio table of ours against the peers.

Inputs are synthetic result files in the formats of benchmarks/h200_llama.py (ours) and
benchmarks/peers/run_*.py; expected ratios are recomputed here from the inputs.
"""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

PEERS = Path(__file__).resolve().parents[1] / "benchmarks" / "peers"
spec = importlib.util.spec_from_file_location("peers_compare", PEERS / "compare.py")
assert spec is not None and spec.loader is not None
compare = importlib.util.module_from_spec(spec)
sys.modules["peers_compare"] = compare  # dataclasses look their module up there
spec.loader.exec_module(compare)

OURS = {
    "decode_b1_tok_s": 198.0,
    "ttft_1024_ms_median": 88.0,
    "decode_b32_tok_s": 2400.0,
    "decode_b1_ms_per_step": 5.05,
    "profile_decode_b1": {"x": [1.0, 2]},
}
VLLM = {
    "engine": "vllm",
    "decode_b1_tok_s": 200.0,
    "ttft_1024_ms_median": 35.2,
    "aggregate_b32_tok_s": 5072.0,
    "decode_b32_tok_s": 6000.0,
    "aggregate_b64_tok_s": 8401.0,
    "decode_b64_tok_s": 9800.0,
}
LLAMACPP = {
    "engine": "llama.cpp",
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
