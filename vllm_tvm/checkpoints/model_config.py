"""Reading a checkpoint's model config, whatever form the checkpoint takes.

A model is either an HF directory (config.json beside safetensors) or a single GGUF file
whose metadata holds the config. Both become the same HF-style config dict here.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any


class CheckpointError(ValueError):
    """A model path that is not a usable checkpoint."""


def is_gguf(path: Path) -> bool:
    """True for a single-file GGUF checkpoint."""
    return path.is_file() and path.suffix == ".gguf"


def read_model_config(model_path: str | Path) -> dict[str, Any]:
    """The HF-style config dict of a model directory or GGUF file (a fresh copy)."""
    path = Path(model_path)
    if is_gguf(path):
        return copy.deepcopy(_gguf_header(path)[0])
    config_file = path / "config.json"
    if not path.exists():
        raise CheckpointError(f"model path {path} does not exist")
    if path.is_file():
        raise CheckpointError(
            f"model file {path} is not a GGUF file (.gguf); a Hugging Face checkpoint is a "
            "directory holding config.json"
        )
    if not config_file.is_file():
        raise CheckpointError(f"model directory {path} has no config.json")
    try:
        return json.loads(config_file.read_text(encoding="utf-8"))
    except json.JSONDecodeError as err:
        raise CheckpointError(f"{config_file} is not valid JSON: {err}") from err


def checkpoint_dtype(config: dict[str, Any]) -> str:
    """The dtype the checkpoint stores its weights in (`auto` resolves to this)."""
    value = config.get("dtype") or config.get("torch_dtype") or "float32"
    return {"float": "float32", "half": "float16"}.get(str(value), str(value))


def read_gguf_tensor_types(model_path: str | Path) -> dict[str, str]:
    """ggml type name (`Q4_1`, `F32` ...) of every tensor of a GGUF file, by HF name."""
    return dict(_gguf_header(Path(model_path))[1])


def _gguf_header(path: Path) -> tuple[dict[str, Any], dict[str, str]]:
    """(HF config, tensor types) of a GGUF file, from its header parsed once per process."""
    from vllm_tvm.checkpoints.gguf_config import gguf_tensor_types, hf_config_from_gguf
    from vllm_tvm.checkpoints.gguf_reader import open_gguf

    reader = open_gguf(path)
    return hf_config_from_gguf(reader), gguf_tensor_types(reader)
