"""`vllm-tvm bench`: engine throughput and latency at a sweep of concurrencies.

The flags of the reference harness `vllm-bench` (--model, --dataset-path, --num-prompts,
--input-len, --output-len, --concurrency, --max-num-batched-tokens, --num-blocks) with
vLLM's `--load-format dummy` for random weights. Prompts are tokenized before timing unless
VLLM_TVM_BENCH_PRETOKENIZE=0. Prints one table row per level as it completes and where the
JSON report and the plot went.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from vllm_tvm.benchmarking.config import (
    DEFAULT_CONCURRENCY,
    DEFAULT_INPUT_LEN,
    DEFAULT_OUTPUT_LEN,
    PRETOKENIZE_ENV,
    bench_engine_defaults,
)
from vllm_tvm.cli.engine_args import add_engine_arguments, engine_args_from_cli
from vllm_tvm.cli.preflight import prepare_command_start
from vllm_tvm.cli.registry_args import registry_settings_from_cli


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "bench",
        help="measure throughput and latency at several concurrencies",
        description="Run fixed-length requests through the engine with C in flight for each "
        "concurrency C; report tokens/s, TTFT, TPOT and ITL per level. Prompts are tokenized "
        f"before timing ({PRETOKENIZE_ENV}=0: sent as text, tokenized inside the timing). "
        "Engine flags left unset: --max-num-seqs is the largest C, --num-blocks holds every "
        "request of the largest level at full length, --seed is 0.",
    )
    add_engine_arguments(parser)
    parser.add_argument(
        "--concurrency",
        type=int,
        nargs="+",
        default=list(DEFAULT_CONCURRENCY),
        help="requests in flight, one level per value (default: "
        + " ".join(map(str, DEFAULT_CONCURRENCY))
        + ")",
    )
    parser.add_argument(
        "--num-prompts", type=int, default=None, help="requests per level (default: 2 x C)"
    )
    parser.add_argument(
        "--input-len",
        type=int,
        default=DEFAULT_INPUT_LEN,
        help=f"prompt tokens (default {DEFAULT_INPUT_LEN}; a dataset's prompts are cut to it)",
    )
    parser.add_argument(
        "--output-len",
        type=int,
        default=DEFAULT_OUTPUT_LEN,
        help=f"tokens generated per request, EOS ignored (default {DEFAULT_OUTPUT_LEN})",
    )
    parser.add_argument(
        "--dataset-path",
        type=Path,
        default=None,
        help="prompts from a text file (one per line) or JSONL ('prompt' or 'text'); "
        "default: random token ids",
    )
    parser.add_argument(
        "--temperature", type=float, default=0.0, help="sampling temperature (default 0: greedy)"
    )
    parser.add_argument("--output-json", type=Path, default=None, help="write the JSON report")
    parser.add_argument(
        "--plot", type=Path, default=None, help="write throughput/latency plots (PNG)"
    )
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from vllm_tvm.benchmarking import (
        BenchConfig,
        LevelMetrics,
        run_benchmark,
    )
    from vllm_tvm.benchmarking.plots import MissingPlotDependencyError, require_matplotlib
    from vllm_tvm.benchmarking.report import table_header, table_row

    if args.plot is not None:
        try:
            require_matplotlib()
        except MissingPlotDependencyError as err:
            raise ValueError(f"--plot: {err}") from err
    concurrency = tuple(args.concurrency)
    config = BenchConfig(
        engine=engine_args_from_cli(args, **bench_engine_defaults(concurrency)),
        concurrency=concurrency,
        input_len=args.input_len,
        output_len=args.output_len,
        num_prompts=args.num_prompts,
        dataset_path=args.dataset_path,
        temperature=args.temperature,
    )
    config.validate()
    print(
        f"bench {Path(config.engine.model).name} on {config.engine.device} "
        f"({config.engine.load_format} weights), "
        f"in {config.input_len} / out {config.output_len} tokens, {config.pretokenize_mode}",
        flush=True,
    )
    header_printed = False

    def print_level(level: LevelMetrics) -> None:
        nonlocal header_printed
        if not header_printed:
            print(table_header(), flush=True)
            header_printed = True
        print(table_row(level), flush=True)

    report = run_benchmark(
        config,
        on_level=print_level,
        registry=registry_settings_from_cli(args),
        before_load=prepare_command_start,
    )
    if args.output_json is not None:
        print(f"JSON report: {report.write_json(args.output_json)}")
    if args.plot is not None:
        from vllm_tvm.benchmarking.plots import write_plot

        print(f"plot: {write_plot(report, args.plot)}")
    return 0
