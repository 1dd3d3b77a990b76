"""`vllm-tvm publish MODEL --target T [--dtype D] [--weight-format F] [--name MODEL_ID]
--registry DIR --signing-key KEYFILE [--artifact DIR]`: compile (or take an artifact) and
add it with its checkpoint to a registry directory, re-signing the index."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from vllm_tvm.artifacts.compile_options import CompileOptions
from vllm_tvm.cli.common_args import add_dtype_argument, add_weight_format_argument


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "publish",
        help="add a compiled model to a signed registry directory",
        description="Compile MODEL for --target (or take --artifact, built on this machine) "
        "and add it with its checkpoint to the registry directory, replacing an entry built "
        "for the same target, dtype, weight format, TVM version and config; re-sign the index.",
    )
    parser.add_argument("model", help="HF model directory, .gguf file, or cached HF id")
    parser.add_argument("--target", default="llvm", help="compile target (as for compile)")
    add_dtype_argument(parser)
    add_weight_format_argument(parser)
    parser.add_argument("--name", default=None, help="model id (default: the model's name)")
    parser.add_argument("--registry", type=Path, required=True, help="registry directory")
    parser.add_argument("--signing-key", type=Path, required=True, help="private key (keygen)")
    parser.add_argument("--artifact", type=Path, default=None, help="publish this artifact")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from vllm_tvm.artifact_registry.publish import publish
    from vllm_tvm.checkpoints.model_reference import is_hf_model_id, resolve_model
    from vllm_tvm.compiler.build import compile_cached, make_request

    checkpoint = resolve_model(args.model)
    if args.name:
        model_id = args.name
    elif is_hf_model_id(args.model) and not Path(args.model).exists():
        model_id = args.model
    else:
        model_id = checkpoint.stem if checkpoint.is_file() else checkpoint.name
    request = make_request(CompileOptions(checkpoint, args.target, args.dtype, args.weight_format))
    if args.artifact is not None:
        check_artifact_fits(args.artifact, checkpoint, request.target.name)
    artifact = args.artifact or compile_cached(request)
    entry, replaced = publish(
        Path(artifact),
        checkpoint,
        model_id,
        args.registry,
        args.signing_key,
        target_features(request.target.name),
        args.weight_format,
    )
    action = "replaced" if replaced else "added"
    print(f"{action} {model_id}: {entry.describe()} in {args.registry} (index re-signed)")
    return 0


def check_artifact_fits(artifact: Path, checkpoint: Path, target_name: str) -> None:
    """Refuse an `--artifact` built for another target or from another model config than the
    checkpoint published with it (the entry would describe a build it is not)."""
    from vllm_tvm.artifacts.manifest import read_manifest
    from vllm_tvm.checkpoints.model_config import read_model_config
    from vllm_tvm.model_defs.architectures import family_for

    manifest = read_manifest(artifact, verify=True)
    config = read_model_config(checkpoint)
    # The context it was built for picks what depends on it (longrope's factor set).
    context = manifest.model_config.get("max_position_embeddings")
    config_hash = family_for(config).parse_config(config, context).fingerprint()
    if manifest.target != target_name:
        raise ValueError(
            f"--artifact {artifact} was built for target {manifest.target!r}, not {target_name!r}"
        )
    if manifest.config_hash != config_hash:
        raise ValueError(f"--artifact {artifact} was built from another model than {checkpoint}")


def target_features(target_name: str) -> dict[str, Any]:
    """What a machine needs to run an artifact of `target_name` built here: the GPU arch, or
    this CPU's name and instruction-set extensions."""
    from vllm_tvm.artifact_registry.machine import cpu_features
    from vllm_tvm.compiler.targets import resolve_target

    spec = resolve_target(target_name)
    if spec.fat_archs:
        return {"arch": spec.arch, "archs": list(spec.fat_archs), "ptx": spec.arch}
    if spec.kind == "cuda":
        return {"arch": spec.arch}
    return {**cpu_features(), "cpu": spec.resolved_config().get("mcpu")}
