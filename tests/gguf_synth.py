"""Test helpers that write tiny GGUF checkpoints the way llama.cpp's converter would.

Why this exists: the GGUF tests need files of every supported architecture and quant type
without downloading any model. The helpers start from a randomly initialised transformers
model (the ground truth), name tensors with the ``gguf`` package's own HF -> GGUF name map,
reorder llama Q/K rows as llama.cpp's converter does, and quantize with
``gguf.quants.quantize`` -- or, for the K-quants it cannot quantize, pack blocks from
chosen integers following ggml's block layouts, so the exact expected values are known
from the integers rather than from any dequantizer.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gguf
import numpy as np
import torch
from gguf import GGMLQuantizationType as Q

QK_K = 256


@dataclass
class SynthTensor:
    """One tensor to write: GGUF name, stored rows (floats or block bytes), quant type."""

    name: str
    data: np.ndarray
    qtype: Q


def llama_cpp_permute(rows: np.ndarray, n_head: int) -> np.ndarray:
    """Reorder Q/K rows as llama.cpp's converter does for the llama architecture.

    Within each head, row ``t * head_dim / 2 + j`` (HF, half-split rotary) moves to row
    ``2 j + t`` (ggml, interleaved rotary pairs). Works on float rows and on block bytes.
    """
    half = rows.shape[0] // n_head // 2
    return rows.reshape(n_head, 2, half, *rows.shape[1:]).swapaxes(1, 2).reshape(rows.shape)


def random_hf_model(model_cls: type, config: Any, seed: int = 0) -> dict[str, np.ndarray]:
    """State dict (numpy) of ``model_cls(config)`` with every parameter randomised.

    Norm weights and biases are randomised too, so that a mix-up between them shows.
    """
    torch.manual_seed(seed)
    model = model_cls(config)
    with torch.no_grad():
        for param in model.parameters():
            param.copy_(torch.randn_like(param) * 0.5)
    return {name: t.detach().numpy().copy() for name, t in model.state_dict().items()}


def model_arch(arch: str) -> gguf.MODEL_ARCH:
    """The ``gguf`` package's architecture enum of a ``general.architecture`` name."""
    return next(k for k, v in gguf.MODEL_ARCH_NAMES.items() if v == arch)


def gguf_name(hf_name: str, arch: gguf.MODEL_ARCH, n_layers: int) -> str:
    """GGUF name of an HF tensor per the ``gguf`` package's tensor name map."""
    base, suffix = hf_name.rsplit(".", 1)
    mapped = gguf.get_tensor_name_map(arch, n_layers).get_name(base)
    assert mapped is not None, hf_name
    return f"{mapped}.{suffix}"


def _f16(rng: np.random.Generator, shape: tuple[int, ...], scale: float) -> np.ndarray:
    return (rng.uniform(0.2, 1.0, shape) * scale).astype(np.float16)


@dataclass
class _BlocksWithMins:
    """Random super-blocks of a K-quant with a min per group (Q2_K, Q4_K, Q5_K): scale `d`
    and min scale `dmin` per block, a scale `sc` and min `mn` per group, the quants `q`,
    and their exact float32 values d * sc * q - dmin * mn."""

    d: np.ndarray
    dmin: np.ndarray
    sc: np.ndarray
    mn: np.ndarray
    q: np.ndarray
    values: np.ndarray


def _blocks_with_mins(
    rng: np.random.Generator, nb: int, d_scale: float, groups: int, scale_levels: int, levels: int
) -> _BlocksWithMins:
    """`nb` blocks of `groups` groups, scales and mins below `scale_levels`, quants below
    `levels` (drawn in this order: d, dmin, sc, mn, q)."""
    d, dmin = _f16(rng, (nb, 1), d_scale), _f16(rng, (nb, 1), d_scale)
    sc = rng.integers(0, scale_levels, (nb, groups))
    mn = rng.integers(0, scale_levels, (nb, groups))
    q = rng.integers(0, levels, (nb, QK_K))
    group = QK_K // groups
    values = _k_values(d, sc, q, group) - _k_values(dmin, mn, np.ones_like(q), group)
    return _BlocksWithMins(d, dmin, sc, mn, q, values)


def q4_k_rows(rng: np.random.Generator, rows: int, cols: int) -> tuple[np.ndarray, np.ndarray]:
    """Random Q4_K rows: (bytes [rows, 144 * cols / 256], exact float32 values)."""
    b = _blocks_with_mins(rng, rows * cols // QK_K, 0.01, groups=8, scale_levels=64, levels=16)
    blocks = np.concatenate(
        [b.d.view(np.uint8), b.dmin.view(np.uint8), _k_scales(b.sc, b.mn), _nibbles(b.q)], axis=1
    )
    return blocks.reshape(rows, -1), b.values.reshape(rows, cols)


def q5_k_rows(rng: np.random.Generator, rows: int, cols: int) -> tuple[np.ndarray, np.ndarray]:
    """Random Q5_K rows: (bytes [rows, 176 * cols / 256], exact float32 values)."""
    nb = rows * cols // QK_K
    b = _blocks_with_mins(rng, nb, 0.01, groups=8, scale_levels=64, levels=32)
    # qh[l] bit s is the fifth bit of element 32 s + l.
    high = (b.q >> 4).reshape(nb, 8, 32)
    qh = (high << np.arange(8)[None, :, None]).sum(axis=1).astype(np.uint8)
    scales = _k_scales(b.sc, b.mn)
    blocks = np.concatenate(
        [b.d.view(np.uint8), b.dmin.view(np.uint8), scales, qh, _nibbles(b.q & 15)], axis=1
    )
    return blocks.reshape(rows, -1), b.values.reshape(rows, cols)


def q6_k_rows(rng: np.random.Generator, rows: int, cols: int) -> tuple[np.ndarray, np.ndarray]:
    """Random Q6_K rows: (bytes [rows, 210 * cols / 256], exact float32 values)."""
    nb = rows * cols // QK_K
    d = _f16(rng, (nb, 1), 0.001)
    sc = rng.integers(-128, 128, (nb, 16))
    q = rng.integers(0, 64, (nb, QK_K))
    values = _k_values(d, sc, q - 32, 16)
    # Per 128-element half: four 32-element quarters a, b, c, e share 32 bytes of qh and
    # pair up in ql as (a | c << 4) and (b | e << 4).
    quarters = q.reshape(nb, 2, 4, 32)
    low, high = quarters & 15, quarters >> 4
    ql = np.concatenate([low[:, :, 0] | low[:, :, 2] << 4, low[:, :, 1] | low[:, :, 3] << 4], 2)
    qh = high[:, :, 0] | high[:, :, 1] << 2 | high[:, :, 2] << 4 | high[:, :, 3] << 6
    blocks = np.concatenate(
        [
            ql.reshape(nb, 128).astype(np.uint8),
            qh.reshape(nb, 64).astype(np.uint8),
            sc.astype(np.int8).view(np.uint8),
            d.view(np.uint8),
        ],
        axis=1,
    )
    return blocks.reshape(rows, -1), values.reshape(rows, cols)


def q2_k_rows(rng: np.random.Generator, rows: int, cols: int) -> tuple[np.ndarray, np.ndarray]:
    """Random Q2_K rows: (bytes [rows, 84 * cols / 256], exact float32 values)."""
    b = _blocks_with_mins(rng, rows * cols // QK_K, 0.2, groups=16, scale_levels=16, levels=4)
    scales = (b.sc | b.mn << 4).astype(np.uint8)
    blocks = np.concatenate(
        [scales, _crumbs(b.q), b.d.view(np.uint8), b.dmin.view(np.uint8)], axis=1
    )
    return blocks.reshape(rows, -1), b.values.reshape(rows, cols)


def q3_k_rows(rng: np.random.Generator, rows: int, cols: int) -> tuple[np.ndarray, np.ndarray]:
    """Random Q3_K rows: (bytes [rows, 110 * cols / 256], exact float32 values)."""
    nb = rows * cols // QK_K
    d = _f16(rng, (nb, 1), 0.08)
    sc = rng.integers(-32, 32, (nb, 16))
    q = rng.integers(-4, 4, (nb, QK_K))
    values = _k_values(d, sc, q, 16)
    # Stored: 2 low bits of q + 4 (as Q2_K's), and its third bit in hmask (bit s of byte l
    # for element 32 s + l); scales + 32 as 6 bits: low nibbles of scales i and i + 8 in
    # byte i, the top two bits of scale 4 m + k at bits 2 m of byte 8 + k.
    biased, scale_bits = q + 4, sc + 32
    high = (biased >> 2).reshape(nb, 8, 32)
    hmask = (high << np.arange(8)[None, :, None]).sum(axis=1)
    low = (scale_bits[:, :8] & 15) | (scale_bits[:, 8:] & 15) << 4
    top = (scale_bits >> 4).reshape(nb, 4, 4)
    top = (top << (2 * np.arange(4))[None, :, None]).sum(axis=1)
    blocks = np.concatenate(
        [
            hmask.astype(np.uint8),
            _crumbs(biased & 3),
            low.astype(np.uint8),
            top.astype(np.uint8),
            d.view(np.uint8),
        ],
        axis=1,
    )
    return blocks.reshape(rows, -1), values.reshape(rows, cols)


def _crumbs(q: np.ndarray) -> np.ndarray:
    """Pack 2-bit values: per 128 elements, byte l holds element 32 j + l at bits 2 j."""
    groups = q.reshape(q.shape[0], 2, 4, 32)
    packed = (groups << (2 * np.arange(4))[None, None, :, None]).sum(axis=2)
    return packed.reshape(q.shape[0], 64).astype(np.uint8)


def _k_values(d: np.ndarray, sc: np.ndarray, q: np.ndarray, group: int) -> np.ndarray:
    """``d * scale[group of element] * q`` in float32, in ggml's order of operations."""
    scaled = d.astype(np.float32) * sc.astype(np.float32)
    return np.repeat(scaled, group, axis=1) * q.astype(np.float32)


def _k_scales(sc: np.ndarray, mn: np.ndarray) -> np.ndarray:
    """Pack eight 6-bit scales and mins into ggml's 12-byte K-quant layout."""
    lo = sc[:, :4] | (sc[:, 4:] >> 4) << 6
    mid = mn[:, :4] | (mn[:, 4:] >> 4) << 6
    hi = (sc[:, 4:] & 15) | (mn[:, 4:] & 15) << 4
    return np.concatenate([lo, mid, hi], axis=1).astype(np.uint8)


def _nibbles(q: np.ndarray) -> np.ndarray:
    """Pack 4-bit values: per 64 elements, byte l = element l | element 32 + l << 4."""
    pairs = q.reshape(q.shape[0], 4, 2, 32)
    return (pairs[:, :, 0] | pairs[:, :, 1] << 4).reshape(q.shape[0], 128).astype(np.uint8)


K_QUANT_ROWS = {
    Q.Q2_K: q2_k_rows,
    Q.Q3_K: q3_k_rows,
    Q.Q4_K: q4_k_rows,
    Q.Q5_K: q5_k_rows,
    Q.Q6_K: q6_k_rows,
}


def encode(values: np.ndarray, qtype: Q, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Stored rows for an HF tensor in ``qtype`` and the values a loader must return.

    F32/F16/BF16/Q8_0/Q4_0/Q4_1 quantize ``values`` with ``gguf.quants.quantize`` (the
    expected result is then ``values`` up to quantization error); K-quants replace them by
    random blocks whose exact values are returned.
    """
    if qtype in K_QUANT_ROWS:
        return K_QUANT_ROWS[qtype](rng, values.shape[0], values.shape[-1])
    return gguf.quants.quantize(values.astype(np.float32), qtype), values


def write_gguf(path: Path, arch: str, metadata: dict[str, Any], tensors: list[SynthTensor]) -> Path:
    """Write a GGUF file with ``general.architecture = arch``, typed ``metadata`` and tensors.

    Metadata types follow llama.cpp: ints are uint32, floats float32, bools and strings as is.
    """
    writer = gguf.GGUFWriter(path, arch)
    for key, value in metadata.items():
        if isinstance(value, bool):
            writer.add_bool(key, value)
        elif isinstance(value, int):
            writer.add_uint32(key, value)
        elif isinstance(value, float):
            writer.add_float32(key, value)
        elif isinstance(value, str):
            writer.add_string(key, value)
        else:
            writer.add_array(key, value)
    for tensor in tensors:
        raw_dtype = None if tensor.qtype in (Q.F32, Q.F16) else tensor.qtype
        writer.add_tensor(tensor.name, tensor.data, raw_dtype=raw_dtype)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def model_metadata(arch: str, config: Any, name: str = "tiny") -> dict[str, Any]:
    """The llama.cpp hyper-parameter keys for an HF config of a llama-family model.

    Like llama.cpp's converter, the key/value head size is written only for configs that
    carry ``head_dim``.
    """
    head_dim = getattr(config, "head_dim", None)
    sizes = (
        {}
        if head_dim is None
        else {
            f"{arch}.attention.key_length": head_dim,
            f"{arch}.attention.value_length": head_dim,
            f"{arch}.rope.dimension_count": head_dim,
        }
    )
    return {
        **sizes,
        "general.name": name,
        f"{arch}.context_length": config.max_position_embeddings,
        f"{arch}.embedding_length": config.hidden_size,
        f"{arch}.block_count": config.num_hidden_layers,
        f"{arch}.feed_forward_length": config.intermediate_size,
        f"{arch}.attention.head_count": config.num_attention_heads,
        f"{arch}.attention.head_count_kv": config.num_key_value_heads,
        f"{arch}.rope.freq_base": float(config.rope_parameters["rope_theta"]),
        f"{arch}.attention.layer_norm_rms_epsilon": float(config.rms_norm_eps),
        f"{arch}.vocab_size": config.vocab_size,
        "tokenizer.ggml.bos_token_id": config.bos_token_id,
        "tokenizer.ggml.eos_token_id": config.eos_token_id,
    }


@dataclass
class Conversion:
    """A converted state dict: GGUF tensors, and per HF name the stored rows in HF order
    (what ``raw`` must return) and the values a correct loader must return."""

    tensors: list[SynthTensor]
    stored: dict[str, np.ndarray]
    expected: dict[str, np.ndarray]


def convert(
    state_dict: dict[str, np.ndarray],
    arch: str,
    config: Any,
    qtypes: dict[str, Q] | None = None,
    seed: int = 0,
) -> Conversion:
    """Convert an HF state dict to GGUF tensors like llama.cpp (a tied lm_head is dropped).

    ``qtypes`` picks the quant type per HF name (F32 by default; 1-D tensors stay F32).
    """
    rng = np.random.default_rng(seed)
    arch_enum = model_arch(arch)
    heads = {"q_proj": config.num_attention_heads, "k_proj": config.num_key_value_heads}
    out = Conversion([], {}, {})
    for hf_name, values in state_dict.items():
        if hf_name == "lm_head.weight" and config.tie_word_embeddings:
            continue
        qtype = (qtypes or {}).get(hf_name, Q.F32) if values.ndim > 1 else Q.F32
        stored, out.expected[hf_name] = encode(values, qtype, rng)
        out.stored[hf_name] = stored
        module = hf_name.split(".")[-2]
        if arch == "llama" and module in heads:
            stored = llama_cpp_permute(stored, heads[module])
        name = gguf_name(hf_name, arch_enum, config.num_hidden_layers)
        out.tensors.append(SynthTensor(name, stored, qtype))
    return out


def load_with_transformers(path: Path, **options: Any) -> tuple[Any, dict[str, np.ndarray], str]:
    """What transformers makes of a GGUF file: (config, float32 state dict, model class name);
    `options` go to `from_pretrained`."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(
        str(path.parent), gguf_file=path.name, dtype=torch.float32, **options
    )
    state = {name: t.detach().numpy() for name, t in model.state_dict().items()}
    return model.config, state, type(model).__name__
