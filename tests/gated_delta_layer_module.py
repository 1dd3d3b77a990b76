"""A Gated DeltaNet layer as an exportable module of its own, for the layer tests.

`prefill(hidden, starts, slots, conv, rec)` and `decode(hidden, slots, conv, rec)` call the
layer under the `linear_attn.` prefix it has inside a decoder layer; the state pools are
[pool, ...] with `pool` symbolic.
"""

from __future__ import annotations

import tvm
from tvm.relax.frontend import nn
from tvm.relax.frontend.nn import Tensor

from vllm_tvm.compiler.recurrent_kernels import TargetRecurrentKernels
from vllm_tvm.model_defs.gated_delta_net import GatedDeltaNet, GatedDeltaNetOptions


class GatedDeltaNetModule(nn.Module):
    """The layer, its kernels built for `target`."""

    def __init__(
        self, options: GatedDeltaNetOptions, target: tvm.target.Target, dtype: str
    ) -> None:
        self.options = options
        self.dtype = dtype
        self.linear_attn = GatedDeltaNet(options, TargetRecurrentKernels(target), dtype)

    def prefill(self, hidden: Tensor, starts: Tensor, slots: Tensor, conv: Tensor, rec: Tensor):
        return self.linear_attn.prefill(hidden, starts, slots, conv, rec)

    def decode(self, hidden: Tensor, slots: Tensor, conv: Tensor, rec: Tensor):
        return self.linear_attn.decode(hidden, slots, conv, rec)

    def export_spec(self) -> dict:
        options = self.options
        packed = {"param_mode": "packed", "effect_mode": "none"}
        states = {
            "slots": nn.spec.Tensor(["batch"], "int32"),
            "conv": nn.spec.Tensor(list(options.conv_state_shape("pool")), "float32"),
            "rec": nn.spec.Tensor(list(options.recurrent_state_shape("pool")), "float32"),
        }
        return {
            "prefill": {
                "hidden": nn.spec.Tensor([1, "n", options.hidden_size], self.dtype),
                "starts": nn.spec.Tensor(["batch_plus_one"], "int32"),
                **states,
                "$": packed,
            },
            "decode": {
                "hidden": nn.spec.Tensor(["batch", 1, options.hidden_size], self.dtype),
                **states,
                "$": packed,
            },
        }
