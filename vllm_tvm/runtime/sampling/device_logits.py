"""One forward's logits, kept on the device until someone asks for them.

Why it exists: copying `[rows, vocab]` fp32 logits to the host every step (33 MB at batch
64 with a 128,256-token vocabulary) costs more than the sampling itself when a step only
needs one token per row. `DeviceLogits` holds the tensor the forward returned and offers
the full copy (`numpy()`) or the token ids reduced on the device (`argmax()`, `sample()`),
using the artifact's compiled `argmax` / `sample` functions (compiler/sampling_functions.py).
Artifacts compiled before those functions existed still work: `argmax()` then reduces the
host copy, and `can_sample` is False.

Validity: the tensor is the forward's output buffer, which the runner may reuse when it
runs the same compiled function again (CUDA-graph captured functions do); read it before
the next forward of the same kind.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np


class DeviceLogits:
    """fp32 logits `[rows, vocab]` on the device, with host copy and on-device reductions."""

    def __init__(
        self,
        tensor: Any,
        argmax_fn: Callable[[Any], Any] | None,
        sample_fn: Callable[..., Any] | None,
        to_device: Callable[[np.ndarray], Any],
    ) -> None:
        """`tensor`: a `[rows, vocab]` float32 device tensor; `argmax_fn` / `sample_fn`: the
        compiled functions (None when the artifact lacks them); `to_device`: numpy array ->
        device tensor (for the per-row sampling parameters)."""
        rows, vocab = (int(dim) for dim in tensor.shape)
        self.shape = (rows, vocab)
        self._tensor = tensor
        self._argmax = argmax_fn
        self._sample = sample_fn
        self._to_device = to_device
        self._host: np.ndarray | None = None

    @property
    def can_sample(self) -> bool:
        """Whether `sample()` can run (the artifact has the compiled `sample`)."""
        return self._sample is not None

    def numpy(self) -> np.ndarray:
        """The whole `[rows, vocab]` float32 array on the host (copied once, then reused)."""
        if self._host is None:
            self._host = self._tensor.numpy().reshape(self.shape)
        return self._host

    def argmax(self) -> np.ndarray:
        """int64 `[rows]`: each row's first maximal index, as numpy.argmax gives it."""
        if self._argmax is None:
            return self.numpy().argmax(axis=1)
        return self._argmax(self._tensor).numpy().astype(np.int64)

    def sample(
        self,
        temperature: np.ndarray,
        top_k: np.ndarray,
        top_p: np.ndarray,
        min_p: np.ndarray,
        keys: np.ndarray,
    ) -> np.ndarray:
        """int64 `[rows]`: one token per row drawn on the device under that row's parameters.

        temperature <= 0 takes the argmax; top_k <= 0 or >= vocab, top_p >= 1 and
        min_p <= 0 turn that filter off; `keys` (uint32) seed each row's noise, so equal
        keys and logits give equal tokens. Raises RuntimeError when `can_sample` is False.
        """
        if self._sample is None:
            raise RuntimeError(
                "this artifact has no compiled `sample` function; recompile it with this "
                "version of vllm-tvm to sample on the device"
            )
        rows, vocab = self.shape
        arrays = {
            "temperature": np.asarray(temperature, dtype=np.float32),
            "top_k": np.minimum(np.asarray(top_k, dtype=np.int64), vocab).astype(np.int32),
            "top_p": np.asarray(top_p, dtype=np.float32),
            "min_p": np.asarray(min_p, dtype=np.float32),
            "keys": np.asarray(keys, dtype=np.uint32),
        }
        for name, array in arrays.items():
            if array.shape != (rows,):
                raise ValueError(f"{name} must have shape ({rows},), got {array.shape}")
        on_device = [self._to_device(np.ascontiguousarray(a)) for a in arrays.values()]
        return self._sample(self._tensor, *on_device).numpy().astype(np.int64)
