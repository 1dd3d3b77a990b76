"""`EngineArgs`: every option that shapes an engine, with the reference server's defaults
and vLLM's names, defined here once.

Why a module of its own, light on purpose: every front end builds its engine from these
options (`LLM(model, **options)`, the server's `ServerConfig.engine`, the benchmarks, and
the command line's shared engine flags), and the command line reads the defaults for its
`--help` text, which must not load TVM. So this module imports no TVM, no numpy and no
runtime machinery; what turns the options into a loaded engine lives in builder.py.

Two options serve benchmarks (vLLM's names): `load_format="dummy"` makes random weights of
the artifact's shapes on the device instead of reading the checkpoint, and
`skip_tokenizer_init` builds the engine without a tokenizer (token-id prompts only, no
text). Together they need nothing from the model directory but config.json.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any

from vllm_tvm.artifacts.compile_options import CompileOptions, option_default
from vllm_tvm.runtime.devices import target_kind_for
from vllm_tvm.runtime.sampling.params import LogprobsMode, check_logprobs_mode
from vllm_tvm.runtime.speculative.config import SpeculativeConfig, as_speculative_config
from vllm_tvm.runtime.weights.load_format import AUTO, check_load_format

if TYPE_CHECKING:
    from vllm_tvm.runtime.engine.scheduler import SchedulingPolicy

DEFAULT_NUM_BLOCKS = 256
"""KV blocks when the pool is sized neither by `num_blocks` nor from memory."""

ASYNC_WITH_SPECULATION = (
    "async_scheduling does not combine with speculative decoding in this engine; "
    "leave it unset or off (--no-async-scheduling)"
)

DEFAULT_MAX_NUM_BATCHED_TOKENS = 2048
"""The per-step token budget when `max_num_batched_tokens` is unset."""


@dataclass(frozen=True)
class EngineArgs:
    """Everything that shapes an engine, with the reference server's defaults.

    `artifact` None means the artifact is still to be resolved (compiled on first use) from
    `compile_options` (model, device's target, dtype, weight_format, quantization, attention,
    gemm, cpu_int8_activations, owned_kv, tensor_parallel_size, max_model_len) by the entry
    point (entrypoints/resolve.py); the engine itself needs it resolved. The KV pool is `num_blocks`
    x `block_size` tokens, or sized from `kv_cache_memory` bytes, or from
    `gpu_memory_utilization` (the fraction of the device this process may use, measured after
    the weights are loaded); at most one of the three, none: DEFAULT_NUM_BLOCKS.
    `max_model_len` None fits the model's length to the pool;
    `max_num_batched_tokens` None is DEFAULT_MAX_NUM_BATCHED_TOKENS. `load_format` is one of
    load_format.LOAD_FORMATS (`dummy` weights are seeded by `seed`, 0 when None);
    `skip_tokenizer_init` loads no tokenizer. `speculative_config` (vLLM's JSON, a dict or
    a `SpeculativeConfig`; None: off) makes decode steps verify proposed tokens.
    `itl_target_ms` is the inter-token latency the scheduler keeps running streams near
    while prompts prefill, by cutting those prompts into chunks sized from measured step
    times (scheduler.py, step_pacer.py); 0: no pacing, the token budget alone bounds a step.
    `tensor_parallel_size` > 1 splits a Llama-family model over that many ranks
    (model_defs/tensor_parallel.py; tensor_parallel_runner.py).
    `async_scheduling` (vLLM's name) launches each forward before the previous one's text
    and outputs are made, so host work overlaps the device's; None: on for CUDA without
    speculation (`overlaps_steps`).
    """

    model: str | Path
    artifact: str | Path | None = None
    device: str = "cpu"
    dtype: str = option_default("dtype")
    weight_format: str = option_default("weight_format")
    quantization: str | None = option_default("quantization")
    attention: str = option_default("attention")
    gemm: str = option_default("gemm")
    cpu_int8_activations: str = option_default("cpu_int8_activations")
    owned_kv: bool = option_default("owned_kv")
    tensor_parallel_size: int = option_default("tensor_parallel_size")
    load_format: str = AUTO
    max_model_len: int | None = option_default("max_model_len")
    max_num_seqs: int = 32
    max_num_batched_tokens: int | None = None
    block_size: int = 32
    num_blocks: int | None = None
    kv_cache_memory: int | None = None
    gpu_memory_utilization: float | None = None
    enable_prefix_caching: bool = True
    scheduling_policy: SchedulingPolicy = "fcfs"
    itl_target_ms: float = 500.0
    logprobs_mode: LogprobsMode = "raw_logprobs"
    seed: int | None = None
    show_progress: bool = True
    skip_tokenizer_init: bool = False
    speculative_config: SpeculativeConfig | None = None
    async_scheduling: bool | None = None

    def __post_init__(self) -> None:
        # vLLM takes the speculative config as JSON text or a dict: kept parsed, once.
        object.__setattr__(
            self, "speculative_config", as_speculative_config(self.speculative_config)
        )
        self.compile_options  # noqa: B018 (checks the device and every compile option by name)
        check_load_format(self.load_format)
        check_logprobs_mode(self.logprobs_mode)
        if not self.itl_target_ms >= 0:
            raise ValueError(f"itl_target_ms must be 0 (off) or positive, got {self.itl_target_ms}")
        if self.async_scheduling and self.speculative_config is not None:
            raise ValueError(ASYNC_WITH_SPECULATION)

    @classmethod
    def from_options(cls, model: str | Path, **options: Any) -> EngineArgs:
        """The options for `model`; a name that is not an engine option is refused by name
        (TypeError, as for an unknown keyword argument)."""
        unknown = sorted(set(options) - set(option_names()))
        if unknown:
            raise TypeError(
                f"unknown engine option(s) {', '.join(map(repr, unknown))}; the options are "
                + ", ".join(option_names())
            )
        return cls(model=model, **options)

    @property
    def compile_options(self) -> CompileOptions:
        """The options of the model's own (non-speculative) artifact: the compile options
        this engine holds, for its device's target (artifacts/compile_options.py, which
        defines them and their defaults)."""
        return CompileOptions(
            self.model,
            target_kind_for(self.device),
            self.dtype,
            self.weight_format,
            self.gemm,
            self.attention,
            self.quantization,
            self.tensor_parallel_size,
            self.max_model_len,
            cpu_int8_activations=self.cpu_int8_activations,
            owned_kv=self.owned_kv,
        )

    @property
    def token_budget(self) -> int:
        """The per-step token budget: `max_num_batched_tokens`, else the default."""
        if self.max_num_batched_tokens is None:
            return DEFAULT_MAX_NUM_BATCHED_TOKENS
        return self.max_num_batched_tokens

    @property
    def step_time_target(self) -> float | None:
        """The scheduler's step time target in seconds; None when pacing is off."""
        return self.itl_target_ms / 1e3 if self.itl_target_ms > 0 else None

    @property
    def overlaps_steps(self) -> bool:
        """Whether the engine schedules asynchronously (llm_engine.py): `async_scheduling`;
        unset, wherever the device runs apart from the host (CUDA; on the CPU the kernels
        run on the host's own threads, so there is nothing to overlap) without speculation."""
        if self.async_scheduling is not None:
            return self.async_scheduling
        return target_kind_for(self.device) == "cuda" and self.speculative_config is None

    @property
    def sized_from_memory(self) -> bool:
        """Whether the KV pool is sized from a byte budget or a share of the device."""
        return self.kv_cache_memory is not None or self.gpu_memory_utilization is not None


def option_names() -> list[str]:
    """Every engine option but `model`, in declaration order."""
    return [field.name for field in fields(EngineArgs) if field.name != "model"]


def default_of(name: str) -> Any:
    """The default of engine option `name` (for help texts)."""
    return next(field.default for field in fields(EngineArgs) if field.name == name)
