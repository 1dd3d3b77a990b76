"""llama.cpp's CPU tools built once from the source vendored in the `llama-cpp-python` sdist.

Why its own module: the peer's build options are part of every CPU comparison's conditions, so
they are defined once here, recorded in each result file, and a cached build made with other
options is rebuilt rather than silently reused.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

from cpu_isa import native_build_flags

LLAMA_CPP_PYTHON = "llama-cpp-python==0.3.36"
TOOLS = ("llama-bench", "llama-batched-bench", "llama-quantize", "llama-completion")


def llamacpp_build_options() -> list[str]:
    """The cmake options of the peer's build, recorded in every result file."""
    options = ["-DCMAKE_BUILD_TYPE=Release", "-DGGML_NATIVE=ON", "-DLLAMA_CURL=OFF"]
    options += ["-DLLAMA_BUILD_TESTS=OFF", "-DLLAMA_BUILD_EXAMPLES=OFF", "-DLLAMA_BUILD_SERVER=OFF"]
    extra = " ".join(native_build_flags())
    return options + ([f"-DCMAKE_C_FLAGS={extra}", f"-DCMAKE_CXX_FLAGS={extra}"] if extra else [])


def build_llamacpp(cache: Path) -> Path:
    """llama.cpp's bin/ with llama-bench, built once from the sdist's vendored source (again
    when the build options differ from the ones it was made with)."""
    bin_dir = cache / "build" / "bin"
    options = llamacpp_build_options()
    stamp = cache / "build" / "build_options.json"
    built_with = json.loads(stamp.read_text()) if stamp.exists() else None
    if built_with == options and all((bin_dir / tool).exists() for tool in TOOLS):
        return bin_dir
    cmake = shutil.which("cmake")
    if cmake is None:
        raise RuntimeError("cmake not found: install it (`pip install cmake` or apt's cmake)")
    sdists = cache / "sdist"
    found = sorted(sdists.glob("llama_cpp_python-*.tar.gz"))
    if not found:
        pip = [sys.executable, "-m", "pip", "download", LLAMA_CPP_PYTHON]
        subprocess.run([*pip, "--no-binary", ":all:", "--no-deps", "-d", str(sdists)], check=True)
        found = sorted(sdists.glob("llama_cpp_python-*.tar.gz"))
    source = cache / "src"
    if not source.exists():
        with tarfile.open(found[-1]) as archive:
            archive.extractall(source, filter="data")
    (vendored,) = source.glob("llama_cpp_python-*/vendor/llama.cpp")
    configure = [cmake, "-S", str(vendored), "-B", str(cache / "build")]
    subprocess.run([*configure, "--fresh", *options], check=True)
    jobs = str(len(os.sched_getaffinity(0)))
    subprocess.run(
        [cmake, "--build", str(cache / "build"), "-j", jobs, "--target", *TOOLS], check=True
    )
    stamp.write_text(json.dumps(options))
    return bin_dir
