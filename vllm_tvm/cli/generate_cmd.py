"""`vllm-tvm generate`: one-shot completion with the flags of the reference `vllm-cli`."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from vllm_tvm.cli.engine_args import add_engine_arguments, engine_args_from_cli
from vllm_tvm.cli.preflight import check_device, prepare_command_start, read_prompt
from vllm_tvm.cli.registry_args import registry_settings_from_cli
from vllm_tvm.cli.vllm_serve_flags import add_vllm_engine_flags
from vllm_tvm.entrypoints.resolve import resolve_engine
from vllm_tvm.runtime.multimodal.image_decoding import DecodedImage, decode_image
from vllm_tvm.runtime.multimodal.image_errors import ImageInputError
from vllm_tvm.runtime.sampling.params import SamplingParams, check_requested_max_tokens


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "generate",
        help="complete one prompt",
        description="Load (compiling on first use) a model and complete one prompt.",
    )
    parser.add_argument("--prompt", default=None, help="prompt text; - reads standard input")
    parser.add_argument(
        "--prompt-file", default=None, help="read the prompt from this file (UTF-8)"
    )
    parser.add_argument(
        "--max-tokens",
        type=int,
        default=16,
        help="max tokens to generate (at least 1)",
    )
    parser.add_argument(
        "--temperature", type=float, default=0.0, help="sampling temperature (<= 0 means greedy)"
    )
    parser.add_argument("--top-p", type=float, default=1.0, help="nucleus cutoff")
    parser.add_argument("--top-k", type=int, default=0, help="top-k (0 means all)")
    parser.add_argument(
        "--chat",
        action="store_true",
        help="send the prompt as one user message through the checkpoint's chat template",
    )
    parser.add_argument(
        "--image",
        action="append",
        default=[],
        metavar="FILE",
        help="an image for the prompt (repeatable; PNG, JPEG, WebP, GIF): with --chat each "
        "comes before the text in the user message, else the prompt holds one "
        "begin-of-image token per image; needs a model with a vision tower",
    )
    parser.add_argument("--stream", action="store_true", help="stream text to stdout")
    parser.add_argument(
        "--repeat",
        type=int,
        default=1,
        help="load once, run N completions, report warm decode tok/s",
    )
    add_engine_arguments(parser)
    parser.add_argument(
        "--json",
        action="store_true",
        help="print one JSON object with ids, text, finish reason, timings (not with --stream)",
    )
    add_vllm_engine_flags(parser)
    parser.set_defaults(run=run)


def _timings(metrics) -> dict[str, float]:
    return {
        "prefill_seconds": round(metrics.prefill_seconds, 6),
        "time_to_first_token_seconds": round(metrics.time_to_first_token, 6),
        "decode_seconds": round(metrics.decode_seconds, 6),
        "decode_tokens": metrics.decode_tokens,
        "decode_tokens_per_second": round(metrics.decode_tokens_per_second, 3),
    }


def _say_if_the_context_cut(prompt: int, generated: int, max_tokens: int, context: int) -> None:
    """Say on stderr when the context, not --max-tokens, ended the completion."""
    if generated < max_tokens and prompt + generated >= context:
        print(
            f"vllm-tvm generate: stopped after {generated} of --max-tokens {max_tokens} "
            f"tokens: the prompt's {prompt} tokens and {generated} generated fill the "
            f"context of {context} tokens (--max-model-len)",
            file=sys.stderr,
        )


def read_images(paths: list[str]) -> list[DecodedImage]:
    """The decoded images of --image files (checked before the model loads)."""
    images = []
    for index, path in enumerate(paths):
        try:
            data = Path(path).read_bytes()
        except OSError as err:
            raise ValueError(f"--image {path}: cannot read it ({err.strerror})") from err
        try:
            images.append(decode_image(data, index))
        except ImageInputError as err:
            raise ValueError(f"--image {path}: {err.reason}") from err
    return images


def run(args: argparse.Namespace) -> int:
    text = read_prompt(args.prompt, args.prompt_file)
    if args.repeat < 1:
        raise ValueError(f"--repeat must be >= 1, got {args.repeat}")
    check_requested_max_tokens(args.max_tokens)
    if args.stream and args.json:
        raise ValueError(
            "--stream and --json do not combine: --json prints one object once generation "
            "ends; drop one of them"
        )
    check_device(args.device)
    images = read_images(args.image)
    engine_args = resolve_engine(
        engine_args_from_cli(args, show_progress=not args.json),
        registry_settings_from_cli(args),
        before_load=prepare_command_start,
    )
    from vllm_tvm.entrypoints.llm import LLM

    params = SamplingParams(
        max_tokens=args.max_tokens,
        temperature=args.temperature,
        top_p=args.top_p,
        top_k=args.top_k,
        seed=args.seed,
    )
    llm = LLM.from_engine_args(engine_args)
    prompt: str | list[int] | dict[str, Any] = text
    if args.chat:
        image_parts = [{"type": "image_url", "image_url": {"url": ""}} for _ in images]
        content = [*image_parts, {"type": "text", "text": text}] if images else text
        prompt = llm.chat_prompt_ids([{"role": "user", "content": content}], images)
    if images:
        key = "prompt" if isinstance(prompt, str) else "prompt_token_ids"
        prompt = {key: prompt, "multi_modal_data": {"image": images}}
    context = llm.engine.max_model_len
    if args.stream:
        generated = 0
        for delta in llm.stream(prompt, params):
            generated += len(delta.outputs[0].token_ids)
            sys.stdout.write(delta.outputs[0].text)
            sys.stdout.flush()
        sys.stdout.write("\n")
        _say_if_the_context_cut(len(delta.prompt_token_ids), generated, args.max_tokens, context)
        return 0
    runs = [llm.generate(prompt, params)[0] for _ in range(args.repeat)]
    result = runs[-1]
    completion = result.outputs[0]
    prompt_tokens = len(result.prompt_token_ids)
    _say_if_the_context_cut(prompt_tokens, len(completion.token_ids), args.max_tokens, context)
    if args.json:
        warm = [run.metrics.decode_tokens_per_second for run in runs[1:]] or [
            result.metrics.decode_tokens_per_second
        ]
        print(
            json.dumps(
                {
                    "prompt_token_ids": result.prompt_token_ids,
                    "token_ids": completion.token_ids,
                    "text": completion.text,
                    "finish_reason": completion.finish_reason,
                    "timings": _timings(result.metrics),
                    "repeat": args.repeat,
                    "warm_decode_tokens_per_second": round(max(warm), 3),
                }
            )
        )
        return 0
    print(completion.text)
    if args.repeat > 1:
        rates = [run.metrics.decode_tokens_per_second for run in runs[1:]]
        print(
            f"warm decode: {max(rates):.2f} tok/s (best of {len(rates)} warm runs)", file=sys.stderr
        )
    return 0
