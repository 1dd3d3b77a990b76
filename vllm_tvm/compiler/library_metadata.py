"""`_metadata() -> str`: the compiled library describes itself without its manifest.

Why this exists: a library copied away from its artifact directory still says what it is
(architecture, normalised config, dtype, target, compile options, functions, parameter
order). The JSON is made from the artifact's manifest, so the two never disagree: every
manifest field but those that describe the artifact directory rather than the library (its
files and their hashes, the extensions beside the library, the checkpoint it was compiled
from, how long the compile took).
"""

from __future__ import annotations

import json
from dataclasses import asdict

import tvm
from tvm import relax

from vllm_tvm.artifacts.manifest import Manifest

METADATA_FUNCTION = "_metadata"
_ARTIFACT_DIRECTORY_FIELDS = ("files", "extensions", "weights_reference", "compile_seconds")


def library_metadata(manifest: Manifest) -> str:
    """The JSON `_metadata()` returns for a library described by `manifest`."""
    fields = asdict(manifest)
    for name in _ARTIFACT_DIRECTORY_FIELDS:
        del fields[name]
    return json.dumps(fields, sort_keys=True)


@tvm.transform.module_pass(opt_level=0, name="AttachMetadata")
class AttachMetadata:
    """Adds `_metadata() -> str` returning `metadata` (library_metadata's JSON)."""

    def __init__(self, metadata: str) -> None:
        self.metadata = metadata

    def transform_module(self, mod: tvm.IRModule, _ctx: tvm.transform.PassContext) -> tvm.IRModule:
        builder = relax.BlockBuilder(mod)
        with builder.function(METADATA_FUNCTION, params=[]):
            builder.emit_func_output(tvm.ir.StringImm(self.metadata))
        return builder.get()
