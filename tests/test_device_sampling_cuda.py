"""The device sampling functions built for CUDA at Llama-3's 128,256-token vocabulary: the
build needs only nvcc (sm_90a cubin, no GPU); where a GPU exists they also run there and
must agree with numpy and with the softmax they sample."""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tvm
from device_sampling_helpers import chi_square, chi_square_limit, kept_distribution, tied_rows

from vllm_tvm.compiler import cuda_binaries, cuda_build
from vllm_tvm.compiler.pipeline import lowering_pipeline
from vllm_tvm.compiler.sampling_functions import AttachSamplingFunctions
from vllm_tvm.compiler.targets import resolve_target
from vllm_tvm.runtime.sampling.device_logits import DeviceLogits

VOCAB = 128256
ROWS = 64

pytestmark = pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc (CUDA toolkit)")


def _gpu_present() -> bool:
    return cuda_build.real_cuda_driver_present() and tvm.cuda(0).exist


needs_gpu = pytest.mark.skipif(not _gpu_present(), reason="needs an NVIDIA GPU")


@pytest.fixture(scope="module")
def cuda_library(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """`argmax` and `sample` for VOCAB, built for cuda:sm_90a with the project's pipeline."""
    spec = resolve_target("cuda:sm_90a")
    target = spec.make_target()
    mod = AttachSamplingFunctions(VOCAB, gpu=True)(tvm.IRModule())
    executable = cuda_build.build_relax_module(mod, spec, relax_pipeline=lowering_pipeline(target))
    return cuda_build.export(executable, tmp_path_factory.mktemp("sampling") / "lib.so", spec)


@dataclass
class OnGPU:
    """The loaded functions and a numpy -> GPU tensor copy."""

    vm: Any
    device: Any

    def logits(self, rows: np.ndarray) -> DeviceLogits:
        return DeviceLogits(
            self.to_device(np.ascontiguousarray(rows, dtype=np.float32)),
            self.vm["argmax"],
            self.vm["sample"],
            self.to_device,
        )

    def to_device(self, array: np.ndarray) -> Any:
        return tvm.runtime.tensor(array, self.device)


@pytest.fixture(scope="module")
def gpu(cuda_library: Path) -> OnGPU:
    device = tvm.cuda(0)
    library = tvm.runtime.load_module(str(cuda_library))
    return OnGPU(tvm.runtime.vm.VirtualMachine(library, device), device)


def _sample(logits: DeviceLogits, keys: np.ndarray, temperature: float, **filters) -> np.ndarray:
    rows = logits.shape[0]
    return logits.sample(
        np.full(rows, temperature),
        np.full(rows, filters.get("top_k", 0)),
        np.full(rows, filters.get("top_p", 1.0)),
        np.full(rows, filters.get("min_p", 0.0)),
        keys,
    )


def _keys(count: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 2**32, count, dtype=np.uint64)


def test_sampling_functions_build_to_an_sm90a_cubin(cuda_library: Path) -> None:
    assert cuda_binaries.library_embeds_cuda_binary(cuda_library, "sm_90a")
    assert not cuda_binaries.library_keeps_cuda_source(cuda_library)


@needs_gpu
def test_gpu_argmax_equals_numpy_argmax_with_ties(gpu: OnGPU) -> None:
    rows = np.random.default_rng(1).standard_normal((ROWS, VOCAB)).astype(np.float32) * 4
    rows[: len(tied_rows(VOCAB))] = tied_rows(VOCAB)
    np.testing.assert_array_equal(gpu.logits(rows).argmax(), rows.argmax(axis=1))


@needs_gpu
@pytest.mark.parametrize("filters", [{"top_k": 1}, {"top_p": 1e-6}, {"min_p": 1.0}])
def test_gpu_filter_keeping_one_token_samples_the_argmax(gpu: OnGPU, filters) -> None:
    rows = np.random.default_rng(2).standard_normal((ROWS, VOCAB)).astype(np.float32) * 4
    tokens = _sample(gpu.logits(rows), _keys(ROWS), 1.0, **filters)
    np.testing.assert_array_equal(tokens, rows.argmax(axis=1))


@needs_gpu
def test_gpu_equal_keys_draw_equal_tokens(gpu: OnGPU) -> None:
    rows = np.random.default_rng(3).standard_normal((ROWS, VOCAB)).astype(np.float32)
    logits = gpu.logits(rows)
    first = _sample(logits, _keys(ROWS), 1.0, top_p=0.9)
    np.testing.assert_array_equal(_sample(logits, _keys(ROWS), 1.0, top_p=0.9), first)


@needs_gpu
@pytest.mark.parametrize(
    "filters",
    [
        {"temperature": 1.0},
        {"temperature": 0.7, "top_k": 20},
        {"temperature": 1.0, "top_p": 0.6},
        {"temperature": 1.3, "top_k": 50, "top_p": 0.9},
    ],
    ids=["plain", "top_k", "top_p", "top_k+top_p"],
)
def test_gpu_draws_follow_the_softmax_of_the_kept_tokens(gpu: OnGPU, filters) -> None:
    # Most of the mass on 300 tokens, the rest of the vocabulary far below but not zero.
    row = np.full(VOCAB, -12.0, np.float32)
    row[:300] = np.random.default_rng(4).standard_normal(300).astype(np.float32) * 2
    draws = 2000
    logits = gpu.logits(np.tile(row, (draws, 1)))
    tokens = _sample(logits, _keys(draws, 5), **filters)
    statistic, dof = chi_square(tokens, kept_distribution(row, **filters))
    assert statistic < chi_square_limit(dof)
