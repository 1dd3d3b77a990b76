"""`vllm-tvm embed`'s folder: the compiled model, libvllm_tvm and a C tool, runnable without
Python.

Layout (the C side relies on it: bin/vllm-tvm-cli finds ../model and ../lib):

    include/vllm_tvm.h        the C ABI
    lib/                      libvllm_tvm.so, libvllm_tvm.a, libtvm_runtime.so, libtvm_ffi.so
                              (cuda: also libtvm_runtime_cuda.so and libcudart.so.13)
    model/                    artifact (manifest.json, model.so), params.bin, tokenizer.json,
                              embed.json
    bin/vllm-tvm-cli          one completion from the command line
    examples/complete.c       the C ABI's smallest program
    CMakeLists.txt            builds the example against this folder

Targets: see targets.py.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

from vllm_tvm.artifacts.compile_options import CompileOptions
from vllm_tvm.artifacts.manifest import read_manifest
from vllm_tvm.entrypoints.resolve import resolve_artifact
from vllm_tvm.native_bundle.model_export import write_model_dir
from vllm_tvm.native_bundle.native_build import HEADER, NATIVE_DIR, build_native
from vllm_tvm.native_bundle.targets import HOST_TARGET, embed_target


@dataclass(frozen=True)
class EmbeddingBundle:
    """A written bundle and its size."""

    path: Path
    size_bytes: int


def write_embedding_bundle(
    dest: Path, model_path: Path, target: str = HOST_TARGET
) -> EmbeddingBundle:
    """Write the bundle for `model_path` (a checkpoint directory or GGUF file) into `dest`,
    which must not exist yet or be empty."""
    built_target = embed_target(target)
    if dest.exists() and any(dest.iterdir()):
        raise FileExistsError(f"refusing to write into {dest}: it is not empty")
    build = build_native(built_target)
    options = CompileOptions(model_path, built_target.compile_target, "float32")
    artifact = resolve_artifact(options, show_progress=False)
    extensions = read_manifest(artifact).extensions
    if extensions:
        raise NotImplementedError(
            f"the C library does not load artifact extensions ({', '.join(map(str, extensions))}); "
            "compile without them"
        )
    staging = dest.with_name(f".{dest.name}.staging")
    shutil.rmtree(staging, ignore_errors=True)
    try:
        for folder in ("include", "lib", "bin", "examples"):
            (staging / folder).mkdir(parents=True)
        shutil.copy2(HEADER, staging / "include" / HEADER.name)
        for library in (build.shared_library, build.static_library, *build.runtime_libraries):
            shutil.copy2(library, staging / "lib" / library.name)
        shutil.copy2(build.cli, staging / "bin" / "vllm-tvm-cli")
        shutil.copy2(NATIVE_DIR / "bundle" / "complete.c", staging / "examples" / "complete.c")
        shutil.copy2(NATIVE_DIR / "bundle" / "CMakeLists.txt", staging / "CMakeLists.txt")
        write_model_dir(artifact, model_path, staging / "model")
        if dest.exists():
            dest.rmdir()
        staging.rename(dest)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    size = sum(path.stat().st_size for path in dest.rglob("*") if path.is_file())
    return EmbeddingBundle(dest, size)
