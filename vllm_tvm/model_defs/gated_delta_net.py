"""Gated DeltaNet, the linear-attention layer of Qwen3-Next and Qwen3.5/3.6, in `relax.nn`.

What a layer does (transformers' `Qwen3NextGatedDeltaNet` / `Qwen3_5GatedDeltaNet`):
project the input to q, k, v (together `mixed`, the conv's channels), the output gate z and
the per-value-head b, a; run `mixed` through the causal depthwise conv + SiLU, whose state
is the last K - 1 inputs; L2-normalise q and k per head (q also scaled by k_dim^-0.5); with
beta = sigmoid(b) and the log decay g = -exp(A_log) * softplus(a + dt_bias) run the gated
delta rule, whose state is one [k_dim, v_dim] matrix per value head; normalise each head's
output with an RMSNorm gated by silu(z); project back (out_proj).

State instead of a KV cache: per sequence a conv state [K - 1, conv_dim] and a recurrent
state [heads_v, k_dim, v_dim], both fp32, kept in two pools [slots, ...] that the layer
takes and returns; sequence b of a call uses slot `slots[b]` (distinct within a call) and
the kernels update those slots in place, leaving every other slot as it was (`prefill`
for a ragged batch of prompt chunks, `decode` for one token a sequence). Who owns the pools
and hands out slots is the runtime's affair; a pool of the batch's size with slots
0 .. batch - 1 is the plain "states in, states out" form.

Projections: the layer holds `in_proj_qkvz` and `in_proj_ba`, as Qwen3-Next checkpoints
name them, whose rows are grouped per key head ([q, k, v, z] of each key head's group,
`ProjectionLayout.GROUPED`). Qwen3.5 checkpoints store `in_proj_qkv`, `in_proj_z`,
`in_proj_b`, `in_proj_a`: the loader concatenates them into the same two matrices
(`split_projection_sources`), so a step runs two GEMVs either way
(`ProjectionLayout.CONCATENATED`: [q | k | v | z] and [b | a]).

Kernels (the delta rule, the conv) come from the compiler through `RecurrentKernels`;
everything else is plain Relax.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from tvm.relax.frontend import nn
from tvm.relax.frontend.nn import Tensor, op

from vllm_tvm.model_defs.layers import NTLinear
from vllm_tvm.model_defs.recurrent_kernels import RecurrentKernels

STATE_DTYPE = "float32"
L2_NORM_EPS = 1e-6
"""transformers' (and FLA's) epsilon inside the q/k L2 norm."""


class ProjectionLayout(enum.Enum):
    """Row order of `in_proj_qkvz` / `in_proj_ba` (see the module docstring)."""

    GROUPED = "grouped"
    CONCATENATED = "concatenated"


SPLIT_PROJECTIONS = {
    "linear_attn.in_proj_qkvz": ("linear_attn.in_proj_qkv", "linear_attn.in_proj_z"),
    "linear_attn.in_proj_ba": ("linear_attn.in_proj_b", "linear_attn.in_proj_a"),
}
"""The layer's fused matrices and the Qwen3.5 checkpoint tensors concatenated into them."""


@dataclass(frozen=True)
class GatedDeltaNetOptions:
    """The shape of one Gated DeltaNet layer (HF names: `from_hf_config`)."""

    hidden_size: int
    heads_k: int
    heads_v: int
    k_dim: int
    v_dim: int
    conv_kernel_size: int
    rms_norm_eps: float
    layout: ProjectionLayout

    def __post_init__(self) -> None:
        if self.heads_v % self.heads_k:
            raise ValueError(
                f"linear_num_value_heads={self.heads_v} must be a multiple of "
                f"linear_num_key_heads={self.heads_k}"
            )

    @classmethod
    def from_hf_config(
        cls, config: Mapping[str, Any], layout: ProjectionLayout
    ) -> GatedDeltaNetOptions:
        """From a Qwen3-Next / Qwen3.5 text config (its `linear_*` fields)."""
        if config.get("hidden_act", "silu") != "silu":
            raise ValueError(f"Gated DeltaNet conv activation {config['hidden_act']!r}: only silu")
        return cls(
            hidden_size=config["hidden_size"],
            heads_k=config["linear_num_key_heads"],
            heads_v=config["linear_num_value_heads"],
            k_dim=config["linear_key_head_dim"],
            v_dim=config["linear_value_head_dim"],
            conv_kernel_size=config["linear_conv_kernel_dim"],
            rms_norm_eps=config["rms_norm_eps"],
            layout=layout,
        )

    @property
    def key_dim(self) -> int:
        return self.heads_k * self.k_dim

    @property
    def value_dim(self) -> int:
        return self.heads_v * self.v_dim

    @property
    def conv_dim(self) -> int:
        """Channels of the conv: q, k and v together."""
        return 2 * self.key_dim + self.value_dim

    def conv_state_shape(self, slots: Any) -> tuple[Any, ...]:
        """The conv state pool of `slots` sequences."""
        return (slots, self.conv_kernel_size - 1, self.conv_dim)

    def recurrent_state_shape(self, slots: Any) -> tuple[Any, ...]:
        """The recurrent state pool of `slots` sequences."""
        return (slots, self.heads_v, self.k_dim, self.v_dim)


def split_projection_sources(param_name: str) -> tuple[list[str], int]:
    """Qwen3.5 checkpoint tensors whose concatenation (axis 0) is `param_name`."""
    for fused, parts in SPLIT_PROJECTIONS.items():
        if param_name.endswith(f"{fused}.weight"):
            prefix = param_name[: -len(f"{fused}.weight")]
            return [f"{prefix}{part}.weight" for part in parts], 0
    return [param_name], 0


class GatedRMSNorm(nn.Module):
    """RMSNorm of each head's output times `weight`, gated by silu(gate) (fp32 inside)."""

    def __init__(self, size: int, eps: float, dtype: str) -> None:
        self.weight = nn.Parameter((size,), dtype)
        self.eps = eps

    def forward(self, x: Tensor, gate: Tensor) -> Tensor:
        normed = op.rms_norm(x, op.astype(self.weight, STATE_DTYPE), axes=-1, epsilon=self.eps)
        return normed * op.silu(op.astype(gate, STATE_DTYPE))


class DepthwiseConvWeight(nn.Module):
    """The conv's weight [conv_dim, 1, K] as checkpoints store it (`conv1d.weight`)."""

    def __init__(self, channels: int, kernel_size: int, dtype: str) -> None:
        self.weight = nn.Parameter((channels, 1, kernel_size), dtype)


def _l2_normalised(x: Tensor) -> Tensor:
    return x / op.sqrt(op.sum(x * x, axis=-1, keepdims=True) + L2_NORM_EPS)


class GatedDeltaNet(nn.Module):
    """One Gated DeltaNet layer over its state pools (see the module docstring)."""

    def __init__(
        self, options: GatedDeltaNetOptions, kernels: RecurrentKernels, dtype: str
    ) -> None:
        self.options = options
        self.dtype = dtype
        o = options
        self.in_proj_qkvz = NTLinear(o.hidden_size, o.conv_dim + o.value_dim, False, dtype)
        self.in_proj_ba = NTLinear(o.hidden_size, 2 * o.heads_v, False, dtype)
        self.conv1d = DepthwiseConvWeight(o.conv_dim, o.conv_kernel_size, dtype)
        self.dt_bias = nn.Parameter((o.heads_v,), dtype)
        self.A_log = nn.Parameter((o.heads_v,), dtype)
        self.norm = GatedRMSNorm(o.v_dim, o.rms_norm_eps, dtype)
        self.out_proj = NTLinear(o.value_dim, o.hidden_size, False, dtype)
        shape = (o.heads_k, o.heads_v, o.k_dim, o.v_dim)
        self._chunked = kernels.delta_rule_chunked(*shape)
        self._step = kernels.delta_rule_step(*shape)
        self._conv = kernels.causal_conv1d(o.conv_dim, o.conv_kernel_size)

    def _projections(self, hidden: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        """hidden [n, hidden] -> (mixed [n, conv_dim], z [n, heads_v, v_dim], b, a [n, heads_v])."""
        o = self.options
        n = hidden.shape[0]
        qkvz = self.in_proj_qkvz(hidden)
        ba = self.in_proj_ba(hidden)
        if o.layout is ProjectionLayout.CONCATENATED:
            mixed, z = op.split(qkvz, [o.conv_dim], axis=-1)
            b, a = op.split(ba, 2, axis=-1)
            return mixed, op.reshape(z, (n, o.heads_v, o.v_dim)), b, a
        group_v = o.heads_v // o.heads_k * o.v_dim
        per_key_head = op.reshape(qkvz, (n, o.heads_k, 2 * o.k_dim + 2 * group_v))
        q, k, v, z = op.split(per_key_head, [o.k_dim, 2 * o.k_dim, 2 * o.k_dim + group_v], axis=-1)
        mixed = op.concat(
            [
                op.reshape(q, (n, o.key_dim)),
                op.reshape(k, (n, o.key_dim)),
                op.reshape(v, (n, o.value_dim)),
            ],
            dim=-1,
        )
        b, a = op.split(op.reshape(ba, (n, o.heads_k, 2 * (o.heads_v // o.heads_k))), 2, axis=-1)
        return (
            mixed,
            op.reshape(z, (n, o.heads_v, o.v_dim)),
            op.reshape(b, (n, o.heads_v)),
            op.reshape(a, (n, o.heads_v)),
        )

    def _conv_and_gates(
        self, hidden: Tensor, seq_starts: Tensor, slots: Tensor, conv_states: Tensor
    ) -> tuple[tuple[Tensor, ...], Tensor, Tensor]:
        """((q, k, v, g, beta) for the delta rule in fp32, z, the updated conv pool)."""
        o = self.options
        n = hidden.shape[0]
        mixed, z, b, a = self._projections(hidden)
        weight = op.reshape(self.conv1d.weight, (o.conv_dim, o.conv_kernel_size))
        conv_out, conv_states = op.tensor_ir_inplace_op(
            self._conv,
            "gated_delta_conv1d",
            [
                op.astype(mixed, STATE_DTYPE),
                op.astype(weight, STATE_DTYPE),
                seq_starts,
                slots,
                conv_states,
            ],
            [-1, 4],
            [
                Tensor.placeholder((n, o.conv_dim), STATE_DTYPE),
                Tensor.placeholder(conv_states.shape, STATE_DTYPE),
            ],
        )
        q, k, v = op.split(conv_out, [o.key_dim, 2 * o.key_dim], axis=-1)
        q = _l2_normalised(op.reshape(q, (n, o.heads_k, o.k_dim))) * (o.k_dim**-0.5)
        k = _l2_normalised(op.reshape(k, (n, o.heads_k, o.k_dim)))
        v = op.reshape(v, (n, o.heads_v, o.v_dim))
        beta = op.sigmoid(op.astype(b, STATE_DTYPE))
        decay_rate = op.exp(op.astype(self.A_log, STATE_DTYPE))
        g = op.negative(decay_rate) * op.softplus(
            op.astype(a, STATE_DTYPE) + op.astype(self.dt_bias, STATE_DTYPE)
        )
        return (q, k, v, g, beta), z, conv_states

    def _output(self, core: Tensor, z: Tensor, shape: tuple[Any, ...]) -> Tensor:
        """Gated RMSNorm per head, then out_proj, as `shape` in the model dtype."""
        gated = op.astype(self.norm(core, z), self.dtype)
        flat = op.reshape(gated, (core.shape[0], self.options.value_dim))
        return op.reshape(self.out_proj(flat), shape)

    def prefill(
        self,
        hidden: Tensor,
        seq_starts: Tensor,
        slots: Tensor,
        conv_states: Tensor,
        recurrent_states: Tensor,
    ) -> tuple[Tensor, Tensor, Tensor]:
        """Ragged prompt chunks: hidden [1, n, hidden] (sequence b at rows seq_starts[b] ..
        seq_starts[b+1], its states at slots[b]) -> (output, conv pool, recurrent pool)."""
        o = self.options
        rows = op.reshape(hidden, (hidden.shape[1], o.hidden_size))
        gates, z, conv_states = self._conv_and_gates(rows, seq_starts, slots, conv_states)
        core, recurrent_states = op.tensor_ir_inplace_op(
            self._chunked,
            "gated_delta_rule_chunked",
            [*gates, seq_starts, slots, recurrent_states],
            [-1, 7],
            [
                Tensor.placeholder((rows.shape[0], o.heads_v, o.v_dim), STATE_DTYPE),
                Tensor.placeholder(recurrent_states.shape, STATE_DTYPE),
            ],
        )
        return self._output(core, z, hidden.shape), conv_states, recurrent_states

    def decode(
        self, hidden: Tensor, slots: Tensor, conv_states: Tensor, recurrent_states: Tensor
    ) -> tuple[Tensor, Tensor, Tensor]:
        """One token a sequence: hidden [batch, 1, hidden], its states at slots[b] ->
        (output, conv pool, recurrent pool)."""
        o = self.options
        batch = hidden.shape[0]
        rows = op.reshape(hidden, (batch, o.hidden_size))
        seq_starts = op.arange(0, batch + 1, dtype="int32")
        gates, z, conv_states = self._conv_and_gates(rows, seq_starts, slots, conv_states)
        core, recurrent_states = op.tensor_ir_inplace_op(
            self._step,
            "gated_delta_rule_step",
            [*gates, slots, recurrent_states],
            [-1, 6],
            [
                Tensor.placeholder((batch, o.heads_v, o.v_dim), STATE_DTYPE),
                Tensor.placeholder(recurrent_states.shape, STATE_DTYPE),
            ],
        )
        return self._output(core, z, hidden.shape), conv_states, recurrent_states
