"""The artifact manifest: what a compiled model directory contains and how to trust it.

An artifact is a directory holding the exported library and `manifest.json`. The manifest
records everything the runtime needs without the compiler or the model's config (the
runtime spec, parameter table, target, dtype, exported functions; the normalised model
config describes the library but the runtime never reads it) plus a sha256 of every file,
so a truncated or swapped library is refused before it is loaded. A manifest of another
schema version is refused by name: recompiling is the way forward, not reading it half.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from vllm_tvm.artifacts.runtime_spec import RuntimeSpec
from vllm_tvm.checkpoints.weight_formats import FLOAT

SCHEMA_VERSION = 2
"""2: the typed runtime spec (runtime_spec.py) replaced the runtime's reading of the model
config."""
MANIFEST_NAME = "manifest.json"
LIBRARY_NAME = "model.so"


class ArtifactError(ValueError):
    """An artifact directory that cannot be used as it is."""


@dataclass(frozen=True)
class ParamEntry:
    """One parameter of the compiled functions, in call order.

    `format` is `float` for an array of `dtype` made of the `sources`; otherwise a quantized
    format (checkpoints/weight_formats.py) and this parameter is its `plane` of the weight
    made of the `sources`, which must be stored in that format's ggml type.
    """

    name: str
    shape: list[int]
    dtype: str
    sources: list[str]
    concat_axis: int = 0
    format: str = FLOAT
    plane: str | None = None


@dataclass
class Manifest:
    """Contents of `manifest.json`."""

    architecture: str
    config_hash: str
    model_config: dict[str, Any]
    target: str
    target_kind: str
    dtype: str
    tvm_version: str
    vllm_tvm_version: str
    functions: list[str]
    params: list[ParamEntry]
    runtime: RuntimeSpec
    """What the runtime needs to know of the model (runtime_spec.py)."""
    files: dict[str, str] = field(default_factory=dict)
    extensions: list[str] = field(default_factory=list)
    """Native extensions (files in the artifact) to load before the library; see extensions/."""
    weights_reference: str | None = None
    compile_seconds: float | None = None
    cuda_graph: bool | None = None
    gemm: str | None = None
    attention: str | None = None
    """Compile options that shaped the library (CUDA-graph capture, GEMM and attention
    kernels); None in manifests written before they were recorded."""
    cpu_int8_activations: str | None = None
    """The integer dot instructions (`vnni`, `avx2`) the Q8_0 / Q4_0 matmuls multiply int8
    activations with (compiler/int8_activations.py), or `off` (the float path); None in
    manifests written before it was recorded."""
    quantization: str | None = None
    """Group quantization the loader applies to a float checkpoint's weights
    (checkpoints/group_quantization.py); None: the weights are read as stored."""
    tensor_parallel: dict[str, Any] | None = None
    """The sharding plan of a tensor-parallel artifact (model_defs/tensor_parallel.py:
    `shards` and each parameter's per-rank source slices); None: one rank."""
    schema_version: int = SCHEMA_VERSION

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2, sort_keys=True)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Manifest:
        version = data.get("schema_version")
        if version != SCHEMA_VERSION:
            raise ArtifactError(
                f"artifact manifest schema_version {version!r} is not supported; "
                f"this vllm-tvm reads schema_version {SCHEMA_VERSION} only: recompile the "
                "model (`vllm-tvm compile`, or let LLM / serve compile it on first use)"
            )
        fields = dict(data)
        try:
            fields["params"] = [ParamEntry(**entry) for entry in data["params"]]
            fields["runtime"] = RuntimeSpec.from_dict(data["runtime"])
            return cls(**fields)
        except (KeyError, TypeError, ValueError) as err:
            raise ArtifactError(f"malformed artifact manifest: {err}") from err


def sha256_of_file(path: Path) -> str:
    """Hex sha256 of a file, read in 1 MiB chunks."""
    digest = hashlib.sha256()
    with path.open("rb") as stream:
        for chunk in iter(lambda: stream.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def write_manifest(artifact_dir: Path, manifest: Manifest) -> None:
    """Hash every file beside the manifest and write `manifest.json`."""
    manifest.files = {
        path.name: sha256_of_file(path)
        for path in sorted(artifact_dir.iterdir())
        if path.is_file() and path.name != MANIFEST_NAME
    }
    (artifact_dir / MANIFEST_NAME).write_text(manifest.to_json(), encoding="utf-8")


def read_manifest(artifact_dir: Path, verify: bool = True) -> Manifest:
    """Read an artifact's manifest; with `verify`, refuse it if any file's sha256 differs."""
    manifest_path = artifact_dir / MANIFEST_NAME
    if not manifest_path.is_file():
        raise ArtifactError(f"{artifact_dir} is not an artifact: no {MANIFEST_NAME}")
    try:
        data = json.loads(manifest_path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as err:
        raise ArtifactError(f"{manifest_path} is not valid JSON: {err}") from err
    manifest = Manifest.from_dict(data)
    if LIBRARY_NAME not in manifest.files:
        raise ArtifactError(f"artifact {artifact_dir} lists no {LIBRARY_NAME}")
    if verify:
        for name, expected in manifest.files.items():
            path = artifact_dir / name
            if not path.is_file():
                raise ArtifactError(f"artifact file {path} is missing")
            actual = sha256_of_file(path)
            if actual != expected:
                raise ArtifactError(
                    f"artifact file {path} has sha256 {actual}, manifest says {expected}"
                )
    return manifest
