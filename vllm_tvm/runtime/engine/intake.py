"""Request intake: a prompt and its sampling parameters checked and turned into a `Request`.

Why it exists: everything a request can be refused for is known before it is queued (a
prompt that cannot fit the serving length, an empty one, token ids outside the vocabulary,
parameters the model cannot honour, text or stop strings without a tokenizer), and the
per-sequence state it needs (sampling context, stop checker, detokenizer) is built once,
here, so the step loop only ever sees valid sequences. It runs on any thread: the async
engine makes requests off the engine thread.

Admission follows vLLM: a prompt at or past `max_model_len` is refused when added, naming
both lengths, so nothing waits forever.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Sequence
from dataclasses import replace

from vllm_tvm.runtime.engine.image_intake import ImageIntake
from vllm_tvm.runtime.multimodal.image_decoding import DecodedImage
from vllm_tvm.runtime.requests.prompt_images import PromptImages
from vllm_tvm.runtime.requests.sequence import (
    EngineSequence,
    NoTextDecoder,
    OutputKind,
    Request,
    TextDecoder,
)
from vllm_tvm.runtime.requests.stop_checker import StopChecker
from vllm_tvm.runtime.sampling.params import SamplingParams
from vllm_tvm.runtime.sampling.sampler import SamplingContext
from vllm_tvm.runtime.tokenization import Tokenizer
from vllm_tvm.runtime.tokenization.detokenizer import DecodeTables, IncrementalDetokenizer

PromptInput = str | list[int]


class PromptTooLongError(ValueError):
    """A prompt at or past the serving length: it can never run."""


class EmptyPromptError(ValueError):
    """A prompt of no tokens: nothing predicts a first token from nothing."""


def check_prompt_length(prompt_len: int, max_model_len: int) -> None:
    """Refuse a prompt that leaves no room to generate (vLLM's _validate_prompt_len), and an
    empty one."""
    if prompt_len >= max_model_len:
        raise PromptTooLongError(
            f"The prompt (length {prompt_len}) is longer than or equal to the maximum model "
            f"length of {max_model_len}. Make sure that `max_model_len` is no smaller than "
            "the number of text tokens plus one."
        )
    if prompt_len == 0:
        raise EmptyPromptError("The prompt is empty: at least one token is needed.")


class RequestIntake:
    """Validates prompts and parameters and builds each `Request` with its sequences.

    `tokenizer` None: token-id prompts only, no text (stop strings are refused too).
    `image_intake` None: the model takes text only, and a request with images is refused.
    """

    def __init__(
        self,
        tokenizer: Tokenizer | None,
        eos_token_ids: list[int],
        max_model_len: int,
        vocab_size: int,
        image_intake: ImageIntake | None = None,
    ) -> None:
        self.tokenizer = tokenizer
        self.image_intake = image_intake
        self.eos_token_ids = eos_token_ids
        self.max_model_len = max_model_len
        self.vocab_size = vocab_size
        self._decode_tables = (
            DecodeTables.from_tokenizer(tokenizer) if tokenizer is not None else None
        )
        self._request_counter = itertools.count()

    def make_request(
        self,
        prompt: PromptInput,
        params: SamplingParams,
        request_id: str | None = None,
        priority: int = 0,
        output_kind: OutputKind = "cumulative",
        images: Sequence[DecodedImage] = (),
    ) -> Request:
        """Validate and tokenize a request (its id made up when None); `images` are the
        prompt's, one per placeholder in order (image_intake.py).

        Raises PromptTooLongError for a prompt at or past `max_model_len` (each image
        counted as its soft tokens), EmptyPromptError for an empty one and ValueError for
        parameters the model cannot honour (or that need a missing tokenizer), and for
        images a text-only model, or a prompt whose placeholders do not match them.
        """
        if self.tokenizer is None:
            _check_without_tokenizer(prompt, params)
        text, prompt_ids, prompt_images = self._prompt_ids(prompt, images)
        check_prompt_length(len(prompt_ids), self.max_model_len)
        out_of_vocab = [t for t in prompt_ids if not 0 <= t < self.vocab_size]
        if out_of_vocab:
            raise ValueError(
                f"prompt token ids {out_of_vocab[:8]} are outside the vocabulary "
                f"[0, {self.vocab_size})"
            )
        params.verify_for_vocab(self.vocab_size)
        if request_id is None:
            request_id = str(next(self._request_counter))
        arrival = time.perf_counter()
        seqs = [
            self._make_sequence(request_id, index, prompt_ids, params, arrival, priority)
            for index in range(params.n)
        ]
        for seq in seqs:
            seq.images = prompt_images
        return Request(request_id, text, prompt_ids, seqs, output_kind, arrival)

    def _prompt_ids(
        self, prompt: PromptInput, images: Sequence[DecodedImage]
    ) -> tuple[str | None, list[int], PromptImages | None]:
        """(the prompt text, its token ids with every image's soft tokens, its images)."""
        if images and self.image_intake is None:
            raise ValueError(
                "this model takes text only: image input needs an artifact with a vision "
                "tower (a Gemma3ForConditionalGeneration or Qwen2_5_VLForConditionalGeneration "
                "checkpoint)"
            )
        text = prompt if isinstance(prompt, str) else None
        if not images:
            ids = [int(t) for t in prompt] if text is None else self.tokenizer.encode(text)  # type: ignore[union-attr]
            return text, ids, None
        intake = self.image_intake
        assert intake is not None
        if text is not None:
            ids = self.tokenizer.encode(intake.expand_text(text, images))  # type: ignore[union-attr]
        else:
            ids = intake.expand_ids([int(t) for t in prompt], images)
        return text, ids, intake.prompt_images(ids, images)

    def _make_sequence(
        self,
        request_id: str,
        index: int,
        prompt_ids: list[int],
        params: SamplingParams,
        arrival: float,
        priority: int,
    ) -> EngineSequence:
        """Completion `index` of a request: children of n > 1 are seeded seed + index and
        only the first computes prompt logprobs."""
        if params.n > 1:
            params = replace(
                params,
                n=1,
                seed=None if params.seed is None else params.seed + index,
                prompt_logprobs=params.prompt_logprobs if index == 0 else None,
            )
        tokenizer = self.tokenizer
        context = SamplingContext.for_request(
            params,
            prompt_ids,
            encode=None if tokenizer is None else lambda text: tokenizer.encode(text, False),
        )
        stops = StopChecker(
            prompt_len=len(prompt_ids),
            max_model_len=self.max_model_len,
            max_tokens=params.max_tokens,
            min_tokens=params.min_tokens,
            stop=params.stop,
            stop_token_ids=params.stop_token_ids,
            eos_token_ids=self.eos_token_ids,
            ignore_eos=params.ignore_eos,
            include_stop_str_in_output=params.include_stop_str_in_output,
        )
        return EngineSequence(
            request_id,
            index,
            params,
            prompt_ids,
            context,
            stops,
            self._decoder(params, prompt_ids),
            arrival,
            priority,
        )

    def _decoder(self, params: SamplingParams, prompt_ids: list[int]) -> TextDecoder:
        """The incremental detokenizer of one sequence (none without text)."""
        if not params.detokenize or self.tokenizer is None:
            return NoTextDecoder()
        return IncrementalDetokenizer(
            self.tokenizer,
            skip_special_tokens=params.skip_special_tokens,
            prompt_token_ids=prompt_ids,
            tables=self._decode_tables,
        )


def _check_without_tokenizer(prompt: PromptInput, params: SamplingParams) -> None:
    """Refuse what an engine without a tokenizer cannot honour: text in, stop strings."""
    if isinstance(prompt, str):
        raise ValueError(
            "a text prompt needs a tokenizer, but this engine was built with "
            "skip_tokenizer_init: pass the prompt as token ids"
        )
    if params.stop:
        raise ValueError(
            f"stop strings {params.stop!r} need a tokenizer, but this engine was built with "
            "skip_tokenizer_init: use stop_token_ids"
        )
