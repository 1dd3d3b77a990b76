"""Write a random-weight llama GGUF of a given shape, for llama.cpp's benchmarks.

Why: llama.cpp reads only GGUF, and no checkpoint may be downloaded. Speed does not depend on
the weight values, so every matrix is a view of one random F16 buffer (RAM stays at the size
of the largest matrix, ~1 GiB for the 8B shape, while the file is 16 GB). The file is what
`convert_hf_to_gguf.py` would write for Llama-3.1: llama architecture keys, F32 norms, F16
matrices, `rope_freqs.weight` carrying the llama3 rope scaling, and a BPE vocabulary that
llama.cpp accepts (256 byte tokens so "\\n" tokenizes, filler tokens, then the Llama-3 control
tokens at 128000+). F16, not BF16: it is the type llama.cpp's CUDA matmuls were measured with.

usage: python3 write_random_gguf.py OUT.gguf [--tiny] [--seed 0]
(needs the `gguf` package, e.g. PYTHONPATH=<llama.cpp>/gguf-py)
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time
from pathlib import Path

import numpy as np
from llama31_8b import LLAMA_31_8B, LlamaShape, tiny_shape

GGUF_FILE_TYPE_MOSTLY_F16 = 1
TOKEN_TYPE_NORMAL = 1
TOKEN_TYPE_CONTROL = 3
LLAMA3_FIRST_SPECIAL = 128000


def tensor_shapes(
    shape: LlamaShape, tied_embeddings: bool = False, rope_freqs: bool = True
) -> dict[str, tuple[int, ...]]:
    """GGUF tensor names of a llama model and their numpy shapes ([out, in] for matrices).

    GGUF stores dimensions reversed (ne[0] = in), which the gguf writer does itself. With
    `tied_embeddings` there is no `output.weight` (llama.cpp then reads `token_embd.weight`);
    without `rope_freqs` the file has plain RoPE (no llama3 scaling tensor).
    """
    h, kv = shape.hidden_size, shape.num_key_value_heads * shape.head_dim
    q = shape.num_attention_heads * shape.head_dim
    shapes: dict[str, tuple[int, ...]] = {"token_embd.weight": (shape.vocab_size, h)}
    if rope_freqs:
        shapes["rope_freqs.weight"] = (shape.head_dim // 2,)
    for i in range(shape.num_hidden_layers):
        shapes |= {
            f"blk.{i}.attn_norm.weight": (h,),
            f"blk.{i}.attn_q.weight": (q, h),
            f"blk.{i}.attn_k.weight": (kv, h),
            f"blk.{i}.attn_v.weight": (kv, h),
            f"blk.{i}.attn_output.weight": (h, q),
            f"blk.{i}.ffn_norm.weight": (h,),
            f"blk.{i}.ffn_gate.weight": (shape.intermediate_size, h),
            f"blk.{i}.ffn_up.weight": (shape.intermediate_size, h),
            f"blk.{i}.ffn_down.weight": (h, shape.intermediate_size),
        }
    shapes["output_norm.weight"] = (h,)
    if not tied_embeddings:
        shapes["output.weight"] = (shape.vocab_size, h)
    return shapes


def llama3_rope_factors(shape: LlamaShape) -> np.ndarray:
    """Per-frequency divisors of the llama3 rope scaling (what `rope_freqs.weight` holds).

    Frequencies with a wavelength shorter than original_context / high_freq_factor keep
    factor 1, longer than original_context / low_freq_factor get `rope_factor`, and the band
    between is interpolated smoothly in 1/factor.
    """
    dim = shape.head_dim
    inv_freq = 1.0 / shape.rope_theta ** (np.arange(0, dim, 2, dtype=np.float64) / dim)
    wavelen = 2 * math.pi / inv_freq
    old = shape.rope_original_max_position_embeddings
    low, high = shape.rope_low_freq_factor, shape.rope_high_freq_factor
    smooth = (old / wavelen - low) / (high - low)
    middle = 1.0 / ((1 - smooth) / shape.rope_factor + smooth)
    factors = np.where(
        wavelen < old / high, 1.0, np.where(wavelen > old / low, shape.rope_factor, middle)
    )
    return factors.astype(np.float32)


def byte_level_alphabet() -> list[str]:
    """The 256 characters GPT-2 style byte-level BPE uses for the bytes 0..255, in byte order."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1)]
    printable += range(ord("®"), ord("ÿ") + 1)
    chars, extra = {}, 0
    for b in range(256):
        if b in printable:
            chars[b] = chr(b)
        else:
            chars[b] = chr(256 + extra)
            extra += 1
    return [chars[b] for b in range(256)]


def minimal_vocab(vocab_size: int) -> tuple[list[str], list[int], list[str]]:
    """Tokens, token types and merges of a BPE vocabulary llama.cpp loads.

    Byte tokens 0..255, then unique fillers, then (when the vocabulary is Llama-3 sized)
    `<|begin_of_text|>`, `<|end_of_text|>` and reserved control tokens from id 128000.
    """
    alphabet = byte_level_alphabet()
    first_special = LLAMA3_FIRST_SPECIAL if vocab_size > LLAMA3_FIRST_SPECIAL else vocab_size - 2
    if first_special <= len(alphabet) + 1:
        raise ValueError(f"vocab_size {vocab_size} too small; need at least {len(alphabet) + 4}")
    space = alphabet[ord(" ")]
    tokens = [*alphabet, space * 2]
    tokens += [f"<filler_{i}>" for i in range(len(tokens), first_special)]
    specials = ["<|begin_of_text|>", "<|end_of_text|>"]
    specials += [f"<|reserved_special_token_{i}|>" for i in range(vocab_size - first_special - 2)]
    types = [TOKEN_TYPE_NORMAL] * len(tokens) + [TOKEN_TYPE_CONTROL] * len(specials)
    return tokens + specials, types, [f"{space} {space}"]


def partial_path(path: Path) -> Path:
    """Where the file is written until it is complete (then renamed to `path`)."""
    return path.with_name(path.name + ".partial")


def write_random_gguf(
    path: Path,
    shape: LlamaShape = LLAMA_31_8B,
    seed: int = 0,
    name: str = "random Llama-3.1-8B shape (vllm-tvm peers)",
    tied_embeddings: bool = False,
    rope_freqs: bool = True,
) -> dict:
    """Write the GGUF (atomically: `path` appears only once complete); `tied_embeddings` and
    `rope_freqs` as in `tensor_shapes`.

    Returns {"bytes", "tensors", "seconds"}.
    """
    import gguf

    start = time.perf_counter()
    shapes = tensor_shapes(shape, tied_embeddings, rope_freqs)
    largest = max(math.prod(s) for s in shapes.values())
    rng = np.random.default_rng(seed)
    pool = (rng.standard_normal(largest, dtype=np.float32) * 0.02).astype(np.float16)
    ones = np.ones(shape.hidden_size, dtype=np.float32)

    partial = partial_path(path)
    writer = gguf.GGUFWriter(str(partial), "llama")
    writer.add_name(name)
    writer.add_file_type(GGUF_FILE_TYPE_MOSTLY_F16)
    writer.add_context_length(shape.max_position_embeddings)
    writer.add_embedding_length(shape.hidden_size)
    writer.add_block_count(shape.num_hidden_layers)
    writer.add_feed_forward_length(shape.intermediate_size)
    writer.add_head_count(shape.num_attention_heads)
    writer.add_head_count_kv(shape.num_key_value_heads)
    writer.add_key_length(shape.head_dim)
    writer.add_value_length(shape.head_dim)
    writer.add_rope_dimension_count(shape.head_dim)
    writer.add_rope_freq_base(shape.rope_theta)
    writer.add_layer_norm_rms_eps(shape.rms_norm_eps)
    writer.add_vocab_size(shape.vocab_size)
    tokens, types, merges = minimal_vocab(shape.vocab_size)
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("llama-bpe")
    writer.add_token_list(tokens)
    writer.add_token_types(types)
    writer.add_token_merges(merges)
    writer.add_bos_token_id(tokens.index("<|begin_of_text|>"))
    writer.add_eos_token_id(tokens.index("<|end_of_text|>"))
    for name, dims in shapes.items():
        if name == "rope_freqs.weight":
            writer.add_tensor(name, llama3_rope_factors(shape))
        elif len(dims) == 1:
            writer.add_tensor(name, ones[: dims[0]])
        else:
            writer.add_tensor(name, pool[: math.prod(dims)].reshape(dims))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    os.replace(partial, path)
    return {
        "bytes": path.stat().st_size,
        "tensors": len(shapes),
        "seconds": time.perf_counter() - start,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--tiny", action="store_true", help="2-layer test shape (CPU checks)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    shape = tiny_shape() if args.tiny else LLAMA_31_8B
    info = write_random_gguf(args.out, shape, args.seed)
    print(
        f"wrote {args.out}: {info['bytes'] / 1e9:.2f} GB, {info['tensors']} tensors, "
        f"{info['seconds']:.1f} s",
        flush=True,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
