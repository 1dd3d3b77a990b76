"""`vllm-tvm embed --target aarch64`: the tiny Llama compiled for aarch64-linux-gnu (NEON),
libvllm_tvm cross-built against the aarch64 TVM runtime, and the bundle's bin/vllm-tvm-cli run
under qemu-user gives the Python engine's greedy tokens (computed on this x86-64 machine).

Needs Debian's g++-aarch64-linux-gnu and qemu-user (scripts/install_native_toolchain.sh
--aarch64); skipped, naming them, where they are missing.
"""

from __future__ import annotations

import json
import shutil
import subprocess

import pytest

from vllm_tvm import SamplingParams

TOOLS = ("aarch64-linux-gnu-g++", "qemu-aarch64")
SYSROOT = "/usr/aarch64-linux-gnu"
PROMPTS = ["Once upon a time", "The quick brown fox"]
EM_AARCH64 = 183
"""ELF e_machine of aarch64 code."""

pytestmark = pytest.mark.skipif(
    any(shutil.which(tool) is None for tool in TOOLS),
    reason=f"needs {' and '.join(TOOLS)} (scripts/install_native_toolchain.sh --aarch64)",
)


@pytest.mark.slow  # an aarch64 compile, a cross build and qemu
def test_aarch64_bundle_under_qemu_gives_the_engines_greedy_tokens(
    tiny_model_dir, make_llm, tmp_path
):
    from vllm_tvm.native_bundle.bundle import write_embedding_bundle

    bundle = write_embedding_bundle(tmp_path / "bundle", tiny_model_dir("llama"), "aarch64").path
    for binary in (bundle / "lib" / "libvllm_tvm.so", bundle / "model" / "model.so"):
        header = binary.read_bytes()[:20]
        assert int.from_bytes(header[18:20], "little") == EM_AARCH64, binary
    expected = make_llm("llama").generate(PROMPTS, SamplingParams(temperature=0, max_tokens=12))
    for prompt, reference in zip(PROMPTS, expected, strict=True):
        command = ["qemu-aarch64", "-L", SYSROOT, str(bundle / "bin" / "vllm-tvm-cli")]
        command += ["--prompt", prompt, "--max-tokens", "12", "--temperature", "0", "--json"]
        done = subprocess.run(command, capture_output=True, text=True, check=True)
        result = json.loads(done.stdout)
        assert result["token_ids"] == list(reference.outputs[0].token_ids)
        assert result["text"] == reference.outputs[0].text
