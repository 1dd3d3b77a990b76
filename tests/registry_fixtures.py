"""A registry made without compiling: a signed directory holding one artifact whose library is
random bytes (a pull never loads it) and a one-file checkpoint, plus the key pair.

Why: the pull path (signature, fit, download, verification, placement) does not depend on
what the library contains, so its fault tests stay cheap; the one test that loads a pulled
library compiles a real tiny model (test_registry_generate.py).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import vllm_tvm
from vllm_tvm.artifact_registry.index import INDEX_NAME, RegistryIndex, parse_index
from vllm_tvm.artifact_registry.machine import cpu_features, installed_tvm_version
from vllm_tvm.artifact_registry.publish import publish
from vllm_tvm.artifact_registry.signing import generate_keypair
from vllm_tvm.artifacts.manifest import LIBRARY_NAME, Manifest, write_manifest
from vllm_tvm.artifacts.runtime_spec import (
    FULL_ATTENTION,
    PAGED_KV,
    AttentionLayerSpec,
    RuntimeSpec,
)

MODEL_ID = "tiny-fake"
LIBRARY_BYTES = 300_000


@dataclass(frozen=True)
class FakeRegistry:
    root: Path
    private_key: Path
    public_key: Path
    library: Path
    checkpoint: Path

    def index(self) -> RegistryIndex:
        return parse_index((self.root / INDEX_NAME).read_bytes())

    def blob_of(self, name: str) -> str:
        """The registry path of the blob of the published file `name`."""
        entry = self.index().models[MODEL_ID][-1]
        return next(f.blob_path for f in entry.all_files() if f.name == name)


def make_fake_registry(base: Path, features: dict | None = None) -> FakeRegistry:
    artifact = base / "artifact"
    artifact.mkdir(parents=True)
    library = artifact / LIBRARY_NAME
    library.write_bytes(os.urandom(LIBRARY_BYTES))
    manifest = Manifest(
        architecture="LlamaForCausalLM",
        config_hash="c0ffee",
        model_config={},
        target="llvm",
        target_kind="llvm",
        dtype="float32",
        tvm_version=installed_tvm_version(),
        vllm_tvm_version=vllm_tvm.__version__,
        functions=["embed"],
        params=[],
        runtime=RuntimeSpec(
            vocab_size=8,
            hidden_size=4,
            num_layers=1,
            context_limit=16,
            attention=(AttentionLayerSpec(FULL_ATTENTION, 1, 64, PAGED_KV),),
        ),
    )
    write_manifest(artifact, manifest)
    checkpoint = base / "tiny.gguf"
    checkpoint.write_bytes(os.urandom(120_000))
    private_key = base / "keys" / "registry.key"
    public_key = generate_keypair(private_key)
    root = base / "registry"
    publish(
        artifact,
        checkpoint,
        MODEL_ID,
        root,
        private_key,
        features if features is not None else cpu_features(),
        "native",
    )
    return FakeRegistry(root, private_key, public_key, library, checkpoint)
