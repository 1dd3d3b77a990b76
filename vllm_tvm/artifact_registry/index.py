"""The registry index: which prebuilt artifacts exist for which model, and the bytes of each.

Why a format of its own: a compiled library is code, so a puller must know every byte it is
about to trust before it fetches any. The index names, per model id, each artifact by what
decides whether it runs here (target kind and its features, dtype, weight format, TVM
version, config hash), and lists every file the artifact and its checkpoint (weights,
tokenizer) need with size and sha256. Files are stored content-addressed under
`blobs/<sha256>` so an artifact and a checkpoint shared by several entries are stored once.
The index is serialised canonically (sorted keys, no spaces) because its exact bytes are
what the ed25519 signature covers.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import asdict, dataclass, field
from typing import Any

INDEX_NAME = "index.json"
SIGNATURE_NAME = "index.json.sig"
INDEX_SCHEMA_VERSION = 1
BLOB_DIR = "blobs"

SHA256_HEX = re.compile(r"[0-9a-f]{64}")
FILE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]*")
"""A file name inside an artifact or checkpoint directory: flat, no path separators."""
MODEL_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*(/[A-Za-z0-9][A-Za-z0-9._-]*)?")


class RegistryError(ValueError):
    """A registry, index, signature or download that cannot be trusted or used."""


@dataclass(frozen=True)
class FileEntry:
    """One file to fetch: its name in the directory it belongs to, size and sha256."""

    name: str
    size: int
    sha256: str

    @property
    def blob_path(self) -> str:
        """Where the file's bytes live in the registry, relative to its root."""
        return f"{BLOB_DIR}/{self.sha256}"


@dataclass(frozen=True)
class ArtifactEntry:
    """One prebuilt artifact of a model and the checkpoint it runs with.

    `features` says what the target needs of the machine: for `llvm` the CPU `machine`
    (x86_64, aarch64) and the instruction-set extensions (`isa`) the library may use; for
    `cuda` the GPU `arch` (sm_90a). `checkpoint_name` is the name the checkpoint goes by
    once placed: a `.gguf` file name, or a directory name for a Hugging Face layout.
    """

    target: str
    target_kind: str
    features: dict[str, Any]
    dtype: str
    weight_format: str
    tvm_version: str
    config_hash: str
    architecture: str
    artifact_files: list[FileEntry]
    checkpoint_name: str
    checkpoint_files: list[FileEntry]

    def compatibility(self) -> tuple[str, str, str, str, str, str]:
        """What makes two entries interchangeable; publishing one replaces the other."""
        features = json.dumps(self.features, sort_keys=True)
        return (
            self.target,
            features,
            self.dtype,
            self.weight_format,
            self.tvm_version,
            self.config_hash,
        )

    def entry_id(self) -> str:
        """A short digest of the whole entry: the directory a pull of it is placed in."""
        blob = json.dumps(asdict(self), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(blob.encode()).hexdigest()[:16]

    def describe(self) -> str:
        """One line naming what the entry was built for."""
        features = ", ".join(f"{k}={_short(v)}" for k, v in sorted(self.features.items()))
        return (
            f"{self.target} [{features}] {self.dtype} weights={self.weight_format} "
            f"tvm={self.tvm_version}"
        )

    def all_files(self) -> list[FileEntry]:
        return [*self.artifact_files, *self.checkpoint_files]


@dataclass
class RegistryIndex:
    """Model id -> its artifact entries."""

    models: dict[str, list[ArtifactEntry]] = field(default_factory=dict)

    def to_bytes(self) -> bytes:
        """The canonical bytes the signature covers."""
        data = {
            "schema_version": INDEX_SCHEMA_VERSION,
            "models": {
                model_id: [asdict(entry) for entry in entries]
                for model_id, entries in sorted(self.models.items())
            },
        }
        return json.dumps(data, sort_keys=True, separators=(",", ":")).encode()

    def add(self, model_id: str, entry: ArtifactEntry) -> bool:
        """Add `entry` under `model_id`, replacing one with the same compatibility; True when
        it replaced one."""
        check_model_id(model_id)
        entries = self.models.setdefault(model_id, [])
        kept = [e for e in entries if e.compatibility() != entry.compatibility()]
        self.models[model_id] = [*kept, entry]
        return len(kept) != len(entries)

    def entries_of(self, model_id: str) -> list[ArtifactEntry]:
        """The entries of `model_id`; an id the index does not hold is refused, naming those it
        does."""
        if model_id not in self.models:
            known = ", ".join(sorted(self.models)) or "none"
            raise RegistryError(f"model {model_id!r} is not in the registry; it holds: {known}")
        return self.models[model_id]


def parse_index(data: bytes) -> RegistryIndex:
    """The index in `data`, every field checked (a malformed index is refused, not guessed)."""
    try:
        raw = json.loads(data)
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise RegistryError(f"the registry index is not valid JSON: {err}") from None
    if not isinstance(raw, dict) or raw.get("schema_version") != INDEX_SCHEMA_VERSION:
        version = raw.get("schema_version") if isinstance(raw, dict) else None
        raise RegistryError(
            f"registry index schema_version {version!r} is not supported; this vllm-tvm "
            f"reads {INDEX_SCHEMA_VERSION}"
        )
    index = RegistryIndex()
    for model_id, entries in dict(raw.get("models", {})).items():
        check_model_id(model_id)
        index.models[model_id] = [parse_entry(model_id, entry) for entry in entries]
    return index


def check_model_id(model_id: str) -> None:
    """Refuse a model id that is not `name` or `org/name` of letters, digits and `._-`."""
    if not MODEL_ID.fullmatch(model_id) or ".." in model_id:
        raise RegistryError(
            f"model id {model_id!r} is not valid: use name or org/name of letters, digits, . _ -"
        )


def parse_entry(model_id: str, raw: Any) -> ArtifactEntry:
    """One model's entry from its JSON form, every field checked."""
    try:
        fields = dict(raw)
        fields["artifact_files"] = [_parse_file(f) for f in raw["artifact_files"]]
        fields["checkpoint_files"] = [_parse_file(f) for f in raw["checkpoint_files"]]
        entry = ArtifactEntry(**fields)
    except (TypeError, KeyError, ValueError) as err:
        raise RegistryError(f"malformed registry entry of {model_id!r}: {err}") from None
    if not FILE_NAME.fullmatch(entry.checkpoint_name):
        raise RegistryError(f"registry entry of {model_id!r}: bad checkpoint name")
    return entry


def _parse_file(raw: Any) -> FileEntry:
    entry = FileEntry(name=str(raw["name"]), size=int(raw["size"]), sha256=str(raw["sha256"]))
    if not FILE_NAME.fullmatch(entry.name):
        raise ValueError(f"file name {entry.name!r} is not a plain file name")
    if not SHA256_HEX.fullmatch(entry.sha256) or entry.size < 0:
        raise ValueError(f"file {entry.name!r} has a malformed sha256 or size")
    return entry


def _short(value: Any) -> str:
    if isinstance(value, list):
        return "+".join(map(str, value)) if len(value) <= 4 else f"{len(value)} extensions"
    return str(value)
