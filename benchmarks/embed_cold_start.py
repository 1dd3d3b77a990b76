"""Size and cold start of `vllm-tvm embed` bundles: bytes per folder, and the wall time of
`bin/vllm-tvm-cli --max-tokens 1` (process start, bundle sha256 check, model.so load, weights,
KV cache, tokenization, one prefill, one sampled token, exit) and of `--max-tokens 33`.

    python benchmarks/embed_cold_start.py OUT.json NAME=BUNDLE_DIR [NAME=BUNDLE_DIR ...]

Each timing is run `--repeats` times back to back (the page cache is warm after the first).
An aarch64 bundle on another machine runs under qemu-user (`qemu-aarch64 -L
/usr/aarch64-linux-gnu`); its times are emulation times, recorded as such.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import time
from pathlib import Path

PROMPT = "The capital of France is"
EM_AARCH64 = 183
QEMU = ["qemu-aarch64", "-L", "/usr/aarch64-linux-gnu"]


def emulator_for(bundle: Path) -> list[str]:
    """qemu-user for an aarch64 bundle on another machine, else nothing."""
    header = (bundle / "lib" / "libvllm_tvm.so").read_bytes()[:20]
    is_aarch64 = int.from_bytes(header[18:20], "little") == EM_AARCH64
    return QEMU if is_aarch64 and platform.machine() != "aarch64" else []


def folder_sizes(bundle: Path) -> dict[str, int]:
    """Bytes per top-level entry of the bundle, and the total."""
    sizes = {}
    for entry in sorted(bundle.iterdir()):
        files = [entry] if entry.is_file() else [p for p in entry.rglob("*") if p.is_file()]
        sizes[entry.name] = sum(p.stat().st_size for p in files)
    sizes["total"] = sum(sizes.values())
    return sizes


def cli_seconds(bundle: Path, max_tokens: int) -> float:
    command = [*emulator_for(bundle), str(bundle / "bin" / "vllm-tvm-cli")]
    command += ["--prompt", PROMPT, "--temperature", "0"]
    start = time.perf_counter()
    subprocess.run([*command, "--max-tokens", str(max_tokens)], check=True, capture_output=True)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("output", type=Path)
    parser.add_argument("bundles", nargs="+", help="NAME=BUNDLE_DIR")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    results = {
        "machine": platform.machine(),
        "cpus": os.cpu_count(),
        "load_average_at_start": os.getloadavg(),
        "prompt": PROMPT,
        "bundles": {},
    }
    for item in args.bundles:
        name, path = item.split("=", 1)
        bundle = Path(path)
        results["bundles"][name] = {
            "emulator": emulator_for(bundle),
            "bytes": folder_sizes(bundle),
            "first_token_seconds": [cli_seconds(bundle, 1) for _ in range(args.repeats)],
            "tokens_33_seconds": [cli_seconds(bundle, 33) for _ in range(args.repeats)],
        }
    results["load_average_at_end"] = os.getloadavg()
    args.output.write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
