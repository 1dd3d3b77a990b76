"""`vllm-tvm release-archive BUNDLE --out DIR` and `vllm-tvm validate-release ARCHIVE`: the C
bundle as a verified release tarball (vllm_tvm/native_bundle/release_archive.py, release_check.py).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    make = subparsers.add_parser(
        "release-archive",
        help="pack a `vllm-tvm embed` folder as a release tarball with its sidecars",
        description="Write vllm-tvm-<version>-linux-<arch>-<lane>.tar.gz, .sha256 and "
        ".provenance.json from an embed bundle.",
    )
    make.add_argument("bundle", type=Path, help="a folder written by `vllm-tvm embed`")
    make.add_argument("--out", type=Path, required=True, help="directory for the archive")
    make.add_argument(
        "--model-license", default="NOASSERTION", help="the model's SPDX license identifier"
    )
    make.add_argument("--model-license-file", type=Path, default=None, help="its license text")
    make.set_defaults(run=run_make)
    check = subparsers.add_parser(
        "validate-release",
        help="check a release tarball, its sidecars and a fresh extraction of it",
        description="Print every deviation of a release archive; exit 1 when there is one.",
    )
    check.add_argument("archive", type=Path, help="vllm-tvm-*.tar.gz beside its sidecars")
    check.set_defaults(run=run_check)


def run_make(args: argparse.Namespace) -> int:
    from vllm_tvm.native_bundle.release_archive import write_release_archive

    if not (args.bundle / "lib" / "libvllm_tvm.so").is_file():
        raise FileNotFoundError(f"{args.bundle} is not a `vllm-tvm embed` folder")
    if args.model_license_file is not None and not args.model_license_file.is_file():
        raise FileNotFoundError(f"--model-license-file {args.model_license_file} does not exist")
    release = write_release_archive(
        args.bundle, args.out, args.model_license, args.model_license_file
    )
    for path in (release.archive, release.checksum, release.provenance):
        print(path)
    return 0


def run_check(args: argparse.Namespace) -> int:
    from vllm_tvm.native_bundle.release_check import validate_archive

    if not args.archive.is_file():
        raise FileNotFoundError(f"no archive at {args.archive}")
    report = validate_archive(args.archive)
    for problem in report.problems:
        print(f"vllm-tvm validate-release: {problem}", file=sys.stderr)
    if report.problems:
        return 1
    for check in report.skipped:
        print(f"{args.archive.name}: skipped {check}")
    print(f"{args.archive.name}: ok")
    return 0
