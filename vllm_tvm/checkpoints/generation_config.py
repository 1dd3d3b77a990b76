"""What a checkpoint says about generation beyond its weights: which ids end a reply and
which sampling defaults its authors chose.

Why: chat models often end a turn with a token other than the tokenizer's EOS (Llama 3's
`<|eot_id|>`, Qwen's `<|im_end|>`); those ids live in `config.json` and
`generation_config.json`, and vLLM stops on all of them. vLLM also uses the
generation_config sampling values as request defaults, so we read them the same way.
`generation_config.json` is optional and sometimes hand-edited, so a missing or malformed one
is ignored; `config.json` is the model's definition, so a malformed one is an error.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

CONFIG_FILE = "config.json"
GENERATION_CONFIG_FILE = "generation_config.json"

# generation_config key -> (request field, type). As in vLLM, `max_new_tokens` becomes
# `max_tokens`.
_SAMPLING_DEFAULTS: dict[str, tuple[str, type]] = {
    "temperature": ("temperature", float),
    "top_p": ("top_p", float),
    "top_k": ("top_k", int),
    "min_p": ("min_p", float),
    "repetition_penalty": ("repetition_penalty", float),
    "max_new_tokens": ("max_tokens", int),
}


def _eos_ids(value: Any) -> list[int] | None:
    """`eos_token_id` as a list, or None when it is neither an int nor a list of ints."""
    if value is None:
        return []
    values = value if isinstance(value, list) else [value]
    if all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in values):
        return values
    return None


def _read_optional_json(path: Path) -> dict[str, Any]:
    """A JSON object from `path`, or {} when it is missing or not a JSON object."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return {}
    return data if isinstance(data, dict) else {}


def _read_config(model_dir: Path) -> dict[str, Any]:
    path = model_dir / CONFIG_FILE
    if not path.is_file():
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise ValueError(f"{path} is not valid JSON: {err}") from err
    if not isinstance(data, dict):
        raise ValueError(f"{path} must hold a JSON object, got {type(data).__name__}")
    return data


def stop_token_ids_from_checkpoint(model_dir: str | Path) -> list[int]:
    """The ids that end generation: `config.json`'s `eos_token_id` first (the primary one),
    then those of `generation_config.json`, each an int or a list, without repeats."""
    model_dir = Path(model_dir)
    config_path = model_dir / CONFIG_FILE
    config_ids = _eos_ids(_read_config(model_dir).get("eos_token_id"))
    if config_ids is None:
        raise ValueError(
            f"{config_path}: eos_token_id must be an int or a list of non-negative ints"
        )
    generation = _read_optional_json(model_dir / GENERATION_CONFIG_FILE)
    generation_ids = _eos_ids(generation.get("eos_token_id")) or []
    return list(dict.fromkeys([*config_ids, *generation_ids]))


def _as_number(value: Any, kind: type) -> int | float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    if kind is int:
        return value if isinstance(value, int) else None
    return float(value) if math.isfinite(value) else None


def generation_defaults_from_checkpoint(model_dir: str | Path) -> dict[str, int | float]:
    """Sampling defaults from `generation_config.json` under vLLM's request field names
    (temperature, top_p, top_k, min_p, repetition_penalty, max_tokens). Keys that are absent
    or not numbers of the right kind are left out; no file means {}."""
    generation = _read_optional_json(Path(model_dir) / GENERATION_CONFIG_FILE)
    defaults: dict[str, int | float] = {}
    for key, (field, kind) in _SAMPLING_DEFAULTS.items():
        value = _as_number(generation.get(key), kind)
        if value is not None:
            defaults[field] = value
    return defaults
