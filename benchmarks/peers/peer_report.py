"""Writing a peer's result JSON: as it goes, and once at the end with what failed.

Why: each peer script must leave a JSON even when its engine dies half-way (the numbers
measured so far, the error and its traceback), in one format compare.py reads.
"""

from __future__ import annotations

import json
import os
import sys
import traceback
from pathlib import Path


def save(report: dict, out: Path) -> None:
    """Write the report now, so a run cut short still leaves what it measured."""
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=1))


def record_error(report: dict, error: BaseException) -> None:
    """Put `error` and its traceback in the report (and the traceback on stderr)."""
    report["error"] = f"{type(error).__name__}: {error}"
    report["traceback"] = traceback.format_exc()
    print(report["traceback"], file=sys.stderr, flush=True)


def finish(report: dict, out: Path) -> int:
    """Final save and a one-line summary on stdout; the exit code (1 if anything failed)."""
    report["loadavg_end"] = os.getloadavg()
    save(report, out)
    hidden = ("raw", "shape", "traceback", "definitions")
    print(json.dumps({k: v for k, v in report.items() if k not in hidden}), flush=True)
    return 1 if "error" in report else 0
