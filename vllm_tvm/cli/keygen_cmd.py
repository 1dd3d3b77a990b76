"""`vllm-tvm keygen KEYFILE`: a new ed25519 signing key for `publish`."""

from __future__ import annotations

import argparse
from pathlib import Path


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "keygen",
        help="make an ed25519 key pair for signing a registry",
        description="Write a new private key to KEYFILE (mode 600) and its public key to "
        "KEYFILE.pub (give the .pub to pullers as --trusted-key). Never overwrites a key.",
    )
    parser.add_argument("keyfile", type=Path, help="where the private key goes")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from vllm_tvm.artifact_registry.signing import generate_keypair

    public = generate_keypair(args.keyfile)
    print(f"private key: {args.keyfile}\npublic key: {public}")
    return 0
