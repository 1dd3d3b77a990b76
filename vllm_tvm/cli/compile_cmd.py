"""`vllm-tvm compile MODEL --target T [--dtype D] [--output DIR]`: build an artifact."""

from __future__ import annotations

import argparse
from pathlib import Path

from vllm_tvm.artifacts.compile_options import CompileOptions
from vllm_tvm.cli.common_args import add_compile_arguments
from vllm_tvm.compiler.targets import CUDA_ARCHS, DEFAULT_CUDA_ARCH, FAT_CUDA_ALL


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "compile",
        help="compile a model into an artifact (library + manifest)",
        description="Compile a checkpoint (HF directory or .gguf) for one target.",
    )
    parser.add_argument("model", help="HF model directory or .gguf file")
    parser.add_argument(
        "--target",
        default="llvm",
        help=(
            f"llvm (this CPU), cuda (= cuda:{DEFAULT_CUDA_ARCH}), cuda:{'|'.join(CUDA_ARCHS)}, "
            f"or one fat library: {FAT_CUDA_ALL} or a list (cuda:sm_80,sm_86,sm_90a)"
        ),
    )
    add_compile_arguments(parser)
    parser.add_argument(
        "--output",
        type=Path,
        default=None,
        help="artifact directory (default: the content-addressed cache)",
    )
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from vllm_tvm.compiler.build import compile_cached, compile_model, make_request

    options = CompileOptions(
        args.model,
        args.target,
        args.dtype,
        args.weight_format,
        args.gemm,
        args.attention,
        args.quantization,
        args.tensor_parallel_size,
        args.max_model_len or None,
        cpu_int8_activations=args.cpu_int8_activations,
        owned_kv=args.owned_kv,
    )
    request = make_request(options)
    if args.output is None:
        artifact = compile_cached(request)
    else:
        artifact = compile_model(request, args.output)
    print(artifact)
    return 0
