"""Pack the peers (vLLM 0.33.0, llama.cpp from llama-cpp-python 0.3.36) for the GPU box.

Why: the GPU box has no network, and each device call carries at most 64 MiB of files. This
script (run here, where PyPI answers) downloads the exact releases, keeps only what a dense
bf16 Llama on Hopper needs, and writes three git-ignored folders under `.peers/`:

  vllm_a/   C_stable_libtorch.patch — the non-Hopper SASS of vLLM's main kernel library
            (see fatbin_prune.py); optional, it makes the library byte-exact again.
  vllm_b/   site.tar.xz — vLLM (FA2, MoE, FP4, Blackwell and Rust-frontend parts removed;
            `_C_stable_libtorch` pruned to sm_9x SASS + all PTX) and its import-time
            dependencies, installed for CPython 3.12 manylinux x86_64: untar and put on
            PYTHONPATH. Self-sufficient.
  llamacpp/ llama.cpp.tar.xz — vendor/llama.cpp trimmed to ggml (CPU + CUDA), src, include,
            common, vendor, llama-bench, batched-bench and gguf-py.

Each folder gets MANIFEST.json (versions, sha256, sizes). Deterministic given the releases:
versions are pinned below, archives are written with sorted names and zeroed owners/times.

usage: python3 benchmarks/peers/pack_peers.py [--out .peers] [--cache /tmp/peers-cache]
           [--only vllm|llamacpp] [--python-version 3.12]
"""

from __future__ import annotations

import argparse
import json
import lzma
import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

from fatbin_prune import prune

from vllm_tvm.artifacts.manifest import sha256_of_file

VLLM = "vllm==0.33.0"
LLAMA_CPP_PYTHON = "llama-cpp-python==0.3.36"

# What vLLM 0.33.0 imports when it starts an engine for a dense model (checked by importing
# the engine, worker, model runner, Llama, FlashAttention and sampler modules on top of the
# GPU box's package set) and is not already on the GPU box. Pinned to what pip resolved
# against vLLM's requirements on 2026-11-30.
VLLM_DEPENDENCIES = (
    "annotated_types==0.8.0",
    "apache_tvm_ffi==0.1.15.post2",  # xgrammar
    "astor==0.8.1",  # depyf
    "cachetools==8.0.2",
    "cbor2==6.3.0",
    "compressed_tensors==0.17.0",  # imported by the engine core at start (seen on the H200)
    "depyf==0.20.0",
    "dill==0.4.1",
    "distro==1.9.0",  # openai
    "fastapi==0.136.3",
    "jiter==0.19.0",  # openai
    "llguidance==1.7.6",
    "loguru==0.7.3",  # compressed-tensors
    "msgspec==0.23.0",
    "openai==2.54.0",
    "orjson==3.13.0",
    "oss_harmony==0.0.11",  # provides openai_harmony
    "partial_json_parser==0.2.1.1.post7",
    "pybase64==1.5.1",
    "pydantic==2.14.4",
    "pydantic_core==2.50.5",
    "pyzmq==27.3.0",
    "setproctitle==1.3.8",
    "sniffio==1.3.1",  # openai
    "starlette==1.10.0",
    "typing_inspection==0.4.5",
    "xgrammar==0.2.8",
)

# Parts of the vLLM wheel a dense bf16 model on Hopper never loads (each import is guarded).
VLLM_DROPPED = (
    "vllm/vllm_flash_attn/_vllm_fa2_C.abi3.so",  # FA2: FA3 serves Hopper
    "vllm/vllm-rs",  # Rust frontend binary
    "vllm/_qutlass_C.abi3.so",  # FP4 (Blackwell)
    "vllm/_moe_C_stable_libtorch.abi3.so",  # mixture-of-experts kernels
    "vllm/_flashmla_C.abi3.so",  # MLA (DeepSeek)
    "vllm/_flashmla_extension_C.abi3.so",
    "vllm/_deepselect_C.abi3.so",  # sparse-attention indexer
    "vllm/_flashkda_C.abi3.so",  # Kimi linear attention
    "vllm/third_party/fmha_sm100/",
    "vllm/third_party/tml_fa4/",
    "vllm/third_party/deep_gemm/",
)
PRUNED_LIBRARY = "vllm/_C_stable_libtorch.abi3.so"

# vendor/llama.cpp paths kept for a CUDA build of llama-bench and llama-batched-bench.
LLAMA_CPP_KEPT = (
    "CMakeLists.txt",
    "LICENSE",
    "cmake/",
    "include/",
    "src/",
    "common/",
    "vendor/",
    "gguf-py/",
    "ggml/CMakeLists.txt",
    "ggml/cmake/",
    "ggml/include/",
    "ggml/src/",
    "tools/llama-bench/",
    "tools/batched-bench/",
)
# Backends other than CPU and CUDA (ggml/src/ggml-<name>/), dropped from ggml/src/.
GGML_BACKENDS_KEPT = ("ggml-cpu", "ggml-cuda")
# Replaces tools/CMakeLists.txt, which would add every tool (their sources are dropped).
LLAMA_CPP_TOOLS_CMAKE = """# vllm-tvm peers: only the two benchmarks (written by pack_peers.py)
find_package(Threads REQUIRED)
llama_add_compile_flags()
add_subdirectory(batched-bench)
add_subdirectory(llama-bench)
"""

PLATFORMS = ("manylinux_2_17_x86_64", "manylinux2014_x86_64", "manylinux_2_24_x86_64")
PLATFORMS += tuple(f"manylinux_2_{n}_x86_64" for n in (26, 27, 28, 31, 34, 35))


def run(cmd: list[str]) -> None:
    """Run a command, echoing it; stop with its output on failure."""
    print("+", " ".join(cmd), flush=True)
    result = subprocess.run(cmd, capture_output=True, text=True)
    if result.returncode != 0:
        sys.exit(f"command failed ({result.returncode}): {' '.join(cmd)}\n{result.stderr[-4000:]}")


def pip_download(specs: list[str], dest: Path, python_version: str, *, binary: bool) -> None:
    """Download exact releases without their dependencies (binary wheels or an sdist)."""
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "-d", str(dest)]
    if binary:
        cmd += ["--only-binary=:all:", "--python-version", python_version, "--implementation"]
        cmd += ["cp", *[arg for p in PLATFORMS for arg in ("--platform", p)]]
    else:
        cmd += ["--no-binary", ":all:"]
    run(cmd + specs)


def write_tar_xz(root: Path, out: Path, members: list[Path] | None = None) -> None:
    """A reproducible .tar.xz of `root`'s files (or of `members`), relative to `root`."""
    files = members if members is not None else sorted(p for p in root.rglob("*"))

    def clean(info: tarfile.TarInfo) -> tarfile.TarInfo:
        info.uid = info.gid = 0
        info.uname = info.gname = ""
        info.mtime = 0
        return info

    with lzma.open(out, "wb", preset=9) as raw, tarfile.open(fileobj=raw, mode="w") as tar:
        for path in sorted(files):
            if path.is_file() and not path.is_symlink():
                tar.add(path, arcname=str(path.relative_to(root)), filter=clean)


def write_manifest(folder: Path, info: dict) -> None:
    files = {
        path.name: {"bytes": path.stat().st_size, "sha256": sha256_of_file(path)}
        for path in folder.iterdir()
    }
    files.pop("MANIFEST.json", None)
    (folder / "MANIFEST.json").write_text(json.dumps({**info, "files": files}, indent=1))
    total = sum(f["bytes"] for f in files.values())
    print(f"{folder}: {total / 2**20:.1f} MiB", flush=True)


def pack_vllm(out: Path, cache: Path, python_version: str) -> None:
    """Write .peers/vllm_a (patch) and .peers/vllm_b (site.tar.xz)."""
    wheels = cache / f"wheels-cp{python_version.replace('.', '')}"
    wheels.mkdir(parents=True, exist_ok=True)
    pip_download([VLLM, *VLLM_DEPENDENCIES], wheels, python_version, binary=True)
    site = cache / f"site-cp{python_version.replace('.', '')}"
    shutil.rmtree(site, ignore_errors=True)
    deps = [str(w) for w in sorted(wheels.glob("*.whl")) if not w.name.startswith("vllm-")]
    if len(deps) != len(VLLM_DEPENDENCIES):
        sys.exit(
            f"expected {len(VLLM_DEPENDENCIES)} dependency wheels in {wheels}, "
            f"found {len(deps)}: remove stale wheels there and run again"
        )
    target = ["--target", str(site), "--python-version", python_version, "--implementation"]
    target += ["cp", "--only-binary=:all:", *[a for p in PLATFORMS for a in ("--platform", p)]]
    run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-compile", *target, *deps])
    shutil.rmtree(site / "bin", ignore_errors=True)
    (vllm_wheel,) = wheels.glob("vllm-0.33.0-*.whl")
    with zipfile.ZipFile(vllm_wheel) as wheel:
        for member in wheel.infolist():
            if member.is_dir() or member.filename.startswith(VLLM_DROPPED):
                continue
            wheel.extract(member, site)
            if member.external_attr >> 16 & 0o111:
                (site / member.filename).chmod(0o755)
    folder_a, folder_b = out / "vllm_a", out / "vllm_b"
    for folder in (folder_a, folder_b):
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir(parents=True)
    library = site / PRUNED_LIBRARY
    info = prune(library, library, folder_a / "C_stable_libtorch.patch")
    write_tar_xz(site, folder_b / "site.tar.xz")
    common = {"vllm": VLLM, "python": python_version, "dependencies": list(VLLM_DEPENDENCIES)}
    write_manifest(
        folder_a,
        {
            **common,
            "library": PRUNED_LIBRARY,
            "original_sha256": info["original_sha256"],
            "pruned_sha256": info["pruned_sha256"],
        },
    )
    write_manifest(
        folder_b,
        {
            **common,
            "dropped": list(VLLM_DROPPED),
            "pruned_library": PRUNED_LIBRARY,
            "original_sha256": info["original_sha256"],
            "pruned_sha256": info["pruned_sha256"],
        },
    )


def pack_llamacpp(out: Path, cache: Path) -> None:
    """Write .peers/llamacpp/llama.cpp.tar.xz from the llama-cpp-python sdist."""
    sdists = cache / "sdist"
    sdists.mkdir(parents=True, exist_ok=True)
    name = LLAMA_CPP_PYTHON.replace("-", "_").replace("==", "-")
    archive = sdists / f"{name}.tar.gz"
    if not archive.exists():
        pip_download([LLAMA_CPP_PYTHON], sdists, "3.12", binary=False)
    tree = cache / "llama.cpp"
    shutil.rmtree(tree, ignore_errors=True)
    prefix = f"{name}/vendor/llama.cpp/"
    with tarfile.open(archive) as sdist:
        for member in sdist.getmembers():
            if not member.name.startswith(prefix) or not member.isfile():
                continue
            rel = member.name[len(prefix) :]
            if not rel.startswith(LLAMA_CPP_KEPT):
                continue
            parts = rel.split("/")
            if rel.startswith("ggml/src/ggml-") and len(parts) > 3:
                if parts[2] not in GGML_BACKENDS_KEPT:
                    continue
            dest = tree / rel
            dest.parent.mkdir(parents=True, exist_ok=True)
            source = sdist.extractfile(member)
            assert source is not None
            dest.write_bytes(source.read())
            dest.chmod(member.mode & 0o755 | 0o644)
    (tree / "tools" / "CMakeLists.txt").write_text(LLAMA_CPP_TOOLS_CMAKE)
    folder = out / "llamacpp"
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    members = sorted(p for p in tree.rglob("*") if p.is_file())
    write_tar_xz(tree.parent, folder / "llama.cpp.tar.xz", members)
    write_manifest(
        folder,
        {
            "source": LLAMA_CPP_PYTHON,
            "kept": list(LLAMA_CPP_KEPT),
            "ggml_backends": list(GGML_BACKENDS_KEPT),
        },
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, default=Path(".peers"))
    parser.add_argument("--cache", type=Path, default=Path("/tmp/peers-cache"))
    parser.add_argument("--only", choices=("vllm", "llamacpp"))
    parser.add_argument(
        "--python-version",
        default="3.12",
        help="CPython of the GPU box (3.11 here builds a site to test imports)",
    )
    args = parser.parse_args()
    if args.only in (None, "vllm"):
        pack_vllm(args.out, args.cache, args.python_version)
    if args.only in (None, "llamacpp"):
        pack_llamacpp(args.out, args.cache)


if __name__ == "__main__":
    main()
