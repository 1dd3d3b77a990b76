"""Command-line options that several `vllm-tvm` subcommands share: one flag for each compile
option (artifacts/compile_options.py), with its default read from there.

Why it exists: `compile`, `generate`, `serve` and `bench` all choose how the model is built
(dtype, how GGUF weights are kept, quantization, kernels, split, context), and the flags must
read and behave the same in each of them (`add_compile_arguments`).
"""

from __future__ import annotations

import argparse

from vllm_tvm.artifacts.backends import ATTENTION_BACKENDS
from vllm_tvm.artifacts.compile_options import (
    CPU_INT8_ACTIVATION_CHOICES,
    GEMM_CHOICES,
    option_default,
)
from vllm_tvm.checkpoints.group_quantization import QUANTIZATION_METHODS
from vllm_tvm.checkpoints.weight_formats import WEIGHT_FORMAT_MODES


def add_compile_arguments(parser: argparse.ArgumentParser) -> None:
    """Add a flag for every compile option but the model and the target."""
    add_dtype_argument(parser)
    add_weight_format_argument(parser)
    add_quantization_argument(parser)
    add_gemm_argument(parser)
    add_attention_argument(parser)
    add_cpu_int8_activations_argument(parser)
    add_owned_kv_argument(parser)
    add_tensor_parallel_argument(parser)
    add_max_model_len_argument(parser)


def add_dtype_argument(parser: argparse.ArgumentParser) -> None:
    """Add `--dtype` (the engine's default, `auto`: the checkpoint's own dtype)."""
    parser.add_argument(
        "--dtype",
        default=option_default("dtype"),
        help="auto (the checkpoint's), float32, float16, bfloat16",
    )


def add_weight_format_argument(parser: argparse.ArgumentParser) -> None:
    """Add `--weight-format`, one of `WEIGHT_FORMAT_MODES` (the engine's default, `native`)."""
    parser.add_argument(
        "--weight-format",
        choices=WEIGHT_FORMAT_MODES,
        default=option_default("weight_format"),
        help="native: keep GGUF Q8_0/Q4_0/Q4_1/Q5_0/Q5_1/Q2_K/Q3_K/Q4_K/Q5_K/Q6_K weights "
        "quantized on the device (dequantized inside the matmul), and F16/BF16 weights 16-bit "
        "in fp32 CPU artifacts; dequantized: dequantize every weight at load",
    )


def add_quantization_argument(parser: argparse.ArgumentParser) -> None:
    """Add `--quantization` (vLLM's name; default none: weights as the checkpoint stores them)."""
    parser.add_argument(
        "--quantization",
        "-q",
        choices=tuple(QUANTIZATION_METHODS),
        default=option_default("quantization"),
        help="quantize a float checkpoint's weights in groups of 32 when they load: q8_0, "
        "q4_0 (symmetric) or q4_1 (with a min); the matmuls dequantize inside the kernel",
    )


def add_tensor_parallel_argument(parser: argparse.ArgumentParser) -> None:
    """Add `--tensor-parallel-size` / `-tp` (vLLM's names; default 1: one device)."""
    parser.add_argument(
        "--tensor-parallel-size",
        "-tp",
        type=int,
        default=option_default("tensor_parallel_size"),
        help="split a Llama-family model over this many ranks (CPU: threads of one process; "
        "CUDA: GPUs, needs TVM's NCCL binding) (default 1)",
    )


def add_max_model_len_argument(parser: argparse.ArgumentParser) -> None:
    """Add `--max-model-len` (vLLM's name; unset or 0: the model's context). It is also a
    compile option: it picks a longrope model's factor set (model_defs/rope_scaling.py)."""
    parser.add_argument(
        "--max-model-len",
        type=int,
        default=None,
        help="max sequence length (unset or 0: the model's, fitted); past a longrope model's "
        "original_max_position_embeddings its long factors are compiled in",
    )


def add_gemm_argument(parser: argparse.ArgumentParser) -> None:
    """Add `--gemm` (default `auto`: cuBLASLt for 16-bit floats on CUDA, TIR elsewhere)."""
    parser.add_argument(
        "--gemm",
        choices=GEMM_CHOICES,
        default=option_default("gemm"),
        help="matmuls with a run-time row count (prefill, batched decode): cublaslt (CUDA, "
        "float16/bfloat16) or tir (TVM kernels only); auto picks cublaslt where it applies",
    )


def add_attention_argument(parser: argparse.ArgumentParser) -> None:
    """Add `--attention` (default `tir`; `flashinfer` needs its JIT installed)."""
    parser.add_argument(
        "--attention",
        choices=ATTENTION_BACKENDS,
        default=option_default("attention"),
        help="paged-attention kernels: tir (TVM's, no extra packages) or flashinfer (CUDA, "
        "float16/bfloat16; compiled ahead of time, see scripts/install_flashinfer.sh)",
    )


def add_owned_kv_argument(parser: argparse.ArgumentParser) -> None:
    """Add `--owned-kv` / `--no-owned-kv` (default off: TVM's paged KV cache)."""
    parser.add_argument(
        "--owned-kv",
        action=argparse.BooleanOptionalAction,
        default=option_default("owned_kv"),
        help="also build the model's forwards over KV pages the runtime owns (a decode step "
        "captured whole as one CUDA graph per batch bucket) and run them in place of TVM's "
        "KV cache; Llama-family full-attention models (default off)",
    )


def add_cpu_int8_activations_argument(parser: argparse.ArgumentParser) -> None:
    """Add `--cpu-int8-activations` (default `off`: the float path)."""
    parser.add_argument(
        "--cpu-int8-activations",
        choices=CPU_INT8_ACTIVATION_CHOICES,
        default=option_default("cpu_int8_activations"),
        help="CPU builds: multiply Q8_0/Q4_x/Q5_x weights by activations quantized to int8 per "
        "block of 32 with integer dot products (AVX-512 VNNI, AVX-VNNI, AVX2), as llama.cpp "
        "does (logits differ from the float path by the activations' rounding); auto: on "
        "where the target has the instructions and the model such weights; off: float path "
        "(default off)",
    )
