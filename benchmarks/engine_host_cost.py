"""The engine's host cost per decode step, measured with a null model runner (no TVM).

Why it exists: on a GPU the forward of a decode step takes a few milliseconds; the Python the
engine runs around it (scheduling, batch preparation, sampling dispatch, output processing)
adds to every step and, at large batches, can cost as much as a small model's forward. This
script isolates that host cost: a runner with the `ModelRunner` interface returns fixed
logits instantly, and its "device" argmax is a numpy argmax over them (timed on its own and
left out of the host cost, as the GPU would do that work).

Each configuration admits `sequences` greedy requests (token-id prompts, no tokenizer, so no
detokenization), runs their prefills, then times `steps` pure-decode steps. Phases are timed
by wrapping the engine's collaborators: scheduling (`Scheduler.schedule`), batch preparation
(`prepare_batch`), sampling dispatch (`SamplingDispatch.sample`, less the device stand-in) and
output processing, the rest of the step (appending tokens, stop checks, metrics, request
outputs). `host_total` is the step less the null forward and the device stand-in. The CPU is
shared, so each configuration runs `repeats` times and the least disturbed run is kept.

usage:  PYTHONPATH=. python benchmarks/engine_host_cost.py [--sequences 64 256]
        [--vocab 32000] [--steps 300] [--repeats 3] [--output-kinds delta final_only]
        [--device-argmax every-step once] [--label TEXT]
        [--out benchmarks/results/engine_host_cost_DATE.json]
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any, get_args

import numpy as np

from vllm_tvm.artifacts.runtime_spec import RuntimeSpec
from vllm_tvm.runtime.engine import llm_engine
from vllm_tvm.runtime.engine.args import default_of
from vllm_tvm.runtime.engine.llm_engine import LLMEngine
from vllm_tvm.runtime.engine.scheduler import SchedulerConfig
from vllm_tvm.runtime.kv.cache_config import CacheConfig
from vllm_tvm.runtime.kv.kv_cache import KVCacheConfig
from vllm_tvm.runtime.requests.sequence import OutputKind
from vllm_tvm.runtime.sampling.device_logits import DeviceLogits
from vllm_tvm.runtime.sampling.params import SamplingParams

PROMPT_TOKENS = 128
BLOCK_SIZE = 32
WARMUP_STEPS = 20


class HostArray:
    """Stands for a device tensor: a numpy array with the `.shape` / `.numpy()` a TVM tensor
    offers."""

    def __init__(self, array: np.ndarray) -> None:
        self.array = array
        self.shape = array.shape

    def numpy(self) -> np.ndarray:
        """The array itself (a real device tensor would copy it)."""
        return self.array


class NullKVCache:
    """The `PagedKVCache` calls the block manager makes, as bookkeeping of lengths only."""

    def __init__(self) -> None:
        self.lengths: dict[int, int] = {}

    def add_sequence(self, seq_id: int) -> None:
        self.lengths[seq_id] = 0

    def remove_sequence(self, seq_id: int) -> None:
        del self.lengths[seq_id]

    def fork_sequence(self, parent_id: int, child_id: int, fork_pos: int = -1) -> None:
        self.lengths[child_id] = self.lengths[parent_id] if fork_pos < 0 else fork_pos

    def popn(self, seq_id: int, count: int) -> None:
        self.lengths[seq_id] -= count

    def sequence_length(self, seq_id: int) -> int:
        return self.lengths[seq_id]

    def forward(self, seq_ids: Sequence[int], lengths: Sequence[int]) -> None:
        """What `begin_forward`/`end_forward` of one forward leave behind."""
        for seq_id, length in zip(seq_ids, lengths, strict=True):
            self.lengths[seq_id] += length


class NullRunner:
    """A `ModelRunner` whose forwards return fixed random logits at once; `device_seconds`
    accumulates the numpy argmax that stands for the compiled device argmax."""

    def __init__(
        self, vocab_size: int, max_rows: int, kv_config: KVCacheConfig, argmax_once: bool
    ) -> None:
        """`argmax_once`: reduce the logits of each batch size once and reuse the tokens, so
        the host's caches are not swept by a 32 MB argmax a GPU would do instead."""
        self.argmax_once = argmax_once
        self._argmax_once: dict[int, np.ndarray] = {}
        self.vocab_size = vocab_size
        self.spec = RuntimeSpec(vocab_size, 1, 1, kv_config.max_total_seq_len, attention=())
        self.kv_config = kv_config
        self.kv_cache = NullKVCache()
        self.logits = np.random.default_rng(0).standard_normal((max_rows, vocab_size), np.float32)
        self.device_seconds = 0.0
        self.forwards = 0

    def _argmax(self, tensor: HostArray) -> HostArray:
        start = time.perf_counter()
        rows = tensor.shape[0]
        tokens = self._argmax_once.get(rows) if self.argmax_once else None
        if tokens is None:
            tokens = self._argmax_once[rows] = tensor.array.argmax(axis=1).astype(np.int32)
        self.device_seconds += time.perf_counter() - start
        return HostArray(tokens)

    def _logits(self, rows: int) -> DeviceLogits:
        self.forwards += 1
        return DeviceLogits(HostArray(self.logits[:rows]), self._argmax, None, HostArray)

    def prefill_logits(
        self,
        seq_ids: Sequence[int],
        chunks: Sequence[Sequence[int]],
        logit_positions: Sequence[int] | None = None,
    ) -> DeviceLogits:
        self.kv_cache.forward(seq_ids, [len(chunk) for chunk in chunks])
        return self._logits(len(chunks) if logit_positions is None else len(logit_positions))

    def decode_logits(self, seq_ids: Sequence[int], token_ids: Sequence[int]) -> DeviceLogits:
        self.kv_cache.forward(seq_ids, [1] * len(seq_ids))
        return self._logits(len(seq_ids))


class PhaseClock:
    """Seconds spent in each wrapped callable during the current step."""

    def __init__(self) -> None:
        self.current: dict[str, float] = {}

    def wrap(self, name: str, function: Callable[..., Any]) -> Callable[..., Any]:
        def timed(*args: Any, **kwargs: Any) -> Any:
            start = time.perf_counter()
            try:
                return function(*args, **kwargs)
            finally:
                self.current[name] = self.current.get(name, 0.0) + time.perf_counter() - start

        return timed


@contextmanager
def patched(owner: Any, name: str, clock: PhaseClock, phase: str) -> Iterator[None]:
    """Time `owner.name` as `phase` while the block runs. An engine without it (one from
    before the engine was split by job, measured for comparison) leaves the phase's time in
    `output_processing`."""
    original = getattr(owner, name, None)
    if original is None:
        yield
        return
    setattr(owner, name, clock.wrap(phase, original))
    try:
        yield
    finally:
        setattr(owner, name, original)


def build_engine(
    sequences: int, vocab: int, steps: int, argmax_once: bool
) -> tuple[LLMEngine, NullRunner]:
    """An engine over a null runner with room for `sequences` requests of `steps` tokens."""
    max_len = PROMPT_TOKENS + WARMUP_STEPS + steps + 8
    blocks_per_seq = -(-max_len // BLOCK_SIZE)
    batched_tokens = 4096
    kv = KVCacheConfig(
        max_batch_size=sequences,
        max_total_seq_len=sequences * blocks_per_seq * BLOCK_SIZE,
        prefill_chunk_size=batched_tokens,
    )
    runner = NullRunner(vocab, max(sequences, batched_tokens), kv, argmax_once)
    engine = LLMEngine(
        runner,  # type: ignore[arg-type]  # the runner's interface, not its class
        tokenizer=None,
        eos_token_ids=[2],
        cache_config=CacheConfig(
            block_size=BLOCK_SIZE,
            num_blocks=sequences * blocks_per_seq,
            enable_prefix_caching=default_of("enable_prefix_caching"),
        ),
        scheduler_config=SchedulerConfig(
            max_num_seqs=sequences,
            max_num_batched_tokens=batched_tokens,
            policy=default_of("scheduling_policy"),
        ),
        max_model_len=max_len,
    )
    return engine, runner


def measure(
    sequences: int, vocab: int, steps: int, output_kind: OutputKind, argmax_once: bool
) -> dict[str, Any]:
    """Per-phase medians (ms) over `steps` decode steps of `sequences` running requests."""
    engine, runner = build_engine(sequences, vocab, steps, argmax_once)
    engine_sampling = getattr(engine, "sampling", None)
    params = SamplingParams(temperature=0.0, max_tokens=steps + WARMUP_STEPS + 4, ignore_eos=True)
    rng = np.random.default_rng(1)
    for index in range(sequences):
        prompt = rng.integers(3, vocab, PROMPT_TOKENS).tolist()
        engine.add_request(str(index), prompt, params, output_kind=output_kind)
    for _ in range(WARMUP_STEPS):  # prefills, then a few decode steps
        engine.step()
    assert len(engine.scheduler.running) == sequences and not engine.scheduler.waiting

    clock = PhaseClock()
    phases: dict[str, list[float]] = {}
    with ExitStack() as stack:
        stack.enter_context(patched(engine.scheduler, "schedule", clock, "scheduling"))
        stack.enter_context(patched(llm_engine, "prepare_batch", clock, "batch_preparation"))
        stack.enter_context(patched(runner, "decode_logits", clock, "null_forward"))
        stack.enter_context(patched(runner, "prefill_logits", clock, "null_forward"))
        stack.enter_context(patched(engine_sampling, "sample", clock, "sampling_dispatch"))
        for _ in range(steps):
            clock.current = {}
            device_before = runner.device_seconds
            start = time.perf_counter()
            engine.step()
            total = time.perf_counter() - start
            step = dict(clock.current)
            step["device_stand_in"] = runner.device_seconds - device_before
            step["host_total"] = total - step["device_stand_in"] - step.get("null_forward", 0.0)
            if "sampling_dispatch" in step:
                step["sampling_dispatch"] -= step["device_stand_in"]
            host_phases = ("scheduling", "batch_preparation", "sampling_dispatch")
            step["output_processing"] = step["host_total"] - sum(
                step.get(name, 0.0) for name in host_phases
            )
            for name, seconds in step.items():
                phases.setdefault(name, []).append(seconds * 1e3)
    return {
        "sequences": sequences,
        "output_kind": output_kind,
        "device_argmax": "once per batch size" if argmax_once else "every step",
        "vocab": vocab,
        "steps": steps,
        "forwards_per_step": runner.forwards / (steps + WARMUP_STEPS),
        "median_ms": {name: statistics.median(values) for name, values in phases.items()},
        "p90_ms": {name: float(np.percentile(values, 90)) for name, values in phases.items()},
    }


def cpu_model() -> str:
    """The processor's name as /proc/cpuinfo gives it (the architecture elsewhere)."""
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.exists():
        for line in cpuinfo.read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.machine()


def least_disturbed(repeats: int, *configuration: Any) -> dict[str, Any]:
    """`measure(*configuration)` `repeats` times on fresh engines; the run of the lowest
    median host cost (the one other jobs on the machine disturbed least), with every run's
    median host cost beside it."""
    runs = [measure(*configuration) for _ in range(repeats)]
    host_medians = [run["median_ms"]["host_total"] for run in runs]
    best = runs[host_medians.index(min(host_medians))]
    return {**best, "host_total_median_ms_of_each_run": host_medians}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sequences", type=int, nargs="+", default=[64, 256])
    parser.add_argument("--vocab", type=int, default=32000)
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--repeats", type=int, default=3, help="runs per configuration")
    parser.add_argument(
        "--output-kinds",
        nargs="+",
        default=["delta", "final_only"],
        choices=get_args(OutputKind),
        help="delta: a streamed output per request per step (the server); final_only: one "
        "output per request (LLM.generate, benchmarks)",
    )
    parser.add_argument(
        "--device-argmax",
        nargs="+",
        default=["every-step", "once"],
        choices=["every-step", "once"],
        help="the device stand-in: a numpy argmax over the logits every step, or once per "
        "batch size (no 32 MB sweep of the host's caches per step, as on a GPU)",
    )
    parser.add_argument("--label", default="", help="free text stored with the results")
    today = datetime.date.today().isoformat()
    parser.add_argument(
        "--out", type=Path, default=Path(f"benchmarks/results/engine_host_cost_{today}.json")
    )
    args = parser.parse_args(argv)
    load_before = os.getloadavg()
    results = [
        least_disturbed(args.repeats, count, args.vocab, args.steps, kind, mode == "once")
        for mode in args.device_argmax
        for kind in args.output_kinds
        for count in args.sequences
    ]
    report = {
        "benchmark": "engine host cost per decode step, null runner",
        "label": args.label,
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "machine": {
            "platform": platform.platform(),
            "processor": cpu_model(),
            "cpu_count": os.cpu_count(),
            "load_average_before": load_before,
            "load_average_after": os.getloadavg(),
        },
        "python": sys.version.split()[0],
        "numpy": np.__version__,
        "prompt_tokens": PROMPT_TOKENS,
        "sampling": "greedy, device path (numpy argmax stands for the device call)",
        "text": "none (token-id prompts, no tokenizer: no detokenization)",
        "results": results,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    for result in results:
        medians = ", ".join(f"{k} {v:.3f}" for k, v in result["median_ms"].items())
        print(
            f"{result['sequences']} sequences, {result['output_kind']}, device argmax "
            f"{result['device_argmax']}: {medians} (ms, median)"
        )
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
