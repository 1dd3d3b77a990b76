"""What a result file must say about each of its numbers, so that unlike ones are never divided.

Why: a ratio of two throughputs means something only when both were taken at the same level
(through the serving engine, or the model runner alone), on the same workload (prompt and
output lengths, sequences at once, dtype, model shape) and after the same warm-up. Every
writer (run_vllm.py, run_hf.py, run_llamacpp.py, ../h200_llama.py, ../engine_decode.py)
records these fields with the same names, and compare.py checks them here before dividing.

Layout inside a result JSON: `conditions` holds what is true of every number in the file;
`metric_conditions[key]` holds what is true of the number under `key` alone and wins over
`conditions`. The fields (all required):
  level       "engine": requests through the serving engine's step loop (scheduler, sampling,
              stop rules); "runner": forward calls of the model alone, no scheduler
  input_len   prompt tokens per sequence
  output_len  tokens generated per sequence in the timed call
  batch       sequences in flight at once (a batch, or a concurrency level)
  dtype       weight and activation dtype ("bfloat16", "float16")
  shape       the model's shape: the SHAPE_KEYS of its HF config
  warmup      the warm-up policy: EACH_BATCH, or a sentence saying what ran before timing
"""

from __future__ import annotations

from typing import Any

LEVELS = ("engine", "runner")
SHAPE_KEYS = (
    "hidden_size",
    "intermediate_size",
    "num_hidden_layers",
    "num_attention_heads",
    "num_key_value_heads",
    "head_dim",
    "vocab_size",
)
CONDITION_FIELDS = ("level", "input_len", "output_len", "batch", "dtype", "shape", "warmup")
EACH_BATCH = "each-batch"
"""Before the clock started, every batch size the timed calls use had run once, untimed (so
first-shape costs such as kernel or GEMM-algorithm choice per row count are not timed)."""


def model_shape(config: dict[str, Any]) -> dict[str, int]:
    """The SHAPE_KEYS of an HF config dict (head_dim derived when the config omits it)."""
    head_dim = config.get("head_dim") or config["hidden_size"] // config["num_attention_heads"]
    return {key: int(head_dim if key == "head_dim" else config[key]) for key in SHAPE_KEYS}


def record_workload(
    report: dict[str, Any], key: str, input_len: int, output_len: int, batch: int, **more: Any
) -> None:
    """Say in `report` which workload (and any `more` conditions) the number under `key`
    was measured on."""
    workload = {"input_len": input_len, "output_len": output_len, "batch": batch, **more}
    report.setdefault("metric_conditions", {})[key] = workload


def merge_results(report: dict[str, Any], part: dict[str, Any]) -> None:
    """Add the values of `part` to `report`, keeping both sides' per-metric conditions."""
    per_metric = {**report.get("metric_conditions", {}), **part.get("metric_conditions", {})}
    report |= part
    if per_metric:
        report["metric_conditions"] = per_metric


def conditions_of(result: dict[str, Any], key: str) -> dict[str, Any]:
    """The conditions under which `result[key]` was measured (file-wide, then per metric)."""
    per_metric = result.get("metric_conditions", {}).get(key, {})
    return {**result.get("conditions", {}), **per_metric}


def differences(ours: dict[str, Any], peer: dict[str, Any], peer_name: str, key: str) -> list[str]:
    """Why `ours[key]` and `peer[key]` must not be divided, by field name; empty if alike.

    A field missing on either side is a reason (it is never guessed)."""
    mine, theirs = conditions_of(ours, key), conditions_of(peer, key)
    sides = (("ours", mine), (peer_name, theirs))
    reasons = []
    for field in CONDITION_FIELDS:
        missing = [name for name, side in sides if field not in side]
        if missing:
            reasons.append(f"{field} not recorded ({', '.join(missing)})")
        elif field == "shape":
            reasons += _shape_differences(mine["shape"], theirs["shape"], peer_name)
        elif mine[field] != theirs[field]:
            reasons.append(f"{field} differs (ours {mine[field]}, {peer_name} {theirs[field]})")
    return reasons


def _shape_differences(mine: dict[str, Any], theirs: dict[str, Any], peer_name: str) -> list[str]:
    reasons = []
    for key in SHAPE_KEYS:
        if key not in mine or key not in theirs:
            reasons.append(f"shape.{key} not recorded")
        elif mine[key] != theirs[key]:
            reasons.append(f"shape.{key} differs (ours {mine[key]}, {peer_name} {theirs[key]})")
    return reasons
