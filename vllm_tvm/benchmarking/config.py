"""What one benchmark run measures: `BenchConfig` (the engine's `EngineArgs` and the
workload's options), its defaults and its validation.

Why a module of its own: the CLI, the Python API and the report all read the same options,
and every bad value (a concurrency of 0, a prompt that cannot fit the serving length) must
be refused before minutes are spent compiling and loading, naming the value.

Defaults are small enough for a CPU (64 prompt tokens, 32 output tokens, concurrency 1, 4,
16); the GPU shapes of vLLM's benchmarks are flags away (`--input-len 1024 --output-len
128`). Each level runs `num_prompts` requests, by default 2 x its concurrency: two full
waves of C requests, so every level runs at its concurrency for most of its duration at a
cost proportional to it.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from vllm_tvm.runtime.engine.args import EngineArgs

PRETOKENIZE_ENV = "VLLM_TVM_BENCH_PRETOKENIZE"
"""`0` sends prompts as strings, tokenized inside the timed run (the rollback of the
reference harness); `1` (the default) tokenizes every prompt before timing."""

PRETOKENIZED = "pretokenized"
TIMED_STRING = "timed-string"

DEFAULT_CONCURRENCY = (1, 4, 16)
DEFAULT_INPUT_LEN = 64
DEFAULT_OUTPUT_LEN = 32
PROMPTS_PER_SLOT = 2
"""Default requests per level per unit of concurrency."""


def pretokenize_from_env(environ: Mapping[str, str] = os.environ) -> bool:
    """The pretokenize switch from `VLLM_TVM_BENCH_PRETOKENIZE` (unset: on)."""
    value = environ.get(PRETOKENIZE_ENV, "1").strip()
    if value not in ("0", "1"):
        raise ValueError(f"{PRETOKENIZE_ENV} must be 0 or 1, got '{value}'")
    return value == "1"


def bench_engine_defaults(concurrency: Sequence[int]) -> dict[str, Any]:
    """A benchmark engine's own defaults for engine options the caller leaves unset: a
    batch as large as the largest concurrency level (so no level queues behind the batch
    limit), and seed 0 (prompts, dummy weights and sampling repeat from run to run)."""
    return {"max_num_seqs": max(concurrency, default=1), "seed": 0}


@dataclass(frozen=True)
class BenchConfig:
    """Options of one benchmark run (a sweep over `concurrency`) on an engine of `engine`.

    `num_prompts` is per level (None: 2 x the level's concurrency). `engine.num_blocks`
    None (and no memory sizing) sizes the KV pool so that every request in flight at the
    largest concurrency holds its whole sequence (no preemption), and at least one sequence
    of `max_model_len`. `temperature` 0 is greedy. `pretokenize` False sends string prompts
    that the engine tokenizes inside the timed run (default: from
    `VLLM_TVM_BENCH_PRETOKENIZE`, on unless it is 0). `dataset_path` is a text file (one
    prompt per line) or JSONL (objects with "prompt" or "text"); its prompts are cut to
    `input_len` tokens. `engine.load_format="dummy"` uses random weights, so the model
    directory needs only config.json.
    """

    engine: EngineArgs
    concurrency: tuple[int, ...] = DEFAULT_CONCURRENCY
    input_len: int = DEFAULT_INPUT_LEN
    output_len: int = DEFAULT_OUTPUT_LEN
    num_prompts: int | None = None
    dataset_path: str | Path | None = None
    temperature: float = 0.0
    pretokenize: bool = field(default_factory=pretokenize_from_env)

    @classmethod
    def from_options(cls, model: str | Path, **options: Any) -> BenchConfig:
        """A run of `model` from benchmark and engine options by name, engine options left
        unset taking `bench_engine_defaults`; an unknown name is refused (TypeError)."""
        bench_names = {item.name for item in fields(cls)} - {"engine"}
        bench = {name: value for name, value in options.items() if name in bench_names}
        concurrency = bench.get("concurrency", DEFAULT_CONCURRENCY)
        engine = {name: value for name, value in options.items() if name not in bench_names}
        engine = {**bench_engine_defaults(concurrency), **engine}
        return cls(engine=EngineArgs.from_options(model, **engine), **bench)

    @property
    def seed(self) -> int:
        """The seed of the prompts (the engine's, 0 when it has none)."""
        return self.engine.seed or 0

    @property
    def pretokenize_mode(self) -> str:
        """`pretokenized` or `timed-string`, the name the report uses."""
        return PRETOKENIZED if self.pretokenize else TIMED_STRING

    @property
    def needs_tokenizer(self) -> bool:
        """Whether the workload needs the model's tokenizer (dataset text or string mode)."""
        return self.dataset_path is not None or not self.pretokenize

    def prompts_for(self, concurrency: int) -> int:
        """Requests run at one concurrency level."""
        return self.num_prompts if self.num_prompts is not None else PROMPTS_PER_SLOT * concurrency

    def validate(self) -> None:
        """Refuse values that cannot make a meaningful run, naming the value."""
        if not self.concurrency:
            raise ValueError("concurrency needs at least one level, got none")
        for level in self.concurrency:
            if level < 1:
                raise ValueError(f"concurrency must be >= 1, got {level}")
        _positive("input_len", self.input_len)
        _positive("output_len", self.output_len)
        for name in ("max_num_seqs", "max_num_batched_tokens", "num_blocks", "max_model_len"):
            value = getattr(self.engine, name)
            if value is not None:
                _positive(name, value)
        if self.num_prompts is not None:
            _positive("num_prompts", self.num_prompts)
            if self.num_prompts < max(self.concurrency):
                raise ValueError(
                    f"num_prompts {self.num_prompts} is below concurrency "
                    f"{max(self.concurrency)}: that level could never have "
                    f"{max(self.concurrency)} requests in flight"
                )
        if self.temperature < 0:
            raise ValueError(f"temperature must be >= 0, got {self.temperature}")
        if self.engine.max_model_len is not None:
            check_fits(self.input_len, self.output_len, self.engine.max_model_len)
        if self.dataset_path is not None and not Path(self.dataset_path).is_file():
            raise FileNotFoundError(f"dataset {self.dataset_path} is not a file")


def check_fits(prompt_len: int, output_len: int, max_model_len: int) -> None:
    """Refuse a request whose prompt plus output exceeds the serving length."""
    if prompt_len + output_len > max_model_len:
        raise ValueError(
            f"input_len {prompt_len} + output_len {output_len} = {prompt_len + output_len} "
            f"tokens exceeds max_model_len {max_model_len}"
        )


def _positive(name: str, value: int) -> None:
    if value < 1:
        raise ValueError(f"{name} must be >= 1, got {value}")
