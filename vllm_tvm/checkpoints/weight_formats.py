"""How each compiled parameter is stored: a plain float array, or GGUF blocks kept quantized.

Why this exists: keeping a GGUF weight quantized on the device takes three parties that
must agree on one description of the storage: the model definition (its matmul dequantizes
the blocks inline), the artifact manifest (it records each parameter's format, so a
checkpoint of other quant types is refused before use) and the runtime loader (it repacks
the file's blocks into the arrays the kernel reads). That description lives here, free of
TVM and numpy imports, so every layer can read it.

A quantized weight ``[out, in]`` becomes several *planes*, each a 2-D array ``[out, in //
values_per_item]``: the quantized values (int8; or bit fields packed into uint32 words in
value order, value ``v`` of a ``b``-bit field in bits ``b * (v % (32 / b))`` of word
``v // (32 / b)``: 4-bit values eight to a word, K-quants' extra high bits beside them) and
the block scales (and mins) as the file has them. Planes are indexed by plain division of
the column, which the CPU schedule vectorises and dlight's GPU GEMV/Matmul rules recognise.
F16 / BF16 weights of fp32 CPU artifacts use the same machinery: one plane of their 16-bit
values, widened to fp32 in registers, so the weight stream stays half the size.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass

from vllm_tvm.checkpoints.fused_parts import part_name, same_type_runs

FLOAT = "float"
"""Format of a parameter stored as a plain array of the artifact's dtype."""

NATIVE = "native"
DEQUANTIZED = "dequantized"
WEIGHT_FORMAT_MODES = (NATIVE, DEQUANTIZED)
"""`native`: GGUF weights of a fused quant type stay quantized; `dequantized`: all float."""

DEQUANTIZE_BLOCK = "dequantize"
"""Name of the stage of a fused matmul that rebuilds fp32 weights from planes: the model
definition gives it this name, the schedules find it by this name."""


@dataclass(frozen=True)
class Plane:
    """One array of a quantized weight: name, element dtype, weight values per element."""

    name: str
    dtype: str
    values_per_item: int


@dataclass(frozen=True)
class QuantFormat:
    """A stored type kept quantized: its planes and the values one block holds.

    `ggml_type` names the stored type: a ggml block type for GGUF tensors and for float
    weights quantized at load, `F8_E4M3` for FP8 safetensors weights."""

    name: str
    ggml_type: str
    block_size: int
    planes: tuple[Plane, ...]
    layout: str = ""
    """The format whose planes and values this one's are, for a stored type kept in a wider
    format (`WIDENED`): its kernels read them. Empty: the format's own."""

    @property
    def kernel(self) -> str:
        """The format the kernels are chosen by: `layout` where set, else the name."""
        return self.layout or self.name

    def plane(self, name: str) -> Plane:
        """The plane called `name`; ValueError naming the planes that exist."""
        for plane in self.planes:
            if plane.name == name:
                return plane
        known = ", ".join(p.name for p in self.planes)
        raise ValueError(f"format {self.name} has no plane {name!r}; it has: {known}")

    def plane_shape(self, plane: Plane, shape: Sequence[int]) -> list[int]:
        """Shape of `plane` for a weight of logical shape `shape` (last axis: in)."""
        rows, columns = list(shape[:-1]), int(shape[-1])
        return [*rows, columns // plane.values_per_item]


_NIBBLES = Plane("qs", "uint32", 8)
_SCALES = Plane("d", "float16", 32)
_FIFTH_BITS = Plane("qh", "uint32", 32)
"""The fifth (Q5_0, Q5_1, Q5_K) or third (Q3_K) bit of each value, 32 to a uint32 word."""
_CRUMBS = Plane("qs", "uint32", 16)
"""2-bit values (Q2_K, Q3_K), 16 to a uint32 word."""
_K_SUPER_SCALES = (Plane("d", "float16", 256), Plane("dmin", "float16", 256))
# K-quants: fp16 super-block scale (and min scale) per 256 values, 6-bit (Q4_K, Q5_K),
# 4-bit (Q2_K) or int8 (Q3_K, Q6_K) sub-block scales per 32 / 16 values.
_K_SCALES = (*_K_SUPER_SCALES, Plane("sc", "uint8", 32), Plane("mn", "uint8", 32))

FORMATS: dict[str, QuantFormat] = {
    fmt.name: fmt
    for fmt in (
        QuantFormat("q8_0", "Q8_0", 32, (Plane("qs", "int8", 1), _SCALES)),
        QuantFormat("q4_0", "Q4_0", 32, (_NIBBLES, _SCALES)),
        QuantFormat("q4_1", "Q4_1", 32, (_NIBBLES, _SCALES, Plane("m", "float16", 32))),
        QuantFormat("q5_0", "Q5_0", 32, (_NIBBLES, _FIFTH_BITS, _SCALES)),
        # Q5_0 blocks as Q8_0's planes: int8 q - 16 and the block's fp16 d (see WIDENED).
        QuantFormat("q5_0_as_q8_0", "Q5_0", 32, (Plane("qs", "int8", 1), _SCALES), "q8_0"),
        QuantFormat(
            "q5_1", "Q5_1", 32, (_NIBBLES, _FIFTH_BITS, _SCALES, Plane("m", "float16", 32))
        ),
        QuantFormat(
            "q2_k",
            "Q2_K",
            256,
            (_CRUMBS, *_K_SUPER_SCALES, Plane("sc", "uint8", 16), Plane("mn", "uint8", 16)),
        ),
        QuantFormat(
            "q3_k",
            "Q3_K",
            256,
            (_CRUMBS, _FIFTH_BITS, Plane("sc", "int8", 16), Plane("d", "float16", 256)),
        ),
        QuantFormat("q4_k", "Q4_K", 256, (_NIBBLES, *_K_SCALES)),
        QuantFormat("q5_k", "Q5_K", 256, (_NIBBLES, _FIFTH_BITS, *_K_SCALES)),
        # The two high bits of each value, 16 to a uint32 word.
        QuantFormat(
            "q6_k",
            "Q6_K",
            256,
            (
                _NIBBLES,
                Plane("qh", "uint32", 16),
                Plane("sc", "int8", 16),
                Plane("d", "float16", 256),
            ),
        ),
        # Q6_K's values as int8 q - 32, its scales as they are (see WIDENED).
        QuantFormat(
            "q6_k_as_int8",
            "Q6_K",
            256,
            (Plane("qs", "int8", 1), Plane("sc", "int8", 16), Plane("d", "float16", 256)),
        ),
        # 16-bit floats, one to an element (BF16 as its bit pattern: numpy has no bfloat16),
        # counted in runs of 32 columns as the CPU schedule's dequantized tile is.
        QuantFormat("f16", "F16", 32, (Plane("w", "float16", 1),)),
        QuantFormat("bf16", "BF16", 32, (Plane("w", "uint16", 1),)),
        # int4 values, an fp16 scale and a zero point per group (checkpoints/int4_weights.py).
        *(
            QuantFormat(
                f"int4_g{group}",
                f"INT4_G{group}",
                group,
                (_NIBBLES, Plane("s", "float32", group), Plane("z", "uint8", group)),
            )
            for group in (32, 64, 128)
        ),
        # E2M1 codes and a float32 scale per 16 columns (checkpoints/fp4_weights.py).
        QuantFormat("nvfp4", "NVFP4", 16, (_NIBBLES, Plane("s", "float32", 16))),
        # E2M1 codes and a uint8 E8M0 exponent per 32 columns (checkpoints/mxfp4_weights.py).
        QuantFormat("mxfp4", "MXFP4", 32, (_NIBBLES, Plane("e", "uint8", 32))),
        # FP8 E4M3 bytes and a float32 multiplier per 32 columns (checkpoints/fp8_weights.py).
        QuantFormat(
            "fp8_e4m3", "F8_E4M3", 32, (Plane("qs", "uint8", 1), Plane("s", "float32", 32))
        ),
    )
}
"""Formats the fused matmul implements, by name (the name the manifest records)."""

WIDENED = {"Q5_0": "q5_0_as_q8_0", "Q6_K": "q6_k_as_int8"}
"""Stored types that CPU builds keep in a wider format holding the same values.

Why: the CPU fused matmul streams weights at memory speed only where each value is a byte;
unpacking Q5_0's fifth bit or Q6_K's two high bits (a shift, a mask and an add per value
more than a 4-bit type) bound their products, which took 2.1x (Q5_0) and 1.6x (Q6_K) the
CPU time of the same values stored a byte each in a decode step of a Qwen2.5-0.5B Q4_K_M
file (docs/BENCHMARKS.md). The widened formats hold every value in a byte and keep the
scales as stored, so they give the same numbers at more bytes: Q5_0 in Q8_0's planes (d
times the int8 q - 16, read by the Q8_0 kernels, float and integer; 34 bytes per 32 values
instead of 22), Q6_K's q - 32 as int8 (1.07 bytes a value instead of 0.82). Nothing is
requantized. Q4_K stays packed: a byte a value (1.9x its bytes) gained 1.07x there."""

_BY_GGML_TYPE = {f.ggml_type: f for f in FORMATS.values() if f.name not in WIDENED.values()}
"""The format each stored type is kept in where it is not widened."""

SIXTEEN_BIT_TYPES = ("F16", "BF16")
"""Float types whose formats keep weights 16-bit and widen them in registers: worth it only
where the artifact's float dtype is wider (CPU fp32 artifacts), see `choose_formats`."""


def quant_format(name: str) -> QuantFormat:
    """The format called `name`; ValueError naming the supported ones."""
    try:
        return FORMATS[name]
    except KeyError:
        raise ValueError(
            f"unsupported weight format {name!r}; supported: {FLOAT}, " + ", ".join(FORMATS)
        ) from None


def check_weight_format_mode(mode: str) -> str:
    """`mode` if it is a known weight-format mode, else ValueError naming the accepted ones."""
    if mode not in WEIGHT_FORMAT_MODES:
        raise ValueError(
            f"unsupported weight format {mode!r}; supported: " + ", ".join(WEIGHT_FORMAT_MODES)
        )
    return mode


def choose_formats(
    weights: Mapping[str, tuple[Sequence[str], Sequence[int]]],
    tensor_types: Mapping[str, str],
    keep_16_bit: bool = False,
    splittable: Collection[str] = (),
    widen: Collection[str] = (),
) -> dict[str, str]:
    """Which weights stay quantized: parameter (or part) name -> format name.

    `weights` maps each parameter that may be quantized to (its checkpoint tensor names,
    its logical shape); `tensor_types` maps checkpoint tensor names to ggml type names. A
    weight stays quantized when all its tensors share one type that has a format here and
    its rows are whole blocks. A weight named in `splittable` whose tensors have several
    such types stays quantized in parts, one per run of sources of one type
    (checkpoints/fused_parts.py). Every other weight is left out (dequantized at load).
    F16 / BF16 weights stay 16-bit only with `keep_16_bit` (otherwise they are converted to
    the artifact's dtype at load, as float weights are). Stored types named in `widen` (keys
    of `WIDENED`) are kept in their wider format.
    """
    chosen = {}
    for name, (sources, shape) in weights.items():
        types = [tensor_types.get(source) for source in sources]
        runs = same_type_runs(types)
        if len(runs) > 1 and name not in splittable:
            continue
        formats = [_kept_format(types[first] or "", shape, keep_16_bit, widen) for first, _ in runs]
        if None in formats:
            continue
        if len(runs) == 1:
            chosen[name] = formats[0]
            continue
        for (first, stop), fmt in zip(runs, formats, strict=True):
            chosen[part_name(name, first, stop)] = fmt
    return chosen


def _kept_format(
    stored: str, shape: Sequence[int], keep_16_bit: bool, widen: Collection[str]
) -> str | None:
    """The format a weight of ggml type `stored` and `shape` is kept in; None: dequantized."""
    fmt = FORMATS[WIDENED[stored]] if stored in widen else _BY_GGML_TYPE.get(stored)
    if stored in SIXTEEN_BIT_TYPES and not keep_16_bit:
        return None
    if fmt is not None and int(shape[-1]) % fmt.block_size == 0:
        return fmt.name
    return None
