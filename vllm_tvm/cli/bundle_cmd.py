"""`vllm-tvm runtime-bundle DEST [--python 3.12]`: the runtime-only TVM for serving boxes.

A GPU serving machine needs TVM's runtime (~20 MB) but not its compiler (~260 MB); this
writes a site directory to put on PYTHONPATH there, next to the artifacts built here.
"""

from __future__ import annotations

import argparse
from pathlib import Path


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "runtime-bundle",
        help="write a runtime-only TVM site directory for a serving machine",
        description="Repack the installed TVM version without its compiler library.",
    )
    parser.add_argument("dest", type=Path, help="directory to create")
    parser.add_argument("--python", default="3.12", help="Python version of the serving box")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from vllm_tvm.artifacts.runtime_bundle import build_runtime_bundle

    bundle = build_runtime_bundle(args.dest, args.python)
    print(f"{bundle.path} ({bundle.size_bytes / 2**20:.1f} MiB, TVM {bundle.tvm_version})")
    return 0
