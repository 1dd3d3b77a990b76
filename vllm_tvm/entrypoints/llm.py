"""`LLM`: the Python front door, shaped like vLLM's (`LLM(model=...).generate(prompts, params)`).

It resolves its options once (entrypoints/resolve.py: the checkpoint, and the artifact,
given, pulled, or compiled on first use into the cache) and builds an `LLMEngine` over it;
`generate` runs all prompts through the engine together (continuous batching, prefix
caching), `chat` does the same for conversations through the checkpoint's chat template,
`stream` yields one request's output as it grows.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from vllm_tvm.checkpoints.generation_config import generation_defaults_from_checkpoint
from vllm_tvm.entrypoints.resolve import resolve_engine
from vllm_tvm.entrypoints.vllm_options import without_no_effect_options
from vllm_tvm.runtime.engine.args import EngineArgs
from vllm_tvm.runtime.engine.llm_engine import LLMEngine, PromptInput
from vllm_tvm.runtime.requests.outputs import RequestOutput
from vllm_tvm.runtime.sampling.params import SamplingParams
from vllm_tvm.runtime.tokenization.chat_messages import template_messages

Conversation = Sequence[Mapping[str, Any]]
"""Chat messages (`{"role": ..., "content": ...}`), oldest first."""


class LLM:
    """A loaded model ready to generate. `model` is a local path, a Hugging Face id in the
    local cache, or a registry model id (pulled when $VLLM_TVM_REGISTRY holds it).
    `options` are `EngineArgs` fields (device, dtype, attention, gemm, max_model_len,
    num_blocks, load_format, skip_tokenizer_init, ...), or vLLM options with no effect here
    (entrypoints/vllm_options.py: enforce_eager, swap_space, ...); any other name is refused
    with a TypeError naming it."""

    def __init__(self, model: str | Path, **options: Any) -> None:
        args = EngineArgs.from_options(model, **without_no_effect_options(options))
        self._start(resolve_engine(args))

    @classmethod
    def from_engine_args(cls, args: EngineArgs) -> LLM:
        """An LLM over `args` already resolved (entrypoints/resolve.py), as a front end that
        resolved them itself (the command line) has them: nothing is resolved twice."""
        llm = cls.__new__(cls)
        llm._start(args)
        return llm

    def _start(self, args: EngineArgs) -> None:
        self.model_path = Path(args.model)
        self.engine = LLMEngine.from_args(args)
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

    def chat(
        self,
        messages: Conversation | Sequence[Conversation],
        sampling_params: SamplingParams | Sequence[SamplingParams] | None = None,
        *,
        chat_template: str | None = None,
        add_generation_prompt: bool = True,
        tools: list[Mapping[str, Any]] | None = None,
        chat_template_kwargs: Mapping[str, Any] | None = None,
    ) -> list[RequestOutput]:
        """Complete one conversation, or each of a list of conversations, as vLLM's
        `LLM.chat`: each is rendered by the checkpoint's chat template (or `chat_template`),
        with the assistant turn opened when `add_generation_prompt`, and all are generated
        together; one RequestOutput per conversation, in order."""
        conversations = [messages] if messages and isinstance(messages[0], Mapping) else messages
        prompts: list[PromptInput] = [
            self.chat_prompt_ids(
                conversation,  # type: ignore[arg-type]
                chat_template=chat_template,
                add_generation_prompt=add_generation_prompt,
                tools=tools,
                **(chat_template_kwargs or {}),
            )
            for conversation in conversations
        ]
        return self.generate(prompts, sampling_params)

    def chat_prompt_ids(self, conversation: Conversation, **template_options: Any) -> list[int]:
        """The token ids of `conversation` rendered by the chat template (`template_options`:
        chat_template, add_generation_prompt, tools, or the template's own variables)."""
        messages = template_messages(conversation)
        rendered = self.tokenizer.apply_chat_template(messages, **template_options)
        return self.tokenizer.encode(rendered, add_special_tokens=False)

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


def generate_all(
    engine: LLMEngine,
    prompts: Sequence[PromptInput],
    params: Sequence[SamplingParams],
    priorities: Sequence[int] | None = None,
) -> list[RequestOutput]:
    """Run requests to completion on `engine`, batched; outputs in prompt order.

    Every request is validated before any is queued, so a bad one refuses the whole call.
    """
    priorities = priorities if priorities is not None else [0] * len(prompts)
    requests = [
        engine.make_request(prompt, param, None, priority, "final_only")
        for prompt, param, priority in zip(prompts, params, priorities, strict=True)
    ]
    for request in requests:
        engine.add(request)
    finished: dict[str, RequestOutput] = {}
    while len(finished) < len(requests):
        for output in engine.step():
            if output.finished:
                finished[output.request_id] = output
    return [finished[request.request_id] for request in requests]
