"""Shared fixtures: tiny checkpoints made once per run, compiled once per run (cached)."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from tiny_models import TINY_MODELS, make_tiny_model

_WORKER = os.environ.get("PYTEST_XDIST_WORKER")
"""This process's pytest-xdist worker id (gw0, gw1, ...), None when the run is not parallel."""

if _WORKER is not None:
    # One kernel thread per worker process, floating: the README's command runs one worker per
    # CPU, and TVM's pool workers spin while waiting, so two processes each pinning a pool of
    # every CPU would contend for the same cores (and pinned single threads would all sit on
    # the first CPU). A value set by whoever runs the tests wins.
    os.environ.setdefault("VLLM_TVM_CPU_THREADS", "1")
    os.environ.setdefault("VLLM_TVM_CPU_PIN", "0")
    # The same for torch's own pool (the oracle models): one thread per worker process.
    torch.set_num_threads(1)

_SHARED_GROUPS = {
    "test_cuda_artifact": "cuda_artifact",
    "test_gemm_dispatch": "cuda_artifact",
    "test_moe_cuda": "cuda_artifact",
    "test_embed_bundle": "native_build",
    "test_embed_tokenizer_vectors": "native_build",
    "test_embed_default_model": "native_build",
    "test_embed_sentencepiece_bundle": "native_build",
}
"""Files whose session fixtures or native builds are costly and shared: one worker runs them."""


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Under `--dist loadgroup` keep each file on one worker (its module fixtures are built
    once), and the files of each `_SHARED_GROUPS` group together (their session fixtures too)."""
    if config.getoption("dist", "no") != "loadgroup":
        return
    for item in items:
        if item.get_closest_marker("xdist_group") is None:
            group = _SHARED_GROUPS.get(item.path.stem, item.path.stem)
            item.add_marker(pytest.mark.xdist_group(group))


@pytest.fixture(scope="session", autouse=True)
def artifact_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Every compile of the run goes to one cache, so each tiny model compiles once.

    Parallel workers keep their own cache (its native builds and memos are not shared-safe)
    but share its compiled artifacts, which compile_cached writes under a lock: a model the
    workers both need is compiled by the first and reused by the other.
    """
    configured = os.environ.get("VLLM_TVM_TEST_CACHE_DIR")
    cache = Path(configured) if configured else tmp_path_factory.mktemp("vllm_tvm_cache")
    if _WORKER is not None and not configured:
        shared = tmp_path_factory.getbasetemp().parent / "vllm_tvm_artifacts"
        shared.mkdir(exist_ok=True)
        (cache / "artifacts").symlink_to(shared, target_is_directory=True)
    os.environ["VLLM_TVM_CACHE_DIR"] = str(cache)
    return cache


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory: pytest.TempPathFactory):
    """Factory: the directory of a tiny checkpoint by name (made on first request)."""
    made: dict[str, Path] = {}

    def get(name: str) -> Path:
        if name not in made:
            made[name] = make_tiny_model(TINY_MODELS[name], tmp_path_factory.mktemp(name))
        return made[name]

    return get


@pytest.fixture
def make_llm(tiny_model_dir) -> Iterator[Callable[..., Any]]:
    """Factory of tiny-model LLMs (`make_llm("qwen3_qknorm", num_blocks=8)`); after the test
    every one of them must have all its blocks free (engine_helpers.assert_all_blocks_free)."""
    from engine_helpers import assert_all_blocks_free

    from vllm_tvm.entrypoints.llm import LLM

    made: list[LLM] = []

    def make(name: str = "llama", **kwargs: Any) -> LLM:
        llm = LLM(tiny_model_dir(name), device="cpu", show_progress=False, **kwargs)
        made.append(llm)
        return llm

    yield make
    for llm in made:
        assert_all_blocks_free(llm)


@pytest.fixture(scope="session")
def cuda_artifact(tiny_model_dir, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny Llama compiled for sm_90a in bf16 with `vllm-tvm compile` (needs nvcc)."""
    import shutil

    from vllm_tvm.cli.main import main as cli_main

    if shutil.which("nvcc") is None:
        pytest.skip("needs nvcc on PATH")
    output = tmp_path_factory.mktemp("cuda") / "artifact"
    arguments = ["compile", str(tiny_model_dir("llama")), "--target", "cuda"]
    code = cli_main([*arguments, "--dtype", "bfloat16", "--output", str(output)])
    assert code == 0
    return output


@pytest.fixture(scope="session")
def server_farm(tmp_path_factory: pytest.TempPathFactory):
    """The run's engine over the tiny chat checkpoint, and its servers (server_helpers.py)."""
    from server_helpers import make_server_model, start_farm

    farm = start_farm(make_server_model(tmp_path_factory.mktemp("server_model")))
    yield farm
    farm.stop()


@pytest.fixture(scope="module")
def server(server_farm):
    """The farm's default server (engine options of the tiny chat checkpoint)."""
    return server_farm.server()


@pytest.fixture(scope="module")
def client(server):
    """An OpenAI client on `server`."""
    return server.client()
