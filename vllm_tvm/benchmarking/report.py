"""A benchmark's result with its conditions: the JSON file and the table printed per level.

Why it exists: a number without its conditions (model, device, dtype, lengths, concurrency,
versions, whether tokenization was timed, when) cannot be compared with anything, so the
report carries them all, and the JSON layout is fixed here in one place.
"""

from __future__ import annotations

import json
import os
import platform
import sys
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from vllm_tvm.benchmarking.metrics import LevelMetrics

REPORT_SCHEMA = "vllm-tvm-bench/1"

_TABLE_COLUMNS = (
    ("conc", 5),
    ("reqs", 5),
    ("seconds", 9),
    ("req/s", 8),
    ("out tok/s", 10),
    ("tot tok/s", 10),
    ("TTFT ms mean/med/p99", 22),
    ("TPOT ms mean/med/p99", 22),
    ("ITL ms", 8),
    ("max ITL ms", 11),
)


@dataclass
class BenchReport:
    """Conditions, setup timings and one `LevelMetrics` per concurrency level."""

    conditions: dict[str, Any]
    setup_seconds: dict[str, float] = field(default_factory=dict)
    levels: list[LevelMetrics] = field(default_factory=list)
    date: str = field(
        default_factory=lambda: datetime.now(timezone.utc).isoformat(timespec="seconds")
    )

    def to_dict(self) -> dict[str, Any]:
        """The JSON document: schema, date, conditions, setup_seconds, levels."""
        return {
            "schema": REPORT_SCHEMA,
            "date": self.date,
            "conditions": self.conditions,
            "setup_seconds": self.setup_seconds,
            "levels": [level.to_dict() for level in self.levels],
        }

    def write_json(self, path: str | Path) -> Path:
        """Write the report to `path` (parents created); the path."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(self.to_dict(), indent=2) + "\n", encoding="utf-8")
        return path


def versions() -> dict[str, str]:
    """Versions of what produced the numbers (torch only when it was imported)."""
    import numpy
    import tvm

    import vllm_tvm

    found = {
        "vllm_tvm": vllm_tvm.__version__,
        "tvm": str(tvm.__version__),
        "numpy": numpy.__version__,
        "python": platform.python_version(),
    }
    torch = sys.modules.get("torch")
    if torch is not None:
        found["torch"] = str(torch.__version__)
    return found


def host() -> dict[str, Any]:
    """The machine: OS, CPU model and count."""
    return {
        "platform": platform.platform(),
        "cpu": _cpu_model(),
        "cpu_count": os.cpu_count(),
    }


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.partition(":")[2].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def table_header() -> str:
    """The column titles of `table_row`."""
    return "  ".join(title.rjust(width) for title, width in _TABLE_COLUMNS)


def table_row(level: LevelMetrics) -> str:
    """One level as a line of the human table."""

    def trio(mean: float | None, median: float | None, p99: float | None) -> str:
        if mean is None or median is None or p99 is None:
            return "-"
        return f"{mean:.1f}/{median:.1f}/{p99:.1f}"

    cells = (
        str(level.concurrency),
        str(level.completed),
        f"{level.duration:.2f}",
        f"{level.request_throughput:.3f}",
        f"{level.output_throughput:.2f}",
        f"{level.total_token_throughput:.2f}",
        trio(level.mean_ttft_ms, level.median_ttft_ms, level.p99_ttft_ms),
        trio(level.mean_tpot_ms, level.median_tpot_ms, level.p99_tpot_ms),
        "-" if level.mean_itl_ms is None else f"{level.mean_itl_ms:.1f}",
        "-" if level.max_itl_ms is None else f"{level.max_itl_ms:.1f}",
    )
    row = "  ".join(
        cell.rjust(width) for cell, (_, width) in zip(cells, _TABLE_COLUMNS, strict=True)
    )
    if level.mean_acceptance_length is None:
        return row
    return f"{row}  mean acceptance length {level.mean_acceptance_length:.2f}"
