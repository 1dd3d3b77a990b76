"""`LLM`: the Python front door, shaped like vLLM's (`LLM(model=...).generate(prompts, params)`).

It resolves an artifact (given, or compiled on first use into the cache — the compiler is
imported only then, so a runtime-only install still serves prebuilt artifacts) and builds
an `LLMEngine` over it; `generate` runs all prompts through the engine together (continuous
batching, prefix caching), `stream` yields one request's output as it grows.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path

from vllm_tvm.checkpoints.generation_config import generation_defaults_from_checkpoint
from vllm_tvm.runtime.engine.llm_engine import EngineArgs, LLMEngine, PromptInput, generate_all
from vllm_tvm.runtime.engine.outputs import RequestOutput
from vllm_tvm.runtime.engine.scheduler import SchedulingPolicy
from vllm_tvm.runtime.kv.cache_config import DEFAULT_BLOCK_SIZE
from vllm_tvm.runtime.sampling.params import LogprobsMode, SamplingParams

DEVICE_TARGETS = {"cpu": "llvm", "cuda": "cuda"}


def resolve_artifact(
    model: str | Path,
    device: str,
    dtype: str,
    show_progress: bool = True,
    weight_format: str = "native",
) -> Path:
    """The cached artifact for (model config, device's target, dtype, weight format),
    compiled if absent. `weight_format`: `native` keeps supported GGUF quant types
    quantized on the device, `dequantized` stores every weight as floats."""
    from vllm_tvm.compiler.build import compile_cached, make_request

    if device not in DEVICE_TARGETS:
        raise ValueError(f"unsupported device '{device}'; supported: " + ", ".join(DEVICE_TARGETS))
    request = make_request(model, DEVICE_TARGETS[device], dtype, weight_format)
    return compile_cached(request, show_progress)


class LLM:
    """A loaded model ready to generate (see `EngineArgs` for the engine's options)."""

    def __init__(
        self,
        model: str | Path,
        *,
        artifact: str | Path | None = None,
        device: str = "cpu",
        dtype: str = "auto",
        max_model_len: int | None = None,
        max_num_seqs: int = 32,
        max_num_batched_tokens: int = 2048,
        block_size: int = DEFAULT_BLOCK_SIZE,
        num_blocks: int | None = None,
        kv_cache_memory: int | None = None,
        gpu_memory_utilization: float | None = None,
        enable_prefix_caching: bool = True,
        scheduling_policy: SchedulingPolicy = "fcfs",
        logprobs_mode: LogprobsMode = "raw_logprobs",
        seed: int | None = None,
        show_progress: bool = True,
        weight_format: str = "native",
    ) -> None:
        self.model_path = Path(model)
        artifact_dir = (
            Path(artifact)
            if artifact is not None
            else resolve_artifact(self.model_path, device, dtype, show_progress, weight_format)
        )
        self.engine = LLMEngine.from_args(
            EngineArgs(
                model=self.model_path,
                artifact=artifact_dir,
                device=device,
                max_model_len=max_model_len,
                max_num_seqs=max_num_seqs,
                max_num_batched_tokens=max_num_batched_tokens,
                block_size=block_size,
                num_blocks=num_blocks,
                kv_cache_memory=kv_cache_memory,
                gpu_memory_utilization=gpu_memory_utilization,
                enable_prefix_caching=enable_prefix_caching,
                scheduling_policy=scheduling_policy,
                logprobs_mode=logprobs_mode,
                seed=seed,
                show_progress=show_progress,
            )
        )
        self.tokenizer = self.engine.tokenizer
        self.runner = self.engine.runner
        self.eos_token_ids = self.engine.eos_token_ids

    def generate(
        self,
        prompts: PromptInput | Sequence[PromptInput],
        sampling_params: SamplingParams | Sequence[SamplingParams] | None = None,
        priority: Sequence[int] | None = None,
    ) -> list[RequestOutput]:
        """Complete every prompt (text, or a list of token ids) in one batched run; one
        finished RequestOutput per prompt, in order. `priority` (one per prompt, lower runs
        first) matters under scheduling_policy="priority"."""
        if isinstance(prompts, str) or (
            isinstance(prompts, list) and prompts and isinstance(prompts[0], int)
        ):
            prompts = [prompts]  # type: ignore[list-item]
        if sampling_params is None:
            sampling_params = self.get_default_sampling_params()
        params_list = (
            [sampling_params] * len(prompts)
            if isinstance(sampling_params, SamplingParams)
            else list(sampling_params)
        )
        if len(params_list) != len(prompts):
            raise ValueError(f"got {len(params_list)} sampling params for {len(prompts)} prompts")
        if priority is not None and len(priority) != len(prompts):
            raise ValueError(f"got {len(priority)} priorities for {len(prompts)} prompts")
        return generate_all(self.engine, list(prompts), params_list, priority)  # type: ignore[arg-type]

    def get_default_sampling_params(self) -> SamplingParams:
        """vLLM's defaults overlaid with the checkpoint's generation_config.json sampling
        values (temperature, top_p, top_k, min_p, repetition_penalty, max_new_tokens)."""
        if not self.model_path.is_dir():
            return SamplingParams()
        return SamplingParams(**generation_defaults_from_checkpoint(self.model_path))  # type: ignore[arg-type]

    def stream(self, prompt: PromptInput, params: SamplingParams) -> Iterator[RequestOutput]:
        """One request's outputs as it runs, each holding only what is new (delta)."""
        request_id = self.engine.add_request(None, prompt, params, output_kind="delta")
        finished = False
        try:
            while not finished:
                for output in self.engine.step():
                    if output.request_id == request_id:
                        finished = output.finished
                        yield output
        finally:
            if not finished:
                self.engine.abort_request(request_id)

    def reset_prefix_cache(self) -> bool:
        """Drop every cached prefix block; True on success."""
        return self.engine.reset_prefix_cache()
