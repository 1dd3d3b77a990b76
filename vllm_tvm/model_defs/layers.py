"""Layers shared by the model definitions.

`NTLinear` exists because `nn.Linear` computes `matmul(x, permute_dims(W))`: without a
transpose-fusing pass every decode step would re-transpose every weight (measured 8.9 ms vs
1.5 ms per step on the H200). Here the product reads W in its checkpoint layout [out, in]
directly, accumulates in fp32 whatever the storage dtype, and is one TIR function that the
GEMV/matmul schedule rules recognise.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tvm import te
from tvm.relax.frontend import nn
from tvm.relax.frontend.nn import Tensor, op

if TYPE_CHECKING:
    from vllm_tvm.model_defs.config import LlamaFamilyConfig
    from vllm_tvm.model_defs.quant_linear import QuantWeight

ACCUMULATION_DTYPE = "float32"


def _nt_matmul(x: te.Tensor, weight: te.Tensor, out_dtype: str) -> te.Tensor:
    """y[..., n] = sum_k x[..., k] * weight[n, k], summed in fp32, stored as out_dtype."""
    reduce_len = x.shape[-1]
    k = te.reduce_axis((0, reduce_len), name="k")
    out_shape = (*x.shape[:-1], weight.shape[0])

    def dot(*index):
        return te.sum(
            x[(*index[:-1], k)].astype(ACCUMULATION_DTYPE)
            * weight[index[-1], k].astype(ACCUMULATION_DTYPE),
            axis=k,
        )

    acc = te.compute(out_shape, dot, name="nt_matmul_acc")
    if out_dtype == ACCUMULATION_DTYPE:
        return acc
    return te.compute(out_shape, lambda *i: acc[i].astype(out_dtype), name="nt_matmul")


def nt_matmul(x: Tensor, weight: Tensor | QuantWeight, out_dtype: str | None = None) -> Tensor:
    """x @ weight.T for a weight stored [out, in] (float, or quantized: quant_linear.py)."""
    if not isinstance(weight, Tensor):
        return weight.nt_matmul(x, out_dtype or x.dtype)
    return op.tensor_expr_op(
        lambda a, w: _nt_matmul(a, w, out_dtype or x.dtype), "nt_matmul", [x, weight]
    )


class NTLinear(nn.Module):
    """y = x W^T + b with W kept [out_features, in_features] (the checkpoint layout)."""

    def __init__(
        self,
        in_features: int,
        out_features: int,
        bias: bool,
        dtype: str,
        part_rows: tuple[int, ...] = (),
    ) -> None:
        """`part_rows`: a fused projection's rows per checkpoint tensor, in order (q, k, v;
        gate, up), so a weight whose tensors have different stored types can be kept
        quantized in parts (checkpoints/fused_parts.py); empty for any other projection."""
        if part_rows and sum(part_rows) != out_features:
            raise ValueError(f"part rows {part_rows} do not add up to {out_features} features")
        self.in_features = in_features
        self.out_features = out_features
        self.part_rows = part_rows
        self.weight = nn.Parameter((out_features, in_features), dtype)
        self.bias = nn.Parameter((out_features,), dtype) if bias else None

    def forward(self, x: Tensor) -> Tensor:
        y = nt_matmul(x, self.weight)
        return y + self.bias if self.bias is not None else y


class OffsetRMSNorm(nn.Module):
    """RMSNorm that multiplies by `offset + weight` (Gemma checkpoints store w - 1)."""

    def __init__(self, size: int, eps: float, offset: float, dtype: str) -> None:
        self.weight = nn.Parameter((size,), dtype)
        self.eps = eps
        self.offset = offset

    def forward(self, x: Tensor) -> Tensor:
        return op.rms_norm(x, self.weight + self.offset, axes=-1, epsilon=self.eps)


def make_rms_norm(config: LlamaFamilyConfig, size: int, dtype: str) -> nn.Module:
    """The model's RMSNorm over the last axis of `size` (with Gemma's weight offset)."""
    if config.norm_weight_offset:
        return OffsetRMSNorm(size, config.rms_norm_eps, config.norm_weight_offset, dtype)
    return nn.RMSNorm(size, -1, config.rms_norm_eps, bias=False, dtype=dtype)
