"""Random weights of an artifact's parameter shapes, made on the device (`load_format="dummy"`).

Why it exists: throughput does not depend on weight values, so a benchmark of a large shape
(Llama-3.1-8B on an H200) should not need its 16 GB checkpoint, nor minutes spent reading it.
With dummy weights the model directory only needs config.json (the compiler reads the shape
from it). Values are normal with std 0.02 (norm weights are 1.0), so activations stay finite
and sampling sees ordinary logits.

On CUDA the values are drawn by torch on the GPU when a CUDA-enabled torch is importable and
handed to TVM through DLPack (no host copy; seconds for 8B); otherwise numpy draws them on
the host and they are uploaded (about a minute for 8B on one core). Parameters stored
quantized (GGUF blocks under `--weight-format native`) have no meaningful random form and are
refused by name.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import ml_dtypes
import numpy as np
from tqdm import tqdm

from vllm_tvm.artifacts.manifest import ParamEntry
from vllm_tvm.checkpoints.weight_formats import FLOAT
from vllm_tvm.runtime.devices import target_kind_for

DUMMY_STD = 0.02
"""Standard deviation of every non-norm weight."""

_NUMPY_DTYPES = {
    "float32": np.dtype(np.float32),
    "float16": np.dtype(np.float16),
    "bfloat16": np.dtype(ml_dtypes.bfloat16),
}


def is_norm_weight(name: str) -> bool:
    """Whether parameter `name` is a normalisation scale (made 1.0, not random)."""
    module, _, leaf = name.rpartition(".")
    return leaf == "weight" and module.rpartition(".")[2].endswith("norm")


def check_dummy_entries(entries: Sequence[ParamEntry]) -> None:
    """Refuse parameters that cannot be made at random (quantized planes, unknown dtypes)."""
    for entry in entries:
        if entry.format != FLOAT:
            raise ValueError(
                f"load_format 'dummy' makes float weights only; parameter {entry.name} is "
                f"stored as '{entry.format}' (compile with --weight-format dequantized)"
            )
        if entry.dtype not in _NUMPY_DTYPES:
            raise ValueError(
                f"load_format 'dummy' cannot make parameter {entry.name} of dtype "
                f"'{entry.dtype}'; supported: " + ", ".join(_NUMPY_DTYPES)
            )


def dummy_param_array(entry: ParamEntry, rng: np.random.Generator) -> np.ndarray:
    """One parameter as a host array of its shape and dtype (ones for a norm weight)."""
    dtype = _NUMPY_DTYPES[entry.dtype]
    if is_norm_weight(entry.name):
        return np.ones(entry.shape, dtype)
    values = rng.standard_normal(entry.shape, dtype=np.float32)
    values *= np.float32(DUMMY_STD)
    return values if dtype == values.dtype else values.astype(dtype)


def make_dummy_params(
    entries: Sequence[ParamEntry], device: str, seed: int = 0, show_progress: bool = True
) -> list[Any]:
    """Every parameter of `entries` (manifest order) as a random TVM tensor on `device`
    ("cpu" or "cuda"), ready for `ModelRunner(params=...)`."""
    from vllm_tvm.runtime.tvm_runtime import load_runtime

    target_kind_for(device)  # refuses an unknown device by name
    check_dummy_entries(entries)
    tvm = load_runtime(require_cuda=device == "cuda")
    progress = {"desc": "dummy weights", "unit": "tensor", "disable": not show_progress}
    if device == "cuda" and _cuda_torch() is not None:
        return _torch_params(entries, tvm, seed, progress)
    target = tvm.device(device, 0)
    rng = np.random.default_rng(seed)
    return [
        tvm.runtime.tensor(dummy_param_array(entry, rng), target)
        for entry in tqdm(entries, **progress)
    ]


def _cuda_torch() -> Any | None:
    """torch, when it is installed and sees a CUDA device; else None."""
    try:
        import torch
    except ImportError:
        return None
    return torch if torch.cuda.is_available() else None


def _torch_params(
    entries: Sequence[ParamEntry], tvm: Any, seed: int, progress: dict[str, Any]
) -> list[Any]:
    """Draw each parameter on the GPU with torch and wrap it for TVM through DLPack (the
    TVM tensor keeps torch's memory alive)."""
    import torch

    dtypes = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}
    generator = torch.Generator(device="cuda")
    generator.manual_seed(seed)
    params = []
    for entry in tqdm(entries, **progress):
        tensor = torch.empty(entry.shape, dtype=dtypes[entry.dtype], device="cuda")
        if is_norm_weight(entry.name):
            tensor.fill_(1.0)
        else:
            tensor.normal_(0.0, DUMMY_STD, generator=generator)
        params.append(tvm.runtime.from_dlpack(tensor))
    torch.cuda.synchronize()
    return params
