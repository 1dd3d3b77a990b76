"""Ours against the peers, from the JSON files of one GPU run: a markdown table of ratios.

Why: the numbers come from four programs with four output formats; this is the one place
that lines them up, says which definition each cell uses, and refuses to divide numbers that
do not measure the same thing: before each ratio the two numbers' recorded conditions (level,
input and output length, batch, dtype, model shape, warm-up policy; result_conditions.py)
are compared, and a cell whose conditions differ, or are not recorded, says `refused` with
the fields that differ named under the table.

Inputs: ours as one or more JSON files with the same keys (`decode_b1_tok_s`,
`ttft_1024_ms_median`, `aggregate_bB_tok_s`, `decode_bB_tok_s`; e.g. benchmarks/
engine_decode.py's output, or a `vllm-tvm bench --output-json` report for the aggregates),
the peers from run_vllm.py, run_llamacpp.py and run_hf.py (same keys; their
`decode_bB_tok_s` is decode-only after 1,024-token prompts, `aggregate_bB_tok_s` is output
tokens / wall time of 1,024 in + 256 out). Every ratio is ours ÷ peer: above 1 is better for
ours in tok/s rows, worse in the TTFT row.

usage: python3 benchmarks/peers/compare.py --ours OURS.json [MORE.json ...] [--vllm V.json]
           [--llamacpp L.json] [--hf H.json] [--batches 32,64,256] [--out TABLE.md]
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass
from pathlib import Path

from result_conditions import (
    EACH_BATCH,
    conditions_of,
    differences,
    model_shape,
    record_workload,
)

PEERS = (("vllm", "vLLM"), ("llamacpp", "llama.cpp"), ("hf", "HF"))
BENCH_SCHEMA = "vllm-tvm-bench/1"
"""`vllm-tvm bench`'s report (vllm_tvm/benchmarking/report.py), read by `from_bench_report`."""


@dataclass(frozen=True)
class Row:
    """One metric: its label, the JSON key, and which direction is better."""

    label: str
    key: str
    higher_is_better: bool
    note: str = ""


def rows_for(batches: list[int]) -> list[Row]:
    """The table's metrics in display order."""
    rows = [
        Row("b1 decode (tok/s)", "decode_b1_tok_s", True),
        Row("TTFT@1024 (ms)", "ttft_1024_ms_median", False),
    ]
    for b in batches:
        rows.append(
            Row(
                f"aggregate b{b} (out tok/s)",
                f"aggregate_b{b}_tok_s",
                True,
                "1,024 in / 256 out, output tokens / wall time incl. prefill",
            )
        )
    for b in batches:
        rows.append(
            Row(
                f"decode-only b{b} (tok/s)",
                f"decode_b{b}_tok_s",
                True,
                "decode steps only, after 1,024-token prompts",
            )
        )
    return rows


def load(path: Path | None) -> dict | None:
    """A result file, or None when not given; a missing or broken file is an error."""
    return None if path is None else load_result(path)


def load_result(path: Path) -> dict:
    """A result file (a `vllm-tvm bench` report is read as its aggregate numbers); a missing
    or broken file is an error naming it."""
    try:
        result = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as error:
        raise SystemExit(f"cannot read result file {path}: {error}") from error
    return from_bench_report(result) if result.get("schema") == BENCH_SCHEMA else result


def from_bench_report(report: dict) -> dict:
    """A `vllm-tvm bench` JSON as compare's keys: each level's output tokens per second of
    the whole level as `aggregate_bC_tok_s`. Conditions the report does not record (reports
    written before they were) are left out, so those ratios are refused, not guessed."""
    recorded = report["conditions"]
    conditions = {key: recorded[key] for key in ("level", "dtype") if key in recorded}
    if "model_config" in recorded:
        conditions["shape"] = model_shape(recorded["model_config"])
    warmed = recorded.get("warmup", {}).get("concurrency")
    levels = report["levels"]
    if warmed is not None and {level["concurrency"] for level in levels} <= set(warmed):
        conditions["warmup"] = EACH_BATCH
    result: dict = {"engine": "vllm-tvm", "conditions": conditions}
    for level in levels:
        key = f"aggregate_b{level['concurrency']}_tok_s"
        result[key] = level["output_throughput"]
        if recorded.get("workload") == "random":  # prompts of exactly input_len tokens
            record_workload(
                result, key, recorded["input_len"], recorded["output_len"], level["concurrency"]
            )
    return result


def fmt(value: float | None) -> str:
    if value is None:
        return "n/a"
    return f"{value:,.1f}" if value < 1000 else f"{value:,.0f}"


def ratio(ours: float | None, peer: float | None) -> str:
    if ours is None or peer is None or peer == 0:
        return "n/a"
    return f"{ours / peer:.2f}x"


def table(ours: dict, peers: dict[str, dict | None], batches: list[int]) -> str:
    """The markdown table (plus notes on definitions, refused ratios and failed runs)."""
    present = [(key, name) for key, name in PEERS if peers.get(key) is not None]
    header = ["metric", "ours"]
    for _, name in present:
        header += [name, f"ours ÷ {name}"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    notes: list[str] = []
    refusals: list[str] = []
    for row in rows_for(batches):
        ours_value = ours.get(row.key)
        peer_values = [peers[key].get(row.key) for key, _ in present]
        if ours_value is None and all(v is None for v in peer_values):
            continue
        direction = "↑" if row.higher_is_better else "↓"
        cells = [f"{row.label} {direction}", fmt(ours_value)]
        for (key, name), value in zip(present, peer_values, strict=True):
            reasons = differences(ours, peers[key], name, row.key)
            if ours_value is None or value is None or not reasons:
                cells += [fmt(value), ratio(ours_value, value)]
                continue
            cells += [fmt(value), "refused"]
            refusals.append(f"{row.label}, ours ÷ {name} refused: {'; '.join(reasons)}")
        lines.append("| " + " | ".join(cells) + " |")
        if row.note and row.note not in notes:
            notes.append(row.note)
    out = "\n".join(lines)
    out += "\n\n↑ higher is better, ↓ lower is better; ratios are ours ÷ peer."
    for note in notes + refusals:
        out += f"\n- {note}"
    for key, name in [("ours", "ours"), *present]:
        result = ours if key == "ours" else peers[key]
        if result.get("error"):
            out += f"\n- {name} run failed: {result['error']}"
    return out + "\n"


def merge_ours(results: list[dict], batches: list[int]) -> dict:
    """Several result files of ours as one: each metric keeps the conditions of its file.

    A metric present in two files is refused (which one the table shows would be a guess)."""
    if len(results) == 1:
        return results[0]
    metric_keys = {row.key for row in rows_for(batches)}
    merged: dict = {"conditions": {}, "metric_conditions": {}}
    errors = []
    for result in results:
        for key, value in result.items():
            if key not in metric_keys:
                continue
            if key in merged:
                raise SystemExit(f"{key} is in more than one --ours file")
            merged[key] = value
            merged["metric_conditions"][key] = conditions_of(result, key)
        if result.get("error"):
            errors.append(result["error"])
    if errors:
        merged["error"] = "; ".join(errors)
    return merged


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--ours", type=Path, nargs="+", required=True)
    for key, name in PEERS:
        parser.add_argument(f"--{key}", type=Path, help=f"{name} result JSON")
    parser.add_argument("--batches", default="32,64,256")
    parser.add_argument("--out", type=Path, help="also write the table here")
    args = parser.parse_args(argv)
    batches = [int(b) for b in args.batches.split(",")]
    ours = merge_ours([load_result(path) for path in args.ours], batches)
    peers = {key: load(getattr(args, key)) for key, _ in PEERS}
    text = table(ours, peers, batches)
    print(text, end="")
    if args.out:
        args.out.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
