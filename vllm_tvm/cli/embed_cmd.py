"""`vllm-tvm embed DEST [--model MODEL] [--target TARGET]`: the model inside a C program.

Writes a self-contained folder (vllm_tvm/native_bundle/bundle.py) with the C library, a C CLI and
the compiled model; without --model it embeds the default model.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    from vllm_tvm.native_bundle.targets import EMBED_TARGETS, HOST_TARGET

    parser = subparsers.add_parser(
        "embed",
        help="write a folder that runs the model from C with no Python",
        description="Bundle libvllm_tvm, bin/vllm-tvm-cli and the compiled model.",
    )
    parser.add_argument("dest", type=Path, help="directory to create")
    parser.add_argument("--model", default=None, help="checkpoint (default: the default model)")
    parser.add_argument("--target", default=HOST_TARGET, choices=EMBED_TARGETS)
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from vllm_tvm.checkpoints.default_model import default_model_path
    from vllm_tvm.checkpoints.model_reference import resolve_model
    from vllm_tvm.native_bundle.bundle import write_embedding_bundle

    model = resolve_model(args.model) if args.model else default_model_path()
    try:
        bundle = write_embedding_bundle(args.dest, model, args.target)
    except (NotImplementedError, RuntimeError) as err:  # a missing toolchain, a failed build
        print(f"vllm-tvm embed: error: {err}", file=sys.stderr)
        return 1
    print(f"{bundle.path} ({bundle.size_bytes / 2**20:.1f} MiB)")
    return 0
