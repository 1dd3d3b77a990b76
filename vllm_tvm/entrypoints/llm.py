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
from vllm_tvm.runtime.multimodal.image_decoding import DecodedImage, decoded_from_pil
from vllm_tvm.runtime.multimodal.image_url import load_image_url
from vllm_tvm.runtime.multimodal.media_limits import check_item_count, checked_limits
from vllm_tvm.runtime.multimodal.media_sources import (
    MediaSources,
    fetch_timeout_from_environment,
)
from vllm_tvm.runtime.requests.outputs import RequestOutput
from vllm_tvm.runtime.sampling.params import SamplingParams
from vllm_tvm.runtime.tokenization.chat_messages import image_urls, template_messages

Conversation = Sequence[Mapping[str, Any]]
"""Chat messages (`{"role": ..., "content": ...}`), oldest first."""


class LLM:
    """A loaded model ready to generate. `model` is a local path, a Hugging Face id in the
    local cache, or a registry model id (pulled when $VLLM_TVM_REGISTRY holds it).
    `options` are `EngineArgs` fields (device, dtype, attention, gemm, max_model_len,
    num_blocks, load_format, skip_tokenizer_init, ...), or vLLM options with no effect here
    (entrypoints/vllm_options.py: enforce_eager, swap_space, ...); any other name is refused
    with a TypeError naming it. vLLM's media options are the front end's, not the engine's:
    `limit_mm_per_prompt` ({"image": 2}; a modality not named: 999),
    `allowed_local_media_path` (the directory file:// image URLs may read under; None: no
    local files) and `allowed_media_domains` (the hosts http(s) image URLs may name; None:
    any), checked before anything loads. An http(s) fetch takes at most
    `VLLM_IMAGE_FETCH_TIMEOUT` seconds, read as the server reads it."""

    def __init__(
        self,
        model: str | Path,
        *,
        limit_mm_per_prompt: Mapping[str, int] | None = None,
        allowed_local_media_path: str | Path | None = None,
        allowed_media_domains: Sequence[str] | None = None,
        **options: Any,
    ) -> None:
        self.limit_mm_per_prompt = checked_limits(limit_mm_per_prompt or {})
        allowed = None if allowed_local_media_path is None else Path(allowed_local_media_path)
        domains = None if allowed_media_domains is None else frozenset(allowed_media_domains)
        self.media_sources = MediaSources(
            fetch_timeout_from_environment(), allowed, allowed_media_domains=domains
        )
        args = EngineArgs.from_options(model, **without_no_effect_options(options))
        self._start(resolve_engine(args))

    @classmethod
    def from_engine_args(cls, args: EngineArgs) -> LLM:
        """An LLM over `args` already resolved (entrypoints/resolve.py), as a front end that
        resolved them itself (the command line) has them: nothing is resolved twice."""
        llm = cls.__new__(cls)
        llm.limit_mm_per_prompt = {}
        llm.media_sources = MediaSources(fetch_timeout_from_environment())
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
        """Complete every prompt (text, or a list of token ids, or vLLM's dict of either
        with `multi_modal_data={"image": ...}`: PIL images, one per image placeholder) in
        one batched run; one finished RequestOutput per prompt, in order. `priority` (one
        per prompt, lower runs first) matters under scheduling_policy="priority"."""
        if isinstance(prompts, (str, Mapping)) or (
            isinstance(prompts, list) and prompts and isinstance(prompts[0], int)
        ):
            prompts = [prompts]  # type: ignore[list-item]
        params_list = self._params_for(prompts, sampling_params)  # type: ignore[arg-type]
        if priority is not None and len(priority) != len(prompts):
            raise ValueError(f"got {len(priority)} priorities for {len(prompts)} prompts")
        split = [self._prompt_and_images(prompt) for prompt in prompts]  # type: ignore[arg-type]
        return generate_all(
            self.engine,
            [prompt for prompt, _ in split],
            params_list,
            priority,
            [images for _, images in split],
        )

    def _params_for(
        self,
        prompts: Sequence[Any],
        sampling_params: SamplingParams | Sequence[SamplingParams] | None,
    ) -> list[SamplingParams]:
        """One SamplingParams per prompt (the defaults when None)."""
        if sampling_params is None:
            sampling_params = self.get_default_sampling_params()
        params_list = (
            [sampling_params] * len(prompts)
            if isinstance(sampling_params, SamplingParams)
            else list(sampling_params)
        )
        if len(params_list) != len(prompts):
            raise ValueError(f"got {len(params_list)} sampling params for {len(prompts)} prompts")
        return params_list

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
        prompts: list[PromptInput] = []
        images: list[list[DecodedImage]] = []
        for conversation in conversations:
            prompt_images = self.chat_images(conversation)  # type: ignore[arg-type]
            prompts.append(
                self.chat_prompt_ids(
                    conversation,  # type: ignore[arg-type]
                    prompt_images,
                    chat_template=chat_template,
                    add_generation_prompt=add_generation_prompt,
                    tools=tools,
                    **(chat_template_kwargs or {}),
                )
            )
            images.append(prompt_images)
        params_list = self._params_for(prompts, sampling_params)
        return generate_all(self.engine, prompts, params_list, None, images)

    def chat_images(self, conversation: Conversation) -> list[DecodedImage]:
        """The images of `conversation`'s `image_url` parts, in prompt order; more than
        `limit_mm_per_prompt` allows is refused before any is loaded."""
        urls = image_urls(conversation)
        check_item_count(self.limit_mm_per_prompt, "image", len(urls))
        return [
            load_image_url(url, index, sources=self.media_sources)
            for index, (_, url) in enumerate(urls)
        ]

    def chat_prompt_ids(
        self,
        conversation: Conversation,
        images: Sequence[DecodedImage] = (),
        **template_options: Any,
    ) -> list[int]:
        """The token ids of `conversation` rendered by the chat template (`template_options`:
        chat_template, add_generation_prompt, tools, or the template's own variables), the
        placeholders of its `images` expanded into their soft tokens."""
        intake = self.engine.intake.image_intake
        placeholder = None if intake is None else intake.placeholder
        messages = template_messages(conversation, placeholder)
        rendered = self.tokenizer.apply_chat_template(messages, **template_options)
        if images:
            assert intake is not None  # image parts were refused without a placeholder
            rendered = intake.expand_text(rendered, images)
        return self.tokenizer.encode(rendered, add_special_tokens=False)

    def get_default_sampling_params(self) -> SamplingParams:
        """vLLM's defaults overlaid with the checkpoint's generation_config.json sampling
        values (temperature, top_p, top_k, min_p, repetition_penalty, max_new_tokens)."""
        if not self.model_path.is_dir():
            return SamplingParams()
        return SamplingParams(**generation_defaults_from_checkpoint(self.model_path))  # type: ignore[arg-type]

    def stream(
        self, prompt: PromptInput | Mapping[str, Any], params: SamplingParams
    ) -> Iterator[RequestOutput]:
        """One request's outputs as it runs, each holding only what is new (delta); a dict
        prompt may carry images (see `generate`)."""
        prompt, images = self._prompt_and_images(prompt)
        request_id = self.engine.add_request(
            None, prompt, params, output_kind="delta", images=images
        )
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

    def _prompt_and_images(self, prompt: PromptInput | Mapping[str, Any]) -> tuple[Any, list]:
        """`_prompt_and_images`, its images held to `limit_mm_per_prompt`."""
        text, images = _prompt_and_images(prompt)
        check_item_count(self.limit_mm_per_prompt, "image", len(images))
        return text, images


def _prompt_and_images(prompt: PromptInput | Mapping[str, Any]) -> tuple[PromptInput, list]:
    """A prompt and its images: vLLM's dict prompt (`prompt` or `prompt_token_ids`, and
    `multi_modal_data={"image": image or [images]}`), or a plain prompt with none."""
    if not isinstance(prompt, Mapping):
        return prompt, []
    text = prompt.get("prompt_token_ids", prompt.get("prompt"))
    if text is None:
        raise ValueError("a dict prompt needs 'prompt' or 'prompt_token_ids'")
    data = dict(prompt.get("multi_modal_data") or {})
    unsupported = sorted(set(data) - {"image"})
    if unsupported:
        raise ValueError(f"unsupported multi_modal_data {unsupported}; supported: 'image'")
    images = data.get("image", [])
    images = images if isinstance(images, (list, tuple)) else [images]
    return text, [
        image if isinstance(image, DecodedImage) else decoded_from_pil(image, index)
        for index, image in enumerate(images)
    ]


def generate_all(
    engine: LLMEngine,
    prompts: Sequence[PromptInput],
    params: Sequence[SamplingParams],
    priorities: Sequence[int] | None = None,
    images: Sequence[Sequence[DecodedImage]] | None = None,
) -> list[RequestOutput]:
    """Run requests to completion on `engine`, batched; outputs in prompt order (`images`:
    each prompt's, none when None).

    Every request is validated before any is queued, so a bad one refuses the whole call.
    """
    priorities = priorities if priorities is not None else [0] * len(prompts)
    images = images if images is not None else [()] * len(prompts)
    requests = [
        engine.make_request(prompt, param, None, priority, "final_only", prompt_images)
        for prompt, param, priority, prompt_images in zip(
            prompts, params, priorities, images, strict=True
        )
    ]
    for request in requests:
        engine.add(request)
    finished: dict[str, RequestOutput] = {}
    while len(finished) < len(requests):
        for output in engine.step():
            if output.finished:
                finished[output.request_id] = output
    return [finished[request.request_id] for request in requests]
