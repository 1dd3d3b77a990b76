"""The registry flags of `pull` and of every engine-running subcommand, and the settings they
make.

Why shared: `pull MODEL_ID` and `generate/serve/bench --model MODEL_ID` reach the same
registry with the same trust rules, so the flags are declared once; each one left unset
falls back to its environment variable (artifact_registry/resolve.py).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from vllm_tvm.artifact_registry.resolve import REGISTRY_ENV, RegistrySettings


def add_registry_arguments(parser: argparse.ArgumentParser) -> None:
    """Add `--registry`, `--trusted-key` (repeatable), `--allow-unsigned`, `--offline`."""
    parser.add_argument(
        "--registry",
        default=None,
        help="prebuilt-artifact registry: a directory, an http(s):// base URL or hf://org/name "
        f"(default ${REGISTRY_ENV})",
    )
    parser.add_argument(
        "--trusted-key",
        dest="trusted_keys",
        type=Path,
        action="append",
        default=[],
        help="public key (KEYFILE.pub) the registry index must be signed with; repeatable",
    )
    parser.add_argument(
        "--allow-unsigned",
        action="store_true",
        help="accept a registry index without a valid signature (files are still checked)",
    )
    parser.add_argument("--offline", action="store_true", help="use pulled models only; no network")


def registry_settings_from_cli(namespace: argparse.Namespace) -> RegistrySettings:
    """The settings the flags give, the environment filling the rest."""
    return RegistrySettings.from_env(
        registry=getattr(namespace, "registry", None),
        trusted_keys=tuple(getattr(namespace, "trusted_keys", None) or ()),
        allow_unsigned=getattr(namespace, "allow_unsigned", False),
        offline=getattr(namespace, "offline", False),
    )
