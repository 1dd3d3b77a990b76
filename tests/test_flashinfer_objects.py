"""FlashInfer's objects are built once per (arguments, release, architectures, toolkit) and
linked from the kept copies afterwards (compiler/flashinfer_objects.py). TVM's hook is
replaced by a stand-in that 'builds' by writing an object file, so no nvcc runs."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from vllm_tvm.compiler import flashinfer_objects


@pytest.fixture
def fake_hook(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> dict[str, Any]:
    """The hook with a counting prefill builder and a loader returning file contents."""
    from tvm.relax.backend.cuda import flashinfer as hook

    state: dict[str, Any] = {"builds": 0, "build_dir": tmp_path / "build"}
    state["build_dir"].mkdir()

    def build(**arguments: Any) -> list[Any]:
        state["builds"] += 1
        path = state["build_dir"] / "batch_prefill.cuda.o"
        path.write_text(f"object {state['builds']} for {arguments['qk_head_dim']}")
        if not arguments.get("return_static_libs"):
            return ["shared library"]
        return hook._load_flashinfer_modules([path])

    monkeypatch.setattr(hook, "gen_flashinfer_prefill_module", build)
    state["loader"] = lambda paths: [path.read_text() for path in paths]
    monkeypatch.setattr(hook, "_load_flashinfer_modules", state["loader"])
    monkeypatch.setattr(flashinfer_objects, "flashinfer_release", lambda: "0.6.15.post1")
    toolkit = tmp_path / "cuda"
    (toolkit / "bin").mkdir(parents=True)
    (toolkit / "bin" / "nvcc").write_text("#!/bin/sh\necho 'Build cuda_13.0.r13.0'\n")
    (toolkit / "bin" / "nvcc").chmod(0o755)
    monkeypatch.setenv("FLASHINFER_CUDA_ARCH_LIST", "9.0a")
    state["toolkit"] = toolkit
    state["hook"] = hook
    return state


ARGUMENTS = {
    "dtype_q": "bfloat16",
    "qk_head_dim": 128,
    "v_head_dim": 128,
    "return_static_libs": True,
}


def test_a_second_compile_links_the_kept_objects(fake_hook, tmp_path: Path) -> None:
    kept = tmp_path / "kept"
    hook = fake_hook["hook"]
    with flashinfer_objects.flashinfer_objects_kept(kept, fake_hook["toolkit"]):
        first = hook.gen_flashinfer_prefill_module(**ARGUMENTS)
    (fake_hook["build_dir"] / "batch_prefill.cuda.o").unlink()  # the build dir may be rebuilt
    with flashinfer_objects.flashinfer_objects_kept(kept, fake_hook["toolkit"]):
        second = hook.gen_flashinfer_prefill_module(**ARGUMENTS)
    assert fake_hook["builds"] == 1
    assert first == second == ["object 1 for 128"]
    assert hook._load_flashinfer_modules is fake_hook["loader"]
    assert not any(name.startswith(".staging") for name in os.listdir(kept))


def test_other_arguments_or_architectures_build_again(
    fake_hook, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    kept = tmp_path / "kept"
    hook = fake_hook["hook"]
    with flashinfer_objects.flashinfer_objects_kept(kept, fake_hook["toolkit"]):
        hook.gen_flashinfer_prefill_module(**ARGUMENTS)
        assert hook.gen_flashinfer_prefill_module(**{**ARGUMENTS, "qk_head_dim": 256}) == [
            "object 2 for 256"
        ]
        monkeypatch.setenv("FLASHINFER_CUDA_ARCH_LIST", "10.0a")
        hook.gen_flashinfer_prefill_module(**ARGUMENTS)
    assert fake_hook["builds"] == 3
    assert len(list(kept.iterdir())) == 3


def test_shared_library_builds_pass_through_and_the_hook_is_restored(
    fake_hook, tmp_path: Path
) -> None:
    hook = fake_hook["hook"]
    original = hook.gen_flashinfer_prefill_module
    with flashinfer_objects.flashinfer_objects_kept(tmp_path / "kept", fake_hook["toolkit"]):
        assert hook.gen_flashinfer_prefill_module(**{**ARGUMENTS, "return_static_libs": False}) == [
            "shared library"
        ]
    assert hook.gen_flashinfer_prefill_module is original
    assert not (tmp_path / "kept").exists()
