"""Content-addressed cache of compiled artifacts (`~/.cache/vllm_tvm/artifacts/<key>`).

`generate`/`serve` without `--artifact` compile on first use; the key covers everything that
changes the library (normalised model config, target, dtype, TVM version, and the source of
the code that builds it) so a second run reuses it and a code change never reuses a stale one.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Mapping
from pathlib import Path

import vllm_tvm

CACHE_ENV = "VLLM_TVM_CACHE_DIR"
_BUILD_SOURCE_PACKAGES = ("model_defs", "compiler", "schedules")


def cache_root() -> Path:
    """The cache directory: $VLLM_TVM_CACHE_DIR, else ~/.cache/vllm_tvm."""
    configured = os.environ.get(CACHE_ENV)
    return Path(configured) if configured else Path.home() / ".cache" / "vllm_tvm"


def _build_source_digest() -> str:
    digest = hashlib.sha256()
    package_root = Path(vllm_tvm.__file__).parent
    for sub in _BUILD_SOURCE_PACKAGES:
        for path in sorted((package_root / sub).rglob("*.py")):
            digest.update(path.relative_to(package_root).as_posix().encode())
            digest.update(path.read_bytes())
    return digest.hexdigest()


def artifact_key(
    config_hash: str,
    target: str,
    dtype: str,
    tvm_version: str,
    weight_formats: Mapping[str, str] | None = None,
) -> str:
    """The cache key of one compile (`weight_formats`: the weights compiled quantized)."""
    parts: dict[str, object] = {
        "config": config_hash,
        "target": target,
        "dtype": dtype,
        "tvm": tvm_version,
        "build_source": _build_source_digest(),
    }
    if weight_formats:
        parts["weight_formats"] = dict(weight_formats)
    blob = json.dumps(parts, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:24]


def artifact_dir_for(key: str) -> Path:
    """Where the artifact with this key lives in the cache."""
    return cache_root() / "artifacts" / key
