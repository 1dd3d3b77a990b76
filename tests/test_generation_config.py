"""Stop ids and sampling defaults read from a checkpoint's config.json and
generation_config.json."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from vllm_tvm.checkpoints.generation_config import (
    generation_defaults_from_checkpoint,
    stop_token_ids_from_checkpoint,
)


def checkpoint(tmp_path: Path, config: Any = None, generation: Any = None) -> Path:
    """A model directory with the given config.json / generation_config.json contents
    (None: file absent)."""
    if config is not None:
        (tmp_path / "config.json").write_text(json.dumps(config))
    if generation is not None:
        (tmp_path / "generation_config.json").write_text(json.dumps(generation))
    return tmp_path


@pytest.mark.parametrize(
    ("config_eos", "generation_eos", "expected"),
    [
        (2, [2, 7, 9], [2, 7, 9]),
        ([5, 2], 7, [5, 2, 7]),
        (128001, [128001, 128008, 128009], [128001, 128008, 128009]),
        ([3, 3], [4, 3, 4], [3, 4]),
        (None, [4, 5], [4, 5]),
        (1, None, [1]),
    ],
)
def test_stop_ids_merge_config_then_generation_config_without_repeats(
    tmp_path: Path, config_eos: Any, generation_eos: Any, expected: list[int]
) -> None:
    model_dir = checkpoint(tmp_path, {"eos_token_id": config_eos}, {"eos_token_id": generation_eos})
    assert stop_token_ids_from_checkpoint(model_dir) == expected


def test_missing_generation_config_gives_the_config_ids(tmp_path: Path) -> None:
    assert stop_token_ids_from_checkpoint(checkpoint(tmp_path, {"eos_token_id": [1, 2]})) == [1, 2]


@pytest.mark.parametrize(
    "raw",
    ["{not json", "[1, 2]", '{"eos_token_id": "</s>"}', '{"eos_token_id": [7, null]}', "\udcff"],
)
def test_malformed_generation_config_is_ignored(tmp_path: Path, raw: str) -> None:
    model_dir = checkpoint(tmp_path, {"eos_token_id": 2})
    (model_dir / "generation_config.json").write_bytes(raw.encode("utf-8", "surrogateescape"))
    assert stop_token_ids_from_checkpoint(model_dir) == [2]
    assert generation_defaults_from_checkpoint(model_dir) == {}


def test_checkpoint_without_any_config_has_no_stop_ids(tmp_path: Path) -> None:
    assert stop_token_ids_from_checkpoint(tmp_path) == []


def test_malformed_config_json_is_an_error_naming_the_file(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text("{oops")
    with pytest.raises(ValueError, match=r"config\.json is not valid JSON"):
        stop_token_ids_from_checkpoint(tmp_path)


def test_config_eos_of_the_wrong_type_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="eos_token_id must be an int or a list"):
        stop_token_ids_from_checkpoint(checkpoint(tmp_path, {"eos_token_id": "</s>"}))


def test_sampling_defaults_match_transformers_generation_config(tmp_path: Path) -> None:
    transformers = pytest.importorskip("transformers")
    generation = {
        "temperature": 0.6,
        "top_p": 0.9,
        "top_k": 20,
        "min_p": 0.05,
        "repetition_penalty": 1.1,
        "max_new_tokens": 256,
        "do_sample": True,
        "eos_token_id": [1, 2],
    }
    model_dir = checkpoint(tmp_path, {"eos_token_id": 1}, generation)
    reference = transformers.GenerationConfig.from_pretrained(model_dir).to_diff_dict()
    renamed = {"max_new_tokens": "max_tokens"}
    keys = ["temperature", "top_p", "top_k", "min_p", "repetition_penalty", "max_new_tokens"]
    expected = {renamed.get(k, k): reference[k] for k in keys}
    assert generation_defaults_from_checkpoint(model_dir) == expected


def test_sampling_defaults_leave_out_absent_and_mistyped_values(tmp_path: Path) -> None:
    generation = {"temperature": "hot", "top_k": 40.5, "top_p": True, "repetition_penalty": 1}
    defaults = generation_defaults_from_checkpoint(checkpoint(tmp_path, None, generation))
    assert defaults == {"repetition_penalty": 1.0}
    assert isinstance(defaults["repetition_penalty"], float)


def test_no_generation_config_means_no_sampling_defaults(tmp_path: Path) -> None:
    assert generation_defaults_from_checkpoint(checkpoint(tmp_path, {"eos_token_id": 1})) == {}
