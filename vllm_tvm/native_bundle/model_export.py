"""Writes the `model/` directory of an embedding bundle: what libvllm_tvm loads without Python.

Why a format of its own next to the artifact: the Python runtime builds parameters from the
checkpoint at load time (safetensors or GGUF, concatenations, dtype casts, quantized planes);
the C library should only read bytes. So the parameters are built here once, exactly as the
Python runtime builds them, and stored raw in call order (`params.bin`), the tokenizer is
stored as the tokenizer.json the Python runtime uses (built from the GGUF vocabulary for GGUF
models), and `embed.json` records the rest (EOS ids, BOS rule, default sizes) with a sha256 of
each file, which the library checks before loading anything.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

from vllm_tvm.artifacts.manifest import read_manifest, sha256_of_file
from vllm_tvm.checkpoints.generation_config import stop_token_ids_from_checkpoint
from vllm_tvm.runtime.engine.builder import merged_eos_ids
from vllm_tvm.runtime.tokenization.tokenizer import load_tokenizer

EMBED_SCHEMA_VERSION = 1
EMBED_MANIFEST = "embed.json"
PARAMS_FILE = "params.bin"
TOKENIZER_FILE = "tokenizer.json"
DEFAULT_MAX_MODEL_LEN = 2048
DEFAULT_MAX_NUM_SEQS = 8
PREFILL_CHUNK_SIZE = 2048
_ALIGNMENT = 64


def context_limit(model_config: dict[str, Any]) -> int:
    """The model's own context limit (positions, capped by a sliding window), as ModelRunner
    computes it."""
    limit = int(model_config["max_position_embeddings"])
    if model_config.get("sliding_window"):
        limit = min(limit, int(model_config["sliding_window"]))
    return limit


def _write_params(artifact_dir: Path, model_path: Path, dest: Path) -> list[dict[str, Any]]:
    """Build every parameter as the Python runtime does and store them raw, 64-byte aligned."""
    from vllm_tvm.runtime.tvm_runtime import load_runtime
    from vllm_tvm.runtime.weights.loader import load_params, open_weights

    tvm = load_runtime()
    manifest = read_manifest(artifact_dir)
    tensors = load_params(manifest.params, open_weights(model_path), tvm.cpu(0), False)
    entries: list[dict[str, Any]] = []
    offset = 0
    with dest.open("wb") as stream:
        for entry, tensor in zip(manifest.params, tensors, strict=True):
            data = tensor.numpy().tobytes()
            padding = -offset % _ALIGNMENT
            stream.write(b"\0" * padding)
            offset += padding
            stream.write(data)
            shape = [int(dim) for dim in tensor.shape]
            entries.append(
                {
                    "name": entry.name,
                    "dtype": str(tensor.dtype),
                    "shape": shape,
                    "offset": offset,
                    "nbytes": len(data),
                }
            )
            offset += len(data)
    return entries


def write_model_dir(artifact_dir: Path, model_path: Path, dest: Path) -> Path:
    """Write the bundle's model directory for the artifact `artifact_dir` of `model_path`."""
    dest.mkdir(parents=True)
    manifest = read_manifest(artifact_dir)
    for name in manifest.files:
        shutil.copy2(artifact_dir / name, dest / name)
    shutil.copy2(artifact_dir / "manifest.json", dest / "manifest.json")
    params = _write_params(artifact_dir, model_path, dest / PARAMS_FILE)
    tokenizer = load_tokenizer(model_path)
    (dest / TOKENIZER_FILE).write_text(tokenizer.backend.to_str(), encoding="utf-8")
    checkpoint_ids = stop_token_ids_from_checkpoint(model_path) if model_path.is_dir() else []
    limit = context_limit(manifest.model_config)
    max_model_len = min(limit, DEFAULT_MAX_MODEL_LEN)
    embed = {
        "schema_version": EMBED_SCHEMA_VERSION,
        "params_file": PARAMS_FILE,
        "tokenizer_file": TOKENIZER_FILE,
        "params": params,
        "eos_token_ids": merged_eos_ids(tokenizer.eos_token_ids, checkpoint_ids),
        "bos_token_id": tokenizer.bos_token_id,
        "add_bos_token": tokenizer.add_bos_token,
        "context_limit": limit,
        "max_model_len": max_model_len,
        "max_num_seqs": DEFAULT_MAX_NUM_SEQS,
        "prefill_chunk_size": min(PREFILL_CHUNK_SIZE, max_model_len),
        "files": {name: sha256_of_file(dest / name) for name in (PARAMS_FILE, TOKENIZER_FILE)},
    }
    (dest / EMBED_MANIFEST).write_text(json.dumps(embed, indent=1) + "\n", encoding="utf-8")
    return dest
