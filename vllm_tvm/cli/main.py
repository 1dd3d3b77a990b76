"""`vllm-tvm` command line: one subcommand per module, errors printed as one clear line."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from vllm_tvm import __version__
from vllm_tvm.cli import (
    bench_cmd,
    bundle_cmd,
    compile_cmd,
    embed_cmd,
    generate_cmd,
    keygen_cmd,
    models_cmd,
    publish_cmd,
    pull_cmd,
    release_cmd,
    serve_cmd,
    tokenize_cmd,
)

SUBCOMMANDS = (
    compile_cmd,
    generate_cmd,
    serve_cmd,
    bench_cmd,
    tokenize_cmd,
    bundle_cmd,
    embed_cmd,
    release_cmd,
    keygen_cmd,
    publish_cmd,
    pull_cmd,
    models_cmd,
)


def build_parser() -> argparse.ArgumentParser:
    """The full parser (subcommands register their own flags)."""
    parser = argparse.ArgumentParser(
        prog="vllm-tvm",
        description="LLM inference with models compiled ahead of time by Apache TVM.",
    )
    parser.add_argument("--version", action="version", version=__version__)
    subparsers = parser.add_subparsers(dest="command", required=True)
    for module in SUBCOMMANDS:
        module.add_parser(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the console script."""
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.run(args) or 0)
    except (ValueError, FileNotFoundError, KeyError) as err:
        message = err.args[0] if isinstance(err, KeyError) and err.args else err
        print(f"vllm-tvm {args.command}: error: {message}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
