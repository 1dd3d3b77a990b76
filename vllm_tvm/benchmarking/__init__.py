"""`vllm-tvm bench`'s machinery: throughput and latency of the engine at a sweep of
concurrencies, with a JSON report and optional PNG plots.

Modules, one job each: config (options, defaults, validation), workload (prompts made and
tokenized before timing), engine_setup (artifact, KV pool size, engine), runner (C requests
in flight, per-request timings), metrics (vLLM's definitions), report (JSON and table),
plots (matplotlib, imported only when asked for), sweep (the order of it all), decode_only
(decode throughput through the engine, the way vLLM's decode-only figure is taken).

The public names below are imported on first use, so that the command line can read the
defaults in `config` without loading TVM.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "BenchConfig": "vllm_tvm.benchmarking.config",
    "pretokenize_from_env": "vllm_tvm.benchmarking.config",
    "LevelMetrics": "vllm_tvm.benchmarking.metrics",
    "BenchReport": "vllm_tvm.benchmarking.report",
    "run_benchmark": "vllm_tvm.benchmarking.sweep",
    "measure_decode_only": "vllm_tvm.benchmarking.decode_only",
    "write_plot": "vllm_tvm.benchmarking.plots",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(_EXPORTS[name]), name)
