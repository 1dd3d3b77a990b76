"""The compiler pass that adds the device sampling functions `argmax` and `sample`.

Why a pass: these functions are no part of a model's math. They read the fp32 logits
`[batch, vocab]` a forward left on the device and hand back one int32 per row, so a step whose
requests need no whole row on the host (logprobs, penalties, grammar masks, ...) copies back
only the tokens. The kernels are schedules (schedules/sampling_kernels.py), and a model
definition never imports kernels, so the compiler attaches them to every exported model,
sized by its vocabulary:

- `argmax(logits [batch_size, vocab] f32) -> [batch_size] int32`: numpy.argmax per row.
- `sample(logits, temperature [b] f32, top_k [b] i32, top_p [b] f32, min_p [b] f32,
  keys [b] u32) -> [b] int32`: one draw per row (temperature <= 0: argmax; see the kernels'
  docstring for the filters and the noise).
"""

from __future__ import annotations

import tvm
from tvm import relax, tirx

from vllm_tvm.schedules.sampling_kernels import row_argmax, row_sample

SAMPLING_FUNCTIONS = ("argmax", "sample")
"""The functions the pass adds, in the order the library lists them."""
_SAMPLE_PARAMETERS = (
    ("temperature", "float32"),
    ("top_k", "int32"),
    ("top_p", "float32"),
    ("min_p", "float32"),
    ("keys", "uint32"),
)
"""`sample`'s per-row parameters after the logits, in call order."""


@tvm.transform.module_pass(opt_level=0, name="AttachSamplingFunctions")
class AttachSamplingFunctions:
    """Adds `argmax` and `sample` over logits of `vocab_size` columns (GPU or CPU kernels)."""

    def __init__(self, vocab_size: int, gpu: bool) -> None:
        self.vocab_size = vocab_size
        self.gpu = gpu

    def transform_module(self, mod: tvm.IRModule, _ctx: tvm.transform.PassContext) -> tvm.IRModule:
        builder = relax.BlockBuilder(mod)
        argmax = row_argmax(self.vocab_size, self.gpu)
        _add_function(builder, "argmax", argmax, "row_argmax", self._params(rows_only=True))
        sample = row_sample(self.vocab_size, self.gpu)
        _add_function(builder, "sample", sample, "row_sample", self._params(rows_only=False))
        return builder.get()

    def _params(self, rows_only: bool) -> list[relax.Var]:
        """New parameters of one function: the logits, then (for `sample`) the per-row
        sampling parameters; each function has its own, with its own `batch_size`."""
        rows = tirx.Var("batch_size", "int64")
        params = [relax.Var("logits", relax.TensorType([rows, self.vocab_size], "float32"))]
        if rows_only:
            return params
        for name, dtype in _SAMPLE_PARAMETERS:
            params.append(relax.Var(name, relax.TensorType([rows], dtype)))
        return params


def _add_function(
    builder: relax.BlockBuilder,
    name: str,
    kernel: tirx.PrimFunc,
    kernel_name: str,
    params: list[relax.Var],
) -> None:
    """The public Relax function `name`(params) -> int32 [batch_size]: one call of `kernel`."""
    rows = params[0].ty.shape[0]
    with builder.function(name, params, attrs={"num_input": len(params)}):
        with builder.dataflow():
            kernel_var = builder.add_func(kernel, kernel_name)
            tokens = relax.TensorType([rows], "int32")
            result = builder.emit_output(relax.call_tir(kernel_var, params, tokens))
        builder.emit_func_output(result)
