"""`vllm-tvm tokenize TOKENIZER_OR_GGUF CORPUS`: print the token ids of a text file.

A smoke tool for tokenizer work: it loads a tokenizer exactly as the runtime does (an HF
directory or tokenizer.json, a SentencePiece tokenizer.model directory, or a .gguf file) and
prints one line of space-separated ids per input line (or one line for the whole file).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "tokenize",
        help="print the token ids of a text file",
        description="Tokenize CORPUS with the tokenizer of a model directory, file or GGUF.",
    )
    parser.add_argument("tokenizer", help="tokenizer.json, model directory or .gguf file")
    parser.add_argument("corpus", type=Path, help="UTF-8 text file ('-' for standard input)")
    parser.add_argument(
        "--per-line", action="store_true", help="one output line of ids per input line"
    )
    parser.add_argument(
        "--no-special-tokens",
        action="store_true",
        help="do not add BOS/EOS the way the checkpoint asks",
    )
    parser.add_argument("--json", action="store_true", help="print a JSON list of id lists")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from vllm_tvm.runtime.tokenization import load_tokenizer

    tokenizer = load_tokenizer(args.tokenizer)
    if str(args.corpus) == "-":
        text = sys.stdin.read()
    elif not args.corpus.is_file():
        raise FileNotFoundError(f"corpus file {args.corpus} does not exist")
    else:
        text = args.corpus.read_text(encoding="utf-8")
    pieces = text.splitlines() if args.per_line else [text]
    ids = [
        tokenizer.encode(piece, add_special_tokens=not args.no_special_tokens) for piece in pieces
    ]
    if args.json:
        print(json.dumps(ids))
    else:
        for row in ids:
            print(" ".join(str(token) for token in row))
    return 0
