"""The exported sampling functions: token ids from logits that stay on the device.

Why this exists: a decode step's logits are `[batch, vocab]` fp32 on the device. When no
request of the step needs the whole row on the host (logprobs, penalties, grammar masks, ...)
the runtime calls these functions on the logits tensor the forward returned and copies back
only one int32 per row. The kernels are in schedules/sampling_kernels.py; this module adds
them to a model's compiled contract:

- `argmax(logits [batch_size, vocab] f32) -> [batch_size] int32`: numpy.argmax per row.
- `sample(logits, temperature [b] f32, top_k [b] i32, top_p [b] f32, min_p [b] f32,
  keys [b] u32) -> [b] int32`: one draw per row (temperature <= 0: argmax; see the kernels'
  docstring for the filters and the noise).

A model definition mixes `SamplingFunctions` into its `nn.Module` and merges
`sampling_export_spec()` into its export spec; it needs `config.vocab_size` and `target`.
"""

from __future__ import annotations

from typing import Any

from tvm.relax.frontend import nn
from tvm.relax.frontend.nn import Tensor, op

from vllm_tvm.schedules.sampling_kernels import row_argmax, row_sample

SAMPLING_FUNCTIONS = ("argmax", "sample")
_NO_PARAMS = {"param_mode": "none", "effect_mode": "none"}


class SamplingFunctions:
    """`argmax` and `sample` methods for an exported model (a mixin of its nn.Module)."""

    config: Any
    target: Any

    def _sampling_on_gpu(self) -> bool:
        return self.target.kind.name != "llvm"

    def argmax(self, logits: Tensor) -> Tensor:
        """The first maximal index of each row of `logits` [rows, vocab] (int32 [rows])."""
        vocab = self.config.vocab_size
        return op.tensor_ir_op(
            row_argmax(vocab, self._sampling_on_gpu()),
            "row_argmax",
            args=[logits],
            out=Tensor.placeholder([logits.shape[0]], "int32"),
        )

    def sample(
        self,
        logits: Tensor,
        temperature: Tensor,
        top_k: Tensor,
        top_p: Tensor,
        min_p: Tensor,
        keys: Tensor,
    ) -> Tensor:
        """One token per row of `logits` under that row's parameters (int32 [rows])."""
        vocab = self.config.vocab_size
        return op.tensor_ir_op(
            row_sample(vocab, self._sampling_on_gpu()),
            "row_sample",
            args=[logits, temperature, top_k, top_p, min_p, keys],
            out=Tensor.placeholder([logits.shape[0]], "int32"),
        )

    def sampling_export_spec(self) -> dict[str, Any]:
        """Export-spec entries of `argmax` and `sample` (no parameters, no effects)."""
        vocab = self.config.vocab_size
        rows = "batch_size"
        return {
            "argmax": {
                "logits": nn.spec.Tensor([rows, vocab], "float32"),
                "$": _NO_PARAMS,
            },
            "sample": {
                "logits": nn.spec.Tensor([rows, vocab], "float32"),
                "temperature": nn.spec.Tensor([rows], "float32"),
                "top_k": nn.spec.Tensor([rows], "int32"),
                "top_p": nn.spec.Tensor([rows], "float32"),
                "min_p": nn.spec.Tensor([rows], "float32"),
                "keys": nn.spec.Tensor([rows], "uint32"),
                "$": _NO_PARAMS,
            },
        }
