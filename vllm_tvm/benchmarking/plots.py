"""PNG plots of a sweep: throughput and latency against concurrency.

Why it exists: a sweep's shape (where throughput flattens, where latency climbs) reads at a
glance from a plot and slowly from a table. matplotlib is optional: it is imported only
here, only when a plot is asked for, and its absence fails by name with the install command
(checked before the run, so no benchmark is lost to it).
"""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any

from vllm_tvm.benchmarking.report import BenchReport

MATPLOTLIB_INSTALL = "pip install matplotlib"


class MissingPlotDependencyError(ImportError):
    """matplotlib is not installed."""


def require_matplotlib() -> Any:
    """The `matplotlib.figure` module, or an error naming the package and its install."""
    try:
        return importlib.import_module("matplotlib.figure")
    except ImportError as err:
        raise MissingPlotDependencyError(
            f"plotting needs matplotlib, which is not installed ({err}); install it with: "
            f"{MATPLOTLIB_INSTALL}"
        ) from err


def write_plot(report: BenchReport, path: str | Path) -> Path:
    """Draw output/total tokens per second (left) and TTFT/TPOT in ms (right, log scale)
    against concurrency into the PNG `path`; the path."""
    figure_module = require_matplotlib()
    levels = report.levels
    if not levels:
        raise ValueError("the report has no level to plot")
    concurrency = [level.concurrency for level in levels]
    figure = figure_module.Figure(figsize=(11, 4.5), layout="constrained")
    throughput, latency = figure.subplots(1, 2)
    throughput.plot(
        concurrency, [lv.output_throughput for lv in levels], "o-", label="output tok/s"
    )
    throughput.plot(
        concurrency, [lv.total_token_throughput for lv in levels], "s--", label="total tok/s"
    )
    throughput.set_ylabel("tokens / s")
    throughput.set_title("Throughput")
    series = [
        ("TTFT mean", "o-", [lv.mean_ttft_ms for lv in levels]),
        ("TTFT p99", "o:", [lv.p99_ttft_ms for lv in levels]),
        ("TPOT mean", "s-", [lv.mean_tpot_ms for lv in levels]),
        ("TPOT p99", "s:", [lv.p99_tpot_ms for lv in levels]),
    ]
    for label, style, values in series:
        points = [(c, v) for c, v in zip(concurrency, values, strict=True) if v is not None]
        if points:
            latency.plot(*zip(*points, strict=True), style, label=label)
    latency.set_yscale("log")
    latency.set_ylabel("milliseconds")
    latency.set_title("Latency")
    for axes in (throughput, latency):
        if len(concurrency) > 1 and max(concurrency) >= 4 * min(concurrency):
            axes.set_xscale("log", base=2)
        axes.set_xticks(concurrency, [str(c) for c in concurrency])
        axes.set_xlabel("concurrency (requests in flight)")
        axes.grid(True, alpha=0.3)
        axes.legend()
    figure.suptitle(_title(report.conditions))
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, format="png", dpi=100)
    return path


def _title(conditions: dict[str, Any]) -> str:
    return (
        f"{conditions.get('model_name', '?')} ({conditions.get('load_format', '?')} weights), "
        f"{conditions.get('device_name') or conditions.get('device', '?')}, "
        f"{conditions.get('dtype', '?')}, in {conditions.get('input_len', '?')} / out "
        f"{conditions.get('output_len', '?')} tokens, {conditions.get('pretokenize_mode', '?')}"
    )
