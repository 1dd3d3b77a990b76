"""The larger models of the CPU comparison: random F16 GGUFs, quantized by llama.cpp itself.

Why: a comparison on a 135M model says little about the sizes people run on a CPU, and no
checkpoint may be downloaded. Three shapes, written as plain llama-architecture files with
tied embeddings (speed does not depend on the weight values):
- `qwen2.5-0.5b`: Qwen2.5-0.5B's sizes (hidden 896, 24 layers, 14 query / 2 KV heads of 64,
  intermediate 4864, vocabulary 151936, RoPE theta 1e6) without its attention biases and
  with plain RoPE: the matmul and attention sizes are Qwen2.5-0.5B's, the layer structure
  the one both engines run for Llama.
- `llama-3.2-1b` (hidden 2048, 16 layers, 32 / 8 heads of 64, intermediate 8192) and
  `llama-3.2-3b` (hidden 3072, 28 layers, 24 / 8 heads of 128, intermediate 8192):
  vocabulary 128256, llama3 RoPE (theta 5e5, factor 32, its `rope_freqs` tensor), as
  published.
The Q8_0 and Q4_K_M files are made from a shape's F16 file by llama.cpp's own
`llama-quantize`, so both engines read the very same bytes: llama.cpp chooses each tensor's
type (in Q4_K_M, matrices whose rows are not a multiple of 256 values, e.g. every one
reading the 0.5B's 896-wide hidden state, fall back to Q5_0 or Q8_0), and `tensor_types`
records what each file holds, `matrix_formats` which of them our artifact keeps quantized.

A model key names a file: `TYPE` (F16 or a QUANT_TYPES name) for the 0.5B shape, the one
the comparison started with, or `SHAPE:TYPE` (`llama-3.2-1b:Q8_0`) for the others.
"""

from __future__ import annotations

import re
import subprocess
import sys
from collections import Counter
from dataclasses import replace
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent / "peers"))

from llama31_8b import LLAMA_31_8B, LlamaShape
from write_random_gguf import write_random_gguf

QWEN25_05B_SHAPE: LlamaShape = replace(
    LLAMA_31_8B,
    hidden_size=896,
    num_hidden_layers=24,
    num_attention_heads=14,
    num_key_value_heads=2,
    head_dim=64,
    intermediate_size=4864,
    vocab_size=151936,
    rope_theta=1_000_000.0,
    rms_norm_eps=1e-6,
    max_position_embeddings=32768,
)
"""Qwen2.5-0.5B's sizes (its llama3 rope fields are unused: the file has plain RoPE)."""

LLAMA32_1B_SHAPE: LlamaShape = replace(
    LLAMA_31_8B,
    hidden_size=2048,
    num_hidden_layers=16,
    num_attention_heads=32,
    num_key_value_heads=8,
    head_dim=64,
    intermediate_size=8192,
    vocab_size=128256,
    rope_theta=500_000.0,
    rope_factor=32.0,
    max_position_embeddings=131072,
)
"""Llama-3.2-1B's sizes."""

LLAMA32_3B_SHAPE: LlamaShape = replace(
    LLAMA32_1B_SHAPE, hidden_size=3072, num_hidden_layers=28, num_attention_heads=24, head_dim=128
)
"""Llama-3.2-3B's sizes."""

HALF_B = "qwen2.5-0.5b"
SHAPES: dict[str, tuple[LlamaShape, bool]] = {
    HALF_B: (QWEN25_05B_SHAPE, False),
    "llama-3.2-1b": (LLAMA32_1B_SHAPE, True),
    "llama-3.2-3b": (LLAMA32_3B_SHAPE, True),
}
"""Shape name -> (sizes, whether the file carries llama3's `rope_freqs`)."""

QUANT_TYPES = ("Q8_0", "Q4_K_M")
"""llama-quantize type names made from the F16 file, in order."""

F16 = "F16"


def split_model_key(key: str) -> tuple[str, str]:
    """(shape name, type) of a model key (`TYPE`: the 0.5B shape); ValueError naming the
    known shapes and types."""
    shape, _, kind = key.rpartition(":")
    shape = shape or HALF_B
    if shape not in SHAPES or (kind != F16 and kind not in QUANT_TYPES):
        raise ValueError(
            f"unknown model {key!r}; known shapes: {', '.join(SHAPES)}; types: {F16}, "
            + ", ".join(QUANT_TYPES)
        )
    return shape, kind


def model_path(cache: Path, kind: str, shape: str = HALF_B) -> Path:
    """Where the file of `shape` as `kind` (F16 or a QUANT_TYPES name) lives in the cache."""
    label = "qwen2.5-0.5b-shape" if shape == HALF_B else f"{shape}-shape"
    return cache / "models" / f"random-{label}-{kind.lower()}.gguf"


def prepare_models(cache: Path, bin_dir: Path, keys: tuple[str, ...]) -> dict[str, Path]:
    """The files of the model `keys`, written (F16) or quantized (by `llama-quantize`) when
    missing; returns key -> path."""
    paths = {}
    for key in keys:
        shape, kind = split_model_key(key)
        f16 = model_path(cache, F16, shape)
        if not f16.exists():
            sizes, rope_freqs = SHAPES[shape]
            f16.parent.mkdir(parents=True, exist_ok=True)
            write_random_gguf(
                f16,
                sizes,
                seed=0,
                name=f"random {shape} shape, llama layout (vllm-tvm peers)",
                tied_embeddings=True,
                rope_freqs=rope_freqs,
            )
        path = model_path(cache, kind, shape)
        if not path.exists():
            partial = path.with_name(path.name + ".partial")
            quantize = [str(bin_dir / "llama-quantize"), str(f16), str(partial), kind]
            subprocess.run(quantize, check=True, capture_output=True, text=True)
            partial.rename(path)
        paths[key] = path
    return paths


def tensor_types(path: Path) -> dict[str, int]:
    """How many 2-D tensors of each ggml type the file holds (norms, 1-D, left out)."""
    import gguf

    reader = gguf.GGUFReader(str(path))
    counts = Counter(t.tensor_type.name for t in reader.tensors if len(t.shape) == 2)
    return dict(sorted(counts.items()))


def matrix_formats(params: list[Any]) -> dict[str, list[str]]:
    """How our artifact stores each kind of matrix: the manifest's 2-D weights (its
    `ParamEntry`s, planes of one weight counted once) by role, layer number left out, mapped
    to the formats they have across layers (`float`: dequantized at load to the artifact's
    dtype; a block format: kept quantized, dequantized inside the matmul)."""
    roles: dict[str, set[str]] = {}
    for param in params:
        if len(param.shape) != 2:
            continue
        weight = param.name.removesuffix(f".{param.plane}") if param.plane else param.name
        role = re.sub(r"^model\.layers\.\d+\.", "", weight)
        roles.setdefault(role, set()).add(param.format)
    return {role: sorted(formats) for role, formats in sorted(roles.items())}
