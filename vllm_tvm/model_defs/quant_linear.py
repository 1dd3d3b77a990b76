"""Linear and embedding weights kept in a GGUF block format and dequantized inside the kernel.

Why this exists: dequantizing a GGUF file to fp32 at load makes a Q4_1 model eight times
larger on the device, and decode streams every weight byte once per token. Here a weight
stays in its blocks (planes described in weight_formats.py) and each product is one TIR
function: a `dequantize` stage that turns a block back into its fp32 values with ggml's
formulas in ggml's order of operations (so the values are the ones llama.cpp and the
`dequantized` path use), feeding the same fp32-accumulating NT matmul as `NTLinear`. The
schedules tile or inline the `dequantize` stage (CPU: schedules/cpu_quant_matmul.py; GPUs:
dlight's GEMV/Matmul), so the fp32 weight never exists in memory. The embedding table
gathers rows the same way. `apply_weight_formats` swaps these in for the float weights of
an already built model, so the model definitions stay written in plain `NTLinear` /
`nn.Embedding`; a fused projection whose checkpoint tensors have different types gets one
quantized product per part (`QuantWeightParts`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence

from tvm import te, tirx
from tvm.relax.frontend import nn
from tvm.relax.frontend.nn import Tensor, op

from vllm_tvm.checkpoints.fused_parts import parse_part, part_name
from vllm_tvm.checkpoints.weight_formats import DEQUANTIZE_BLOCK, QuantFormat, quant_format
from vllm_tvm.model_defs.layers import ACCUMULATION_DTYPE, NTLinear, _nt_matmul


class _Planes:
    """Element access to one weight's plane tensors, by weight row and column."""

    def __init__(self, fmt: QuantFormat, tensors: Sequence[te.Tensor]) -> None:
        self._fmt = fmt
        self._tensors = {p.name: t for p, t in zip(fmt.planes, tensors, strict=True)}

    def item(self, name: str, row: tirx.Expr, col: tirx.Expr) -> tirx.Expr:
        """The element of plane `name` that covers weight element (row, col)."""
        return self._tensors[name][row, col // self._fmt.plane(name).values_per_item]

    def value(self, name: str, row: tirx.Expr, col: tirx.Expr) -> tirx.Expr:
        """That element as fp32 (a scale, or an int8 value)."""
        return self.item(name, row, col).astype(ACCUMULATION_DTYPE)

    def field(self, name: str, row: tirx.Expr, col: tirx.Expr) -> tirx.Expr:
        """The bit field of (row, col) in a plane of packed uint32 words, as fp32."""
        return self.field_bits(name, row, col).astype(ACCUMULATION_DTYPE)

    def field_bits(self, name: str, row: tirx.Expr, col: tirx.Expr) -> tirx.Expr:
        """The bit field of (row, col) in a plane of packed uint32 words, as uint32."""
        per_word = self._fmt.plane(name).values_per_item
        width = 32 // per_word
        shift = ((col % per_word) * width).astype("uint32")
        mask = tirx.const((1 << width) - 1, "uint32")
        return (self.item(name, row, col) >> shift) & mask


Value = Callable[[_Planes, tirx.Expr, tirx.Expr], tirx.Expr]


def _q8_0(p: _Planes, row: tirx.Expr, col: tirx.Expr) -> tirx.Expr:
    """ggml Q8_0: d * q, q int8."""
    return p.value("d", row, col) * p.value("qs", row, col)


def _q4_0(p: _Planes, row: tirx.Expr, col: tirx.Expr) -> tirx.Expr:
    """ggml Q4_0: d * (q - 8), q 4-bit."""
    return p.value("d", row, col) * (p.field("qs", row, col) - _f32(8))


def _q4_1(p: _Planes, row: tirx.Expr, col: tirx.Expr) -> tirx.Expr:
    """ggml Q4_1: d * q + m, q 4-bit."""
    return p.value("d", row, col) * p.field("qs", row, col) + p.value("m", row, col)


def _q5_0(p: _Planes, row: tirx.Expr, col: tirx.Expr) -> tirx.Expr:
    """ggml Q5_0: d * (q - 16), q 5-bit."""
    return p.value("d", row, col) * (_with_high_bits(p, row, col) - _f32(16))


def _q5_1(p: _Planes, row: tirx.Expr, col: tirx.Expr) -> tirx.Expr:
    """ggml Q5_1: d * q + m, q 5-bit."""
    return p.value("d", row, col) * _with_high_bits(p, row, col) + p.value("m", row, col)


def _with_high_bits(p: _Planes, row: tirx.Expr, col: tirx.Expr) -> tirx.Expr:
    """q = low nibble + 16 * high bits (Q5_0, Q5_1, Q5_K: one bit; Q6_K: two), as fp32."""
    return p.field("qs", row, col) + p.field("qh", row, col) * _f32(16)


def _k_offset(p: _Planes, row: tirx.Expr, col: tirx.Expr) -> tirx.Expr:
    """Q2_K/Q4_K/Q5_K sub-block offset dmin * min (ggml's `m1`)."""
    return p.value("dmin", row, col) * p.value("mn", row, col)


def _k_with_min(p: _Planes, row: tirx.Expr, col: tirx.Expr) -> tirx.Expr:
    """ggml Q4_K and Q2_K: (d * scale) * q - dmin * min; Q4_K: q 4-bit, scale/min 6-bit
    per 32 values; Q2_K: q 2-bit, scale/min 4-bit per 16 values."""
    scale = p.value("d", row, col) * p.value("sc", row, col)
    return scale * p.field("qs", row, col) - _k_offset(p, row, col)


def _q3_k(p: _Planes, row: tirx.Expr, col: tirx.Expr) -> tirx.Expr:
    """ggml Q3_K: (d * scale) * (q - 4), q 3-bit (two low bits + 4 * high bit), scale int8
    (6 bits less 32) per 16 values."""
    scale = p.value("d", row, col) * p.value("sc", row, col)
    q = p.field("qs", row, col) + p.field("qh", row, col) * _f32(4)
    return scale * (q - _f32(4))


def _q5_k(p: _Planes, row: tirx.Expr, col: tirx.Expr) -> tirx.Expr:
    """ggml Q5_K: as Q4_K with a fifth bit, q = low nibble + 16 * high bit."""
    scale = p.value("d", row, col) * p.value("sc", row, col)
    return scale * _with_high_bits(p, row, col) - _k_offset(p, row, col)


def _q6_k(p: _Planes, row: tirx.Expr, col: tirx.Expr) -> tirx.Expr:
    """ggml Q6_K: (d * scale) * (q - 32), q 6-bit (nibble + 16 * two high bits), scale int8
    per 16 values."""
    scale = p.value("d", row, col) * p.value("sc", row, col)
    return scale * (_with_high_bits(p, row, col) - _f32(32))


def _q6_k_int8(p: _Planes, row: tirx.Expr, col: tirx.Expr) -> tirx.Expr:
    """Q6_K with the int8 q - 32 per value (weight_formats.WIDENED): (d * scale) * value."""
    return (p.value("d", row, col) * p.value("sc", row, col)) * p.value("qs", row, col)


def _int4(p: _Planes, row: tirx.Expr, col: tirx.Expr) -> tirx.Expr:
    """GPTQ / AWQ / compressed-tensors int4: s * (q - z), q 4-bit, fp32 s and zero z per
    group (checkpoints/int4_weights.py)."""
    return p.value("s", row, col) * (p.field("qs", row, col) - p.value("z", row, col))


def _e2m1(code: tirx.Expr) -> tirx.Expr:
    """The fp32 value of a 4-bit E2M1 code (uint32). Code bits: sign 3, exponent 2-1,
    mantissa 0; exponent e > 0 gives 2**(e - 1) * (1 + m / 2), built as an fp32 bit pattern;
    e = 0 gives m / 2. Exact, as for FP8."""
    exponent = (code >> tirx.const(1, "uint32")) & tirx.const(3, "uint32")
    mantissa = code & tirx.const(1, "uint32")
    normal = tirx.reinterpret(
        ACCUMULATION_DTYPE,
        ((exponent + tirx.const(126, "uint32")) << tirx.const(23, "uint32"))
        | (mantissa << tirx.const(22, "uint32")),
    )
    small = mantissa.astype(ACCUMULATION_DTYPE) * _f32(0.5)
    magnitude = tirx.Select(exponent == tirx.const(0, "uint32"), small, normal)
    negative = (code >> tirx.const(3, "uint32")) == tirx.const(1, "uint32")
    return tirx.Select(negative, -magnitude, magnitude)


def _nvfp4(p: _Planes, row: tirx.Expr, col: tirx.Expr) -> tirx.Expr:
    """NVFP4: E2M1 code times its group's fp32 scale."""
    return _e2m1(p.field_bits("qs", row, col)) * p.value("s", row, col)


def _mxfp4(p: _Planes, row: tirx.Expr, col: tirx.Expr) -> tirx.Expr:
    """MXFP4: E2M1 code times 2**(e - 127), e the block's E8M0 exponent. The power of two is
    e moved into an fp32 exponent field (e = 0: 2**-127, the fp32 subnormal 2**22 ulp);
    the product is exact, so the value is ldexp(e2m1, e - 127)."""
    exponent = p.item("e", row, col).astype("uint32")
    normal = tirx.reinterpret(ACCUMULATION_DTYPE, exponent << tirx.const(23, "uint32"))
    smallest = tirx.reinterpret(ACCUMULATION_DTYPE, tirx.const(1 << 22, "uint32"))
    scale = tirx.Select(exponent == tirx.const(0, "uint32"), smallest, normal)
    return _e2m1(p.field_bits("qs", row, col)) * scale


def _fp8_e4m3(p: _Planes, row: tirx.Expr, col: tirx.Expr) -> tirx.Expr:
    """FP8 E4M3 (fn: no infinities) times its scale. The byte's fields are moved into an
    fp32 bit pattern (exponent bias 7 -> 127, mantissa 3 -> 23 bits); subnormals (exponent
    0) are mantissa * 2**-9. Exact: every E4M3 value is an fp32 value."""
    bits = p.item("qs", row, col).astype("uint32")
    sign = (bits >> tirx.const(7, "uint32")) << tirx.const(31, "uint32")
    exponent = (bits >> tirx.const(3, "uint32")) & tirx.const(15, "uint32")
    mantissa = bits & tirx.const(7, "uint32")
    normal = tirx.reinterpret(
        ACCUMULATION_DTYPE,
        sign
        | ((exponent + tirx.const(120, "uint32")) << tirx.const(23, "uint32"))
        | (mantissa << tirx.const(20, "uint32")),
    )
    magnitude = mantissa.astype(ACCUMULATION_DTYPE) * _f32(2.0**-9)
    subnormal = tirx.Select(sign == tirx.const(0, "uint32"), magnitude, -magnitude)
    value = tirx.Select(exponent == tirx.const(0, "uint32"), subnormal, normal)
    return value * p.value("s", row, col)


def _f16(p: _Planes, row: tirx.Expr, col: tirx.Expr) -> tirx.Expr:
    """IEEE half: widened to fp32 (exact)."""
    return p.value("w", row, col)


def _bf16(p: _Planes, row: tirx.Expr, col: tirx.Expr) -> tirx.Expr:
    """bfloat16, held as its bits: the upper half of an fp32 bit pattern (exact)."""
    bits = p.item("w", row, col).astype("uint32") << tirx.const(16, "uint32")
    return tirx.reinterpret(ACCUMULATION_DTYPE, bits)


def _f32(value: float) -> tirx.Expr:
    return tirx.const(value, ACCUMULATION_DTYPE)


_VALUE: dict[str, Value] = {
    "q8_0": _q8_0,
    "q4_0": _q4_0,
    "q4_1": _q4_1,
    "q5_0": _q5_0,
    "q5_1": _q5_1,
    "q2_k": _k_with_min,
    "q3_k": _q3_k,
    "q4_k": _k_with_min,
    "q5_k": _q5_k,
    "q6_k": _q6_k,
    "q6_k_as_int8": _q6_k_int8,
    "f16": _f16,
    "bf16": _bf16,
    "fp8_e4m3": _fp8_e4m3,
    "nvfp4": _nvfp4,
    "mxfp4": _mxfp4,
    **{f"int4_g{group}": _int4 for group in (32, 64, 128)},
}


class QuantWeight(nn.Module):
    """A weight `[rows, columns]` held as the planes of `fmt` (parameters `<name>.<plane>`)."""

    def __init__(self, fmt: QuantFormat, shape: tuple[int, int]) -> None:
        self.quant_format = fmt
        self.logical_shape = shape
        for plane in fmt.planes:
            plane_shape = tuple(fmt.plane_shape(plane, shape))
            setattr(self, plane.name, nn.Parameter(plane_shape, plane.dtype))

    def _planes(self) -> list[Tensor]:
        return [getattr(self, plane.name) for plane in self.quant_format.planes]

    def _dequantize(self, planes: Sequence[te.Tensor]) -> te.Tensor:
        access, value = _Planes(self.quant_format, planes), _VALUE[self.quant_format.kernel]
        return te.compute(
            self.logical_shape, lambda row, col: value(access, row, col), name=DEQUANTIZE_BLOCK
        )

    def nt_matmul(self, x: Tensor, out_dtype: str) -> Tensor:
        """x @ W.T (fp32 accumulation), W dequantized block by block inside the kernel."""
        return op.tensor_expr_op(
            lambda a, *planes: _nt_matmul(a, self._dequantize(planes), out_dtype),
            f"nt_matmul_{self.quant_format.kernel}",
            [x, *self._planes()],
        )

    def take_rows(self, ids: Tensor, out_dtype: str) -> Tensor:
        """Rows `ids` (int32 [n]) of W, dequantized: [n, columns] in `out_dtype`."""
        value = _VALUE[self.quant_format.kernel]

        def gather(index: te.Tensor, *planes: te.Tensor) -> te.Tensor:
            access = _Planes(self.quant_format, planes)
            return te.compute(
                (index.shape[0], self.logical_shape[1]),
                lambda i, col: value(access, index[i], col).astype(out_dtype),
                name=f"{DEQUANTIZE_BLOCK}_rows",
            )

        return op.tensor_expr_op(gather, f"take_{self.quant_format.kernel}", [ids, *self._planes()])


class QuantWeightParts(nn.Module):
    """A fused weight kept as row ranges of different formats (checkpoints/fused_parts.py):
    one QuantWeight per part (parameters `<name>.<part>.<plane>`), products concatenated."""

    def __init__(self, parts: Sequence[tuple[str, QuantFormat, tuple[int, int]]]) -> None:
        """`parts`: (attribute name, format, logical shape) of each part, in row order."""
        self.part_names = [name for name, _, _ in parts]
        for name, fmt, shape in parts:
            setattr(self, name, QuantWeight(fmt, shape))

    def nt_matmul(self, x: Tensor, out_dtype: str) -> Tensor:
        """x @ W.T as the parts' products side by side along the last axis."""
        products = [getattr(self, name).nt_matmul(x, out_dtype) for name in self.part_names]
        return op.concat(products, dim=-1)


class QuantEmbedding(nn.Module):
    """`nn.Embedding` over a quantized table (1-D token ids, as the `embed` function takes)."""

    def __init__(self, fmt: QuantFormat, num: int, dim: int, dtype: str) -> None:
        self.weight = QuantWeight(fmt, (num, dim))
        self.dtype = dtype

    def forward(self, ids: Tensor) -> Tensor:
        return self.weight.take_rows(ids, self.dtype)


def _submodules(module: nn.Module, prefix: str = "") -> Iterator[tuple[str, nn.Module, object]]:
    """(dotted path, module, key in its parent) for every module below `module`."""
    items: Iterator[tuple[object, object]]
    if isinstance(module, nn.ModuleList):
        items = enumerate(module)
    else:
        items = iter(list(vars(module).items()))
    for key, child in items:
        if isinstance(child, nn.Module):
            path = f"{prefix}{key}"
            yield path, child, (module, key)
            yield from _submodules(child, f"{path}.")


def quantizable_weights(model: nn.Module) -> dict[str, tuple[int, int]]:
    """Weights that may be kept quantized (linear layers, embedding tables): name -> shape."""
    found = {}
    for path, module, _ in _submodules(model):
        if isinstance(module, NTLinear):
            found[f"{path}.weight"] = (module.out_features, module.in_features)
        elif isinstance(module, nn.Embedding):
            found[f"{path}.weight"] = (int(module.num), int(module.dim))
    return found


def fused_part_counts(model: nn.Module) -> dict[str, int]:
    """Fused projection weights that may be kept in parts: name -> checkpoint tensors fused."""
    return {
        f"{path}.weight": len(module.part_rows)
        for path, module, _ in _submodules(model)
        if isinstance(module, NTLinear) and module.part_rows
    }


def apply_weight_formats(model: nn.Module, formats: Mapping[str, str]) -> None:
    """Store each weight named in `formats` (name -> format name) quantized, in place; a
    fused weight named by its parts (checkpoints/fused_parts.py) is stored in those parts.

    Raises ValueError naming a weight that is not a linear or embedding weight of `model`,
    or parts that do not split its fused rows.
    """
    pending = _by_weight(formats)
    for path, module, (parent, key) in list(_submodules(model)):
        name = f"{path}.weight"
        if name not in pending or not isinstance(module, (NTLinear, nn.Embedding)):
            continue
        stored = pending.pop(name)
        if isinstance(stored, dict):
            if not isinstance(module, NTLinear):
                raise ValueError(f"cannot store {name!r} in parts: not a linear weight")
            module.weight = QuantWeightParts(_part_layout(name, module, stored))
            continue
        fmt = quant_format(stored)
        if isinstance(module, NTLinear):
            module.weight = QuantWeight(fmt, (module.out_features, module.in_features))
            continue
        table = QuantEmbedding(fmt, int(module.num), int(module.dim), module.weight.dtype)
        if isinstance(parent, nn.ModuleList):
            parent[key] = table
        else:
            setattr(parent, str(key), table)
    if pending:
        raise ValueError(
            f"cannot store {next(iter(pending))!r} quantized: not a linear or embedding weight "
            f"of this model; quantizable: {', '.join(quantizable_weights(model))}"
        )


def _by_weight(formats: Mapping[str, str]) -> dict[str, str | dict[tuple[int, int], str]]:
    """`formats` with the parts of each fused weight gathered: weight -> format name, or
    weight -> {(first, stop) source range: format name}."""
    grouped: dict[str, str | dict[tuple[int, int], str]] = {}
    for name, fmt in formats.items():
        part = parse_part(name)
        if part is None:
            grouped[name] = fmt
            continue
        weight, first, stop = part
        parts = grouped.setdefault(weight, {})
        assert isinstance(parts, dict)
        parts[(first, stop)] = fmt
    return grouped


def _part_layout(
    name: str, module: NTLinear, parts: Mapping[tuple[int, int], str]
) -> list[tuple[str, QuantFormat, tuple[int, int]]]:
    """(attribute, format, shape) of each part of `module`'s weight, from its `part_rows`;
    ValueError unless the parts cover its sources once each, in order."""
    ranges = sorted(parts)
    covered = [index for first, stop in ranges for index in range(first, stop)]
    if not module.part_rows or covered != list(range(len(module.part_rows))):
        raise ValueError(
            f"cannot store {name!r} in parts {ranges}: its projection fuses "
            f"{len(module.part_rows)} checkpoint tensors of rows {list(module.part_rows)}"
        )
    return [
        (
            part_name(name, first, stop).rpartition(".")[2],
            quant_format(parts[(first, stop)]),
            (sum(module.part_rows[first:stop]), module.in_features),
        )
        for first, stop in ranges
    ]
