"""Shared fixtures: tiny checkpoints made once per run, compiled once per run (cached)."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from tiny_models import TINY_MODELS, make_tiny_model


@pytest.fixture(scope="session", autouse=True)
def artifact_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Every compile of the run goes to one cache, so each tiny model compiles once."""
    configured = os.environ.get("VLLM_TVM_TEST_CACHE_DIR")
    cache = Path(configured) if configured else tmp_path_factory.mktemp("vllm_tvm_cache")
    os.environ["VLLM_TVM_CACHE_DIR"] = str(cache)
    return cache


@pytest.fixture(scope="session", autouse=True)
def one_torch_thread() -> None:
    """The oracles run transformers on tiny models in this process, beside TVM's pinned CPU
    workers: their products are far too small to gain from a second thread, and on a busy
    2-core machine two torch threads wait on each other (a tiny Gemma 2's 120 greedy tokens:
    13-30 s with two threads, 1.3 s with one)."""
    import torch

    torch.set_num_threads(1)


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory: pytest.TempPathFactory):
    """Factory: the directory of a tiny checkpoint by name (made on first request)."""
    made: dict[str, Path] = {}

    def get(name: str) -> Path:
        if name not in made:
            made[name] = make_tiny_model(TINY_MODELS[name], tmp_path_factory.mktemp(name))
        return made[name]

    return get


@pytest.fixture(scope="session")
def tiny_gemma3_vlm(tmp_path_factory: pytest.TempPathFactory):
    """A tiny random Gemma3ForConditionalGeneration (tiny_vlm.py), made once per run so its
    artifact compiles once per run."""
    from tiny_vlm import gemma3_vlm_checkpoint

    return gemma3_vlm_checkpoint(tmp_path_factory.mktemp("gemma3_vlm"))


@pytest.fixture(scope="session")
def tiny_qwen2_5_vlm(tmp_path_factory: pytest.TempPathFactory):
    """A tiny random Qwen2_5_VLForConditionalGeneration (tiny_qwen_vlm.py), made once per run
    so its artifact compiles once per run."""
    from tiny_qwen_vlm import qwen2_5_vlm_checkpoint

    return qwen2_5_vlm_checkpoint(tmp_path_factory.mktemp("qwen2_5_vlm"))


@pytest.fixture(scope="session")
def tiny_qwen3_5_vlm(tmp_path_factory: pytest.TempPathFactory):
    """A tiny random Qwen3_5ForConditionalGeneration (tiny_qwen_vlm.py), made once per run."""
    from tiny_qwen_vlm import qwen3_5_vlm_checkpoint

    return qwen3_5_vlm_checkpoint(tmp_path_factory.mktemp("qwen3_5_vlm"))


@pytest.fixture(scope="session")
def tiny_qwen2_5_vlm_oracle(tiny_qwen2_5_vlm):
    """transformers' Qwen2_5_VLForConditionalGeneration on the tiny checkpoint (fp32, never
    stopping at an end-of-sequence token), loaded once per run."""
    import transformers
    from tiny_vlm import greedy_oracle

    return greedy_oracle(transformers.Qwen2_5_VLForConditionalGeneration, tiny_qwen2_5_vlm.path)


@pytest.fixture(scope="session")
def tiny_qwen2_5_vlm_processor(tiny_qwen2_5_vlm):
    """transformers' own (PIL-backend) Qwen2-VL image processor of the tiny checkpoint."""
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import (
        Qwen2VLImageProcessorPil,
    )

    return Qwen2VLImageProcessorPil.from_pretrained(tiny_qwen2_5_vlm.path)


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


SLOW_FIXTURES = frozenset({"cuda_artifact"})
"""Fixtures whose setup alone is a slow test's cost (docs/TESTING.md): every test that asks
for one is marked `slow`, so the fast lane (`-m "not slow"`) never builds it."""


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if SLOW_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.slow)


@pytest.fixture(scope="session")
def cuda_artifact(tiny_model_dir, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny Llama compiled for sm_90a in bf16 with `vllm-tvm compile` (needs nvcc; an
    nvcc model build, so its users are `slow`: SLOW_FIXTURES)."""
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
def embed_bundle(tiny_model_dir, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """`vllm-tvm embed` of the tiny Llama for this machine (the C library's tests share it)."""
    from vllm_tvm.native_bundle.bundle import write_embedding_bundle

    dest = tmp_path_factory.mktemp("embed") / "bundle"
    return write_embedding_bundle(dest, tiny_model_dir("llama")).path


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
