"""`vllm-tvm pull MODEL_ID [--registry URL_OR_DIR] [--target auto] [--trusted-key
KEYFILE.pub]`: fetch the prebuilt artifact that fits this machine, verified, into the cache."""

from __future__ import annotations

import argparse

from vllm_tvm.artifacts.compile_options import CompileOptions
from vllm_tvm.cli.common_args import add_dtype_argument, add_weight_format_argument
from vllm_tvm.cli.registry_args import add_registry_arguments, registry_settings_from_cli

TARGET_KINDS = ("auto", "llvm", "cuda")


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "pull",
        help="download a prebuilt artifact and its checkpoint, verified",
        description="Pick the registry's artifact of MODEL_ID that fits this machine (or say "
        "which exist and why none fits), download it and its checkpoint in parallel with "
        "resume, check the index signature and every sha256 before anything is loaded, and "
        "place it in the cache. --offline answers from the cache.",
    )
    parser.add_argument("model_id")
    parser.add_argument(
        "--target",
        choices=TARGET_KINDS,
        default="auto",
        help="target kind to fit (auto: cuda when a GPU answers, else llvm)",
    )
    add_dtype_argument(parser)
    add_weight_format_argument(parser)
    add_registry_arguments(parser)
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from vllm_tvm.artifact_registry.index import RegistryError
    from vllm_tvm.artifact_registry.machine import auto_target_kind, this_machine
    from vllm_tvm.artifact_registry.pull import choose_entry, pull_entry, pulled_fit, tqdm_progress
    from vllm_tvm.artifact_registry.resolve import signed_index

    settings = registry_settings_from_cli(args)
    kind = auto_target_kind() if args.target == "auto" else args.target
    machine = this_machine(kind)
    options = CompileOptions(args.model_id, kind, args.dtype, args.weight_format)
    if settings.offline:
        found, reasons = pulled_fit(args.model_id, machine, options)
        if found is None:
            detail = "".join(f"\n  {r}" for r in reasons)
            raise RegistryError(f"offline: no pulled artifact of {args.model_id!r} fits{detail}")
    else:
        signed = signed_index(settings)
        entry = choose_entry(signed, args.model_id, machine, options)
        found = pull_entry(signed, args.model_id, entry, tqdm_progress(True))
        print(f"{args.model_id}: {entry.describe()} ({signed.trust})")
    print(f"artifact: {found.artifact_dir}\ncheckpoint: {found.checkpoint_path}")
    return 0
