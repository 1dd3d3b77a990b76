"""The 0.5B model of the CPU comparison: one random F16 GGUF, quantized by llama.cpp itself.

Why: a comparison on a 135M model says little about the sizes people run on a CPU, and no
checkpoint may be downloaded. The shape is Qwen2.5-0.5B's (hidden 896, 24 layers, 14 query /
2 KV heads of 64, intermediate 4864, vocabulary 151936, tied embeddings, RoPE theta 1e6)
written as a plain llama-architecture file (no attention biases): the matmul and attention
sizes are Qwen2.5-0.5B's, the layer structure is the one both engines run for Llama. Speed
does not depend on the weight values. The Q8_0 and Q4_K_M files are made from the F16 file
by llama.cpp's own `llama-quantize`, so both engines read the very same bytes: llama.cpp
chooses each tensor's type (in Q4_K_M, matrices whose rows are not a multiple of 256 values,
here every one reading the 896-wide hidden state, fall back to Q5_0 or Q8_0), and
`tensor_types` records what each file holds, `matrix_formats` which of them our artifact keeps
quantized (a fused projection is kept in blocks only when all its parts share one supported
type).
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

QUANT_TYPES = ("Q8_0", "Q4_K_M")
"""llama-quantize type names made from the F16 file, in order."""

F16 = "F16"


def model_path(cache: Path, kind: str) -> Path:
    """Where the 0.5B file of `kind` (F16 or a QUANT_TYPES name) lives in the cache."""
    return cache / "models" / f"random-qwen2.5-0.5b-shape-{kind.lower()}.gguf"


def prepare_models(cache: Path, bin_dir: Path, kinds: tuple[str, ...]) -> dict[str, Path]:
    """The 0.5B files of `kinds`, written (F16) or quantized (by `llama-quantize`) when
    missing; returns kind -> path."""
    f16 = model_path(cache, F16)
    if not f16.exists():
        f16.parent.mkdir(parents=True, exist_ok=True)
        write_random_gguf(
            f16,
            QWEN25_05B_SHAPE,
            seed=0,
            name="random Qwen2.5-0.5B shape, llama layout (vllm-tvm peers)",
            tied_embeddings=True,
            rope_freqs=False,
        )
    paths = {}
    for kind in kinds:
        if kind != F16 and kind not in QUANT_TYPES:
            raise ValueError(f"unknown 0.5B model kind {kind!r}; known: {F16}, {QUANT_TYPES}")
        path = model_path(cache, kind)
        if not path.exists():
            partial = path.with_name(path.name + ".partial")
            quantize = [str(bin_dir / "llama-quantize"), str(f16), str(partial), kind]
            subprocess.run(quantize, check=True, capture_output=True, text=True)
            partial.rename(path)
        paths[kind] = path
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
