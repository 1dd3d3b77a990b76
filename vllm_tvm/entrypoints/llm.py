"""`LLM`: the Python front door, shaped like vLLM's (`LLM(model=...).generate(prompts, params)`).

It resolves an artifact (given, or compiled on first use into the cache — the compiler is
imported only then, so a runtime-only install still serves prebuilt artifacts) and builds
an `LLMEngine` over it; `generate` runs all prompts through the engine together (continuous
batching, prefix caching), `chat` does the same for conversations through the checkpoint's
chat template, `stream` yields one request's output as it grows.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from vllm_tvm.artifacts.manifest import read_manifest
from vllm_tvm.artifacts.resolution_memo import remember_artifact, remembered_artifact
from vllm_tvm.artifacts.speculative_roles import (
    AUX_HIDDEN_STATES_TARGET,
    HEAD_ROLES,
    TARGET_ROLES,
)
from vllm_tvm.checkpoints.eagle3_config import eagle3_aux_layers
from vllm_tvm.checkpoints.generation_config import generation_defaults_from_checkpoint
from vllm_tvm.checkpoints.model_config import read_model_config
from vllm_tvm.checkpoints.model_reference import resolve_model
from vllm_tvm.checkpoints.weight_formats import NATIVE
from vllm_tvm.registry.resolve import RegistrySettings, registry_engine_args
from vllm_tvm.runtime.devices import target_kind_for
from vllm_tvm.runtime.engine.args import EngineArgs
from vllm_tvm.runtime.engine.llm_engine import LLMEngine, PromptInput
from vllm_tvm.runtime.requests.outputs import RequestOutput
from vllm_tvm.runtime.sampling.params import SamplingParams
from vllm_tvm.runtime.speculative.config import MODEL_METHODS
from vllm_tvm.runtime.tokenization.chat_messages import template_messages


def resolve_artifact(
    model: str | Path,
    device: str,
    dtype: str,
    show_progress: bool = True,
    weight_format: str = NATIVE,
    quantization: str | None = None,
    target: str | None = None,
    tensor_parallel_size: int = 1,
    max_model_len: int | None = None,
    speculative_role: str | None = None,
    aux_hidden_layers: tuple[int, ...] = (),
) -> Path:
    """The cached artifact for (model config, device's target, dtype, weight format,
    quantization, context), compiled if absent. `weight_format`: `native` keeps supported GGUF quant
    types quantized on the device, `dequantized` stores every weight as floats;
    `quantization`: a group-quantization method for a float checkpoint's weights. `target`
    names another machine's target for `device` (e.g. `llvm:aarch64`; default: this one's).
    `tensor_parallel_size` > 1: the artifact of the model split over that many ranks.
    `max_model_len`: the engine's context (None: the model's; it picks longrope's factor
    set, compiler/request.py). `speculative_role`: a build a speculative method needs
    (artifacts/speculative_roles.py; an EAGLE-3 target with its `aux_hidden_layers`). A plain
    resolution for this machine remembered
    unchanged (artifacts/resolution_memo.py) needs no compiler import."""
    remember = target is None and speculative_role is None
    if remember:
        remembered = remembered_artifact(
            model, device, dtype, weight_format, quantization, tensor_parallel_size, max_model_len
        )
        if remembered is not None:
            return remembered
    from vllm_tvm.compiler.build import compile_cached, make_request

    request = make_request(
        model,
        target or target_kind_for(device),
        dtype,
        weight_format,
        quantization=quantization,
        tensor_parallel_shards=tensor_parallel_size,
        max_model_len=max_model_len,
        speculative_role=speculative_role,
        aux_hidden_layers=aux_hidden_layers,
    )
    artifact = compile_cached(request, show_progress)
    if remember:
        remember_artifact(
            model,
            device,
            dtype,
            weight_format,
            artifact,
            quantization,
            tensor_parallel_size,
            max_model_len,
        )
    return artifact


def artifact_for(args: EngineArgs) -> Path:
    """The artifact of `args`: the given one, else the cached build for its model, device,
    dtype, weight format and context (compiled on first use; with its hidden states for
    EAGLE and MTP, the inputs of the layers an EAGLE-3 head reads for EAGLE-3)."""
    if args.artifact is not None:
        return Path(args.artifact)
    role, aux_layers = _target_build(args)
    return resolve_artifact(
        args.model,
        args.device,
        args.dtype,
        args.show_progress,
        args.weight_format,
        args.quantization,
        tensor_parallel_size=args.tensor_parallel_size,
        max_model_len=args.max_model_len,
        speculative_role=role,
        aux_hidden_layers=aux_layers,
    )


def _target_build(args: EngineArgs) -> tuple[str | None, tuple[int, ...]]:
    """The speculative role of `args`' target build and, for an EAGLE-3 head, the target
    layers whose inputs it reads (from the head's config.json and the target's depth)."""
    spec = args.speculative_config
    role = TARGET_ROLES.get(spec.method) if spec is not None else None
    if role != AUX_HIDDEN_STATES_TARGET:
        return role, ()
    assert spec is not None and spec.model is not None  # SpeculativeConfig requires it
    target_layers = int(read_model_config(resolve_model(args.model))["num_hidden_layers"])
    return role, eagle3_aux_layers(read_model_config(resolve_model(spec.model)), target_layers)


def with_draft_artifact(args: EngineArgs) -> EngineArgs:
    """`args` with a draft model's, EAGLE or EAGLE-3 head's or MTP layer's artifact resolved
    as the target's is (same device, weight format and quantization, the target artifact's
    dtype; compiled on first use) when the speculative method is `draft_model`, `eagle`,
    `eagle3` or `mtp` (whose layer is read from the target's checkpoint unless `model` names
    another), the target's artifact then resolved too (its dtype is the draft's); else `args`
    unchanged."""
    spec = args.speculative_config
    if spec is None or spec.method not in MODEL_METHODS or spec.draft_artifact is not None:
        return args
    draft_model = resolve_model(spec.model or args.model)
    target = artifact_for(args)
    # "auto" takes the target's dtype, not the draft's own config: a GGUF target computes in
    # float32 on the CPU while a head's config.json may say float16.
    dtype = read_manifest(target, verify=False).dtype if args.dtype == "auto" else args.dtype
    draft = resolve_artifact(
        draft_model,
        args.device,
        dtype,
        args.show_progress,
        args.weight_format,
        args.quantization,
        speculative_role=HEAD_ROLES.get(spec.method),
    )
    draft_spec = replace(spec, model=str(draft_model), draft_artifact=str(draft))
    return replace(args, artifact=target, speculative_config=draft_spec)


Conversation = Sequence[Mapping[str, Any]]
"""Chat messages (`{"role": ..., "content": ...}`), oldest first."""


class LLM:
    """A loaded model ready to generate. `model` is a local path, a Hugging Face id in the
    local cache, or a registry model id (pulled when $VLLM_TVM_REGISTRY holds it).
    `options` are `EngineArgs` fields (device, dtype, max_model_len, num_blocks,
    load_format, skip_tokenizer_init, ...); any other name is refused with a TypeError naming
    it."""

    def __init__(self, model: str | Path, **options: Any) -> None:
        args = EngineArgs.from_options(model, **options)
        args = registry_engine_args(args, RegistrySettings.from_env())
        self.model_path = resolve_model(args.model)
        args = with_draft_artifact(replace(args, model=self.model_path))
        self.engine = LLMEngine.from_args(replace(args, artifact=artifact_for(args)))
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
