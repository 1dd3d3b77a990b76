"""`LLM`: the Python front door, shaped like vLLM's (`LLM(model=...).generate(prompts, params)`).

It resolves an artifact (given, or compiled on first use into the cache — the compiler is
imported only then, so a runtime-only install still serves prebuilt artifacts), loads the
model, tokenizer and stop ids, and runs requests.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path

from vllm_tvm.runtime.generation_config import stop_token_ids_from_checkpoint
from vllm_tvm.runtime.model_runner import ModelRunner
from vllm_tvm.runtime.outputs import RequestMetrics, RequestOutput
from vllm_tvm.runtime.sampler import Sampler
from vllm_tvm.runtime.sampling_params import SamplingParams
from vllm_tvm.runtime.single_request import StreamDelta, run_request, stream_request
from vllm_tvm.runtime.tokenization import load_tokenizer

DEVICE_TARGETS = {"cpu": "llvm", "cuda": "cuda"}

PromptInput = str | list[int]


def resolve_artifact(
    model: str | Path, device: str, dtype: str, show_progress: bool = True
) -> Path:
    """The cached artifact for (model config, device's target, dtype), compiled if absent."""
    from vllm_tvm.compiler.build import compile_cached, make_request

    if device not in DEVICE_TARGETS:
        raise ValueError(f"unsupported device '{device}'; supported: " + ", ".join(DEVICE_TARGETS))
    return compile_cached(make_request(model, DEVICE_TARGETS[device], dtype), show_progress)


def merged_eos_ids(primary: list[int], checkpoint_ids: list[int]) -> list[int]:
    """Primary EOS first (the tokenizer's), then the checkpoint's extra stop ids."""
    merged = list(primary[:1])
    for token in [*primary[1:], *checkpoint_ids]:
        if token not in merged:
            merged.append(token)
    return merged


class LLM:
    """A loaded model ready to generate."""

    def __init__(
        self,
        model: str | Path,
        *,
        artifact: str | Path | None = None,
        device: str = "cpu",
        dtype: str = "auto",
        max_model_len: int | None = None,
        max_num_seqs: int = 4,
        prefill_chunk_size: int = 2048,
        page_size: int = 16,
        seed: int | None = None,
        show_progress: bool = True,
    ) -> None:
        self.model_path = Path(model)
        artifact_dir = (
            Path(artifact)
            if artifact is not None
            else resolve_artifact(self.model_path, device, dtype, show_progress)
        )
        self.tokenizer = load_tokenizer(self.model_path)
        self.runner = ModelRunner(
            artifact_dir,
            self.model_path,
            device=device,
            max_model_len=max_model_len,
            max_batch_size=max_num_seqs,
            prefill_chunk_size=prefill_chunk_size,
            page_size=page_size,
            show_progress=show_progress,
        )
        checkpoint_ids = (
            stop_token_ids_from_checkpoint(self.model_path) if self.model_path.is_dir() else []
        )
        self.eos_token_ids = merged_eos_ids(self.tokenizer.eos_token_ids, checkpoint_ids)
        self.sampler = Sampler(eos_token_ids=self.eos_token_ids, seed=seed)

    def _prompt_ids(self, prompt: PromptInput) -> tuple[str | None, list[int]]:
        if isinstance(prompt, str):
            return prompt, self.tokenizer.encode(prompt)
        return None, [int(token) for token in prompt]

    def generate(
        self,
        prompts: PromptInput | Sequence[PromptInput],
        sampling_params: SamplingParams | Sequence[SamplingParams] | None = None,
    ) -> list[RequestOutput]:
        """Complete every prompt (text, or a list of token ids); one RequestOutput each."""
        if isinstance(prompts, str) or (
            isinstance(prompts, list) and prompts and isinstance(prompts[0], int)
        ):
            prompts = [prompts]  # type: ignore[list-item]
        if sampling_params is None:
            sampling_params = SamplingParams()
        params_list = (
            [sampling_params] * len(prompts)
            if isinstance(sampling_params, SamplingParams)
            else list(sampling_params)
        )
        if len(params_list) != len(prompts):
            raise ValueError(f"got {len(params_list)} sampling params for {len(prompts)} prompts")
        results = []
        for request_index, (prompt, params) in enumerate(zip(prompts, params_list, strict=True)):
            text, ids = self._prompt_ids(prompt)
            completions = []
            metrics = RequestMetrics()
            for index in range(params.n):
                completion, metrics = run_request(
                    self.runner,
                    self.tokenizer,
                    self.sampler,
                    ids,
                    params,
                    self.eos_token_ids,
                    index,
                )
                completions.append(completion)
            results.append(RequestOutput(str(request_index), text, ids, completions, True, metrics))
        return results

    def stream(
        self, prompt: PromptInput, params: SamplingParams, metrics: RequestMetrics
    ) -> Iterator[StreamDelta]:
        """Token-by-token deltas of one completion (for `generate --stream`)."""
        _, ids = self._prompt_ids(prompt)
        yield from stream_request(
            self.runner, self.tokenizer, self.sampler, ids, params, self.eos_token_ids, metrics
        )
