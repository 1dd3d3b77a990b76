"""Write, the last compile step: a built library -> an artifact directory, replaced atomically.

Why apart: the artifact's files (the library, the extensions it calls, the manifest with
every file's sha256) are assembled in a staging directory beside the destination and moved
into place in one rename, so a reader never sees half an artifact, whatever the build did.
"""

from __future__ import annotations

import shutil
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import tvm

from vllm_tvm.artifacts.manifest import LIBRARY_NAME, Manifest, write_manifest
from vllm_tvm.compiler.cuda_build import export
from vllm_tvm.compiler.targets import TargetSpec
from vllm_tvm.extensions.cublaslt import EXTENSION_NAME, build_cublaslt_extension

_EXTENSION_BUILDERS = {EXTENSION_NAME: build_cublaslt_extension}
"""How to make each extension a manifest may list."""


def write_artifact(
    executable: tvm.runtime.Executable,
    manifest: Manifest,
    spec: TargetSpec,
    link_options: list[str],
    output_dir: Path,
    started: float,
) -> Path:
    """Export `executable` and the extensions `manifest` lists, and write the manifest, into
    `output_dir`; `started` (time.perf_counter) dates the compile's start."""
    output_dir = Path(output_dir)
    output_dir.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".staging-", dir=output_dir.parent))
    try:
        export(executable, staging / LIBRARY_NAME, spec, link_options)
        for extension in manifest.extensions:
            _EXTENSION_BUILDERS[extension](staging / extension)
        compile_seconds = round(time.perf_counter() - started, 2)
        write_manifest(staging, replace(manifest, compile_seconds=compile_seconds))
        if output_dir.exists():
            shutil.rmtree(output_dir)
        staging.rename(output_dir)
    finally:
        if staging.exists():
            shutil.rmtree(staging)
    return output_dir
