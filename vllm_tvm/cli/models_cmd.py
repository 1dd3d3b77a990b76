"""`vllm-tvm models list|rm MODEL_ID`: the pulled models in the local store."""

from __future__ import annotations

import argparse


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "models",
        help="list or remove pulled prebuilt models",
        description="Manage the models `vllm-tvm pull` placed in the cache.",
    )
    actions = parser.add_subparsers(dest="action", required=True)
    actions.add_parser("list", help="list the pulled models")
    remove = actions.add_parser("rm", help="remove every pulled entry of a model")
    remove.add_argument("model_id")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from vllm_tvm.artifact_registry.store import pulled_models, remove, store_root

    if args.action == "rm":
        for path in remove(args.model_id):
            print(f"removed {path}")
        return 0
    pulled = pulled_models()
    if not pulled:
        print(f"no pulled models in {store_root()}")
    for model in pulled:
        what = "artifact + checkpoint" if model.artifact_dir else "checkpoint only"
        size_mib = model.size_bytes() / (1 << 20)
        print(
            f"{model.model_id}\t{model.entry.describe()}\t{what}\t{size_mib:.1f} MiB\t"
            f"{model.origin.get('registry', '?')}\t{model.path}"
        )
    return 0
