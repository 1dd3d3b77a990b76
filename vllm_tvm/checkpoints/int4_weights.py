"""Group-quantized int4 checkpoints (GPTQ, AWQ, compressed-tensors `pack-quantized`).

Why this exists: the int4 checkpoints on the Hub come from three tools with three packings
of the same idea, w = s * (q - z) with one fp16 scale s (and zero z) per group of input
columns of each output row:

- GPTQ: `qweight` int32 [in/8, out], eight inputs per word; `qzeros` int32 [in/g, out/8],
  eight outputs per word, each zero stored minus one in the original format (`gptq`), as is
  in `gptq_v2`; `scales` fp16 [in/g, out]; optional `g_idx` (act-order).
- AWQ (gemm): `qweight` int32 [in, out/8], nibble i of a word holding output 8 * word +
  (0, 2, 4, 6, 1, 3, 5, 7)[i]; `qzeros` packed the same way; `scales` fp16 [in/g, out].
- compressed-tensors `pack-quantized` (symmetric): `weight_packed` int32 [out, in/8] holding
  q + 8, eight inputs per word; `weight_scale` [out, in/g]; the zero is 8.

This view turns any of them into the fused kernel's planes (`qs`: uint32 words of eight
values in input order; `s`: float32 [out, in/g], exact for fp16 and bf16 scales alike;
`z`: uint8 [out, in/g]) or into the dequantized fp32 weight, computed as s * (q - z) in
float32 like the kernel. GPTQ with
act-order (`g_idx` not equal to column // group) is only read dequantized: its groups are
not runs of columns.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

INT4_GROUP_SIZES = (32, 64, 128)
"""Group sizes with a fused format (`int4_g<size>` in checkpoints/weight_formats.py)."""

_AWQ_ORDER = np.array([0, 2, 4, 6, 1, 3, 5, 7])
"""AWQ's GEMM packing: nibble i of a word holds output column 8 * word + _AWQ_ORDER[i]."""


@dataclass(frozen=True)
class Int4Scheme:
    """Which tool's packing a checkpoint uses, and its group size."""

    layout: str
    """`gptq`, `awq` or `pack` (compressed-tensors)."""
    group_size: int
    zero_stored_minus_one: bool = False
    """GPTQ's original (v1) format stores each zero point minus one."""

    @property
    def format_name(self) -> str:
        """The fused weight format of this group size (checkpoints/weight_formats.py)."""
        return f"int4_g{self.group_size}"


def int4_scheme(quantization_config: dict[str, Any]) -> Int4Scheme:
    """The int4 scheme of an HF `quantization_config`; ValueError naming what is not read."""
    method = quantization_config.get("quant_method")
    if method in ("gptq", "awq"):
        bits = int(quantization_config.get("bits", quantization_config.get("w_bit", 0)))
        group = int(
            quantization_config.get("group_size", quantization_config.get("q_group_size", 0))
        )
        if bits != 4:
            raise ValueError(f"{method} with {bits} bits is not supported; supported: 4 bits")
        if method == "awq" and quantization_config.get("version", "gemm").lower() != "gemm":
            raise ValueError(
                f"awq version {quantization_config.get('version')!r} is not supported; "
                "supported: gemm"
            )
        v1 = quantization_config.get("checkpoint_format", "gptq") == "gptq"
        return _checked(Int4Scheme(method, group, zero_stored_minus_one=method == "gptq" and v1))
    if method == "compressed-tensors":
        groups = list((quantization_config.get("config_groups") or {}).values())
        weights = groups[0].get("weights") if len(groups) == 1 else None
        if (
            not isinstance(weights, dict)
            or weights.get("type") != "int"
            or int(weights.get("num_bits", 0)) != 4
            or weights.get("strategy") != "group"
            or not weights.get("symmetric", True)
        ):
            raise ValueError(
                "compressed-tensors pack-quantized weights other than symmetric 4-bit int "
                "groups are not supported"
            )
        return _checked(Int4Scheme("pack", int(weights["group_size"])))
    raise ValueError(f"quantization method {method!r} is not int4")


def _checked(scheme: Int4Scheme) -> Int4Scheme:
    if scheme.group_size <= 0 or scheme.group_size % 8:
        raise ValueError(f"int4 group size {scheme.group_size} is not supported")
    return scheme


def _nibbles(words: np.ndarray) -> np.ndarray:
    """int32 words [..., n] -> their eight 4-bit values each, low nibble first [..., 8n]."""
    unsigned = np.ascontiguousarray(words).view(np.uint32)
    shifts = np.arange(0, 32, 4, dtype=np.uint32)
    values = (unsigned[..., None] >> shifts) & np.uint32(15)
    return values.reshape(*unsigned.shape[:-1], -1).astype(np.uint8)


def _pack_words(values: np.ndarray) -> np.ndarray:
    """uint8 4-bit values [rows, 8n] (value order) -> uint32 words [rows, n]."""
    grouped = values.astype(np.uint32).reshape(values.shape[0], -1, 8)
    shifts = np.arange(0, 32, 4, dtype=np.uint32)
    return np.bitwise_or.reduce(grouped << shifts, axis=-1).astype(np.uint32)


_PACKED_SUFFIX = {"gptq": "qweight", "awq": "qweight", "pack": "weight_packed"}
_PART_SUFFIXES = (
    "qweight",
    "qzeros",
    "scales",
    "g_idx",
    "weight_packed",
    "weight_scale",
    "weight_shape",
)


class Int4Weights:
    """A GPTQ / AWQ / compressed-tensors checkpoint seen by HF weight name."""

    def __init__(self, source: Any, scheme: Int4Scheme) -> None:
        self._source = source
        self._scheme = scheme
        self._packed_suffix = _PACKED_SUFFIX[scheme.layout]
        self._packed = {
            n.removesuffix(self._packed_suffix) + "weight": n
            for n in source.names()
            if n.endswith("." + self._packed_suffix)
        }
        self._parts = {n for n in source.names() if n.rpartition(".")[2] in _PART_SUFFIXES}

    def names(self) -> list[str]:
        """Plain tensors and the logical `.weight` of every packed one."""
        plain = [n for n in self._source.names() if n not in self._parts]
        return plain + list(self._packed)

    def is_int4(self, name: str) -> bool:
        return name in self._packed

    def stored_type(self, name: str) -> str:
        """`INT4_G<size>` for a packed weight whose groups are runs of columns, else
        `INT4_ACT_ORDER` (GPTQ act-order) or the tensor's dtype."""
        if name not in self._packed:
            return str(self._source.get(name).dtype)
        return "INT4_ACT_ORDER" if self._act_order(name) else self._scheme.format_name.upper()

    def get(self, name: str) -> np.ndarray:
        """Tensor `name`; a packed weight dequantized to float32 [out, in]."""
        if name not in self._packed:
            return self._source.get(name)
        q, s, z = self._unpacked(name)
        group = self._group_index(name, q.shape[1])
        return s[:, group] * (q.astype(np.float32) - z[:, group])

    def planes(self, name: str) -> dict[str, np.ndarray]:
        """The fused kernel's planes of packed weight `name` (groups must be column runs)."""
        if self._act_order(name):
            raise ValueError(f"{name!r} uses act-order groups; it is read dequantized only")
        q, s, z = self._unpacked(name)
        return {"qs": _pack_words(q), "s": s, "z": z.astype(np.uint8)}

    def _prefix(self, name: str) -> str:
        return name.removesuffix("weight")

    def _act_order(self, name: str) -> bool:
        g_idx_name = self._prefix(name) + "g_idx"
        if self._scheme.layout != "gptq" or g_idx_name not in self._parts:
            return False
        g_idx = np.asarray(self._source.get(g_idx_name))
        return not np.array_equal(g_idx, np.arange(g_idx.size) // self._scheme.group_size)

    def _group_index(self, name: str, columns: int) -> np.ndarray:
        g_idx_name = self._prefix(name) + "g_idx"
        if self._scheme.layout == "gptq" and g_idx_name in self._parts:
            return np.asarray(self._source.get(g_idx_name)).astype(np.int64)
        return np.arange(columns) // self._scheme.group_size

    def _unpacked(self, name: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(q uint8 [out, in], s float32 [out, groups], z float32 [out, groups])."""
        prefix, layout = self._prefix(name), self._scheme.layout
        get = self._source.get
        if layout == "pack":
            q = _nibbles(get(self._packed[name]))
            s = np.asarray(get(prefix + "weight_scale")).astype(np.float32)
            return q, s, np.full(s.shape, 8.0, np.float32)
        if layout == "gptq":
            q = _nibbles(np.ascontiguousarray(np.asarray(get(prefix + "qweight")).T)).T
            zeros = _nibbles(get(prefix + "qzeros")).astype(np.float32)
        else:
            order = np.argsort(_AWQ_ORDER)
            q = _nibbles(get(prefix + "qweight"))
            q = q.reshape(q.shape[0], -1, 8)[:, :, order].reshape(q.shape[0], -1)
            zeros = _nibbles(get(prefix + "qzeros")).astype(np.float32)
            zeros = zeros.reshape(zeros.shape[0], -1, 8)[:, :, order].reshape(zeros.shape[0], -1)
        if self._scheme.zero_stored_minus_one:
            zeros = zeros + 1.0
        scales = np.asarray(get(prefix + "scales")).astype(np.float32)
        return (
            np.ascontiguousarray(q.T),
            np.ascontiguousarray(scales.T),
            np.ascontiguousarray(zeros.T),
        )
