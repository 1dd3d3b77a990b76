"""Request body -> the engine's `SamplingParams` and structured-output constraint.

Why it exists: both generation routes map the same OpenAI/vLLM fields onto the engine, with
the same defaults (the checkpoint's generation_config.json values for fields the request
leaves unset, as vLLM does) and the same refusals, named: a constraint may come from
`response_format`, vLLM's `structured_outputs` or a legacy `guided_*` field, but only one.

The output budget: a non-positive `max_tokens` is unset, not an error (clients such as
Hermes send -1 for "no client limit"), and unset means up to the context left after the
prompt, as vLLM does; a positive one larger than that context is vLLM's 400 naming both
lengths, since it cannot be honoured. The serving side may cap every budget
(`ServerConfig.max_new_tokens`, $VT_SERVER_MAX_NEW_TOKENS).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from vllm_tvm.runtime.sampling.params import SamplingParams
from vllm_tvm.runtime.structured_output import (
    StructuredOutputsParams,
    structured_outputs_from_response_format,
)
from vllm_tvm.server.errors import APIError
from vllm_tvm.server.protocol import SamplingFields

# Request fields that fall back to the checkpoint's generation_config.json, then to these.
_DEFAULTED = {
    "temperature": 1.0,
    "top_p": 1.0,
    "top_k": 0,
    "min_p": 0.0,
    "repetition_penalty": 1.0,
}


def is_set(max_tokens: int | None) -> bool:
    """Whether a requested budget counts: unset, zero and negative values do not."""
    return max_tokens is not None and max_tokens > 0


def check_fits_context(
    max_tokens: int | None, prompt_lengths: list[int], max_model_len: int
) -> None:
    """vLLM's 400 for a set budget that a prompt leaves no room for, naming both lengths. A
    prompt at or past the context is left to the engine, which refuses it by its length."""
    if not is_set(max_tokens):
        return
    for prompt_length in prompt_lengths:
        if prompt_length < max_model_len and prompt_length + max_tokens > max_model_len:
            raise APIError(
                f"'max_tokens' or 'max_completion_tokens' is too large: {max_tokens}. This "
                f"model's maximum context length is {max_model_len} tokens and your request "
                f"has {prompt_length} input tokens ({max_tokens} > {max_model_len} - "
                f"{prompt_length}).",
                param="max_tokens",
            )


def output_budget(
    max_tokens: int | None, defaults: Mapping[str, int | float], ceiling: int | None
) -> int | None:
    """The most tokens to generate (None: up to the context). An unset request budget takes
    the checkpoint's max_new_tokens if it has one; `ceiling` (positive) caps the result."""
    budget = max_tokens if is_set(max_tokens) else None
    if budget is None and "max_tokens" in defaults:
        budget = int(defaults["max_tokens"])
    if ceiling is not None and ceiling > 0:
        budget = ceiling if budget is None else min(budget, ceiling)
    return budget


def sampling_params(
    request: SamplingFields,
    *,
    defaults: Mapping[str, int | float],
    max_tokens: int | None,
    logprobs: int | None,
    prompt_logprobs: int | None,
    ceiling: int | None = None,
    skip_special_tokens: bool | None = None,
) -> SamplingParams:
    """The engine parameters of `request`; APIError 400 naming the bad value.

    `max_tokens` is the request's budget and `ceiling` the server's (`output_budget`);
    `skip_special_tokens` None keeps the request's value.
    """
    values: dict[str, Any] = {}
    for name, fallback in _DEFAULTED.items():
        given = getattr(request, name)
        values[name] = given if given is not None else defaults.get(name, fallback)
    try:
        return SamplingParams(
            n=request.n,
            best_of=getattr(request, "best_of", None),
            presence_penalty=request.presence_penalty or 0.0,
            frequency_penalty=request.frequency_penalty or 0.0,
            seed=request.seed,
            stop=request.stop,
            stop_token_ids=request.stop_token_ids,
            bad_words=request.bad_words,
            include_stop_str_in_output=request.include_stop_str_in_output,
            ignore_eos=request.ignore_eos,
            max_tokens=output_budget(max_tokens, defaults, ceiling),
            min_tokens=request.min_tokens,
            logprobs=logprobs,
            prompt_logprobs=prompt_logprobs,
            skip_special_tokens=(
                request.skip_special_tokens if skip_special_tokens is None else skip_special_tokens
            ),
            spaces_between_special_tokens=request.spaces_between_special_tokens,
            logit_bias=request.logit_bias,
            allowed_token_ids=request.allowed_token_ids,
            **values,
        )
    except (ValueError, TypeError, OverflowError) as err:
        raise APIError(str(err)) from err


def _guided(request: SamplingFields) -> StructuredOutputsParams | None:
    given = {
        name: getattr(request, f"guided_{name}")
        for name in ("json", "regex", "choice", "grammar")
        if getattr(request, f"guided_{name}") is not None
    }
    if not given:
        return None
    options = {}
    if request.guided_whitespace_pattern is not None:
        options["whitespace_pattern"] = request.guided_whitespace_pattern
    return StructuredOutputsParams(**given, **options)


def structured_outputs(request: SamplingFields) -> StructuredOutputsParams | None:
    """The request's output constraint, if any; APIError 400 when it is malformed or given
    in more than one way."""
    try:
        sources: dict[str, StructuredOutputsParams] = {}
        if request.structured_outputs is not None:
            sources["structured_outputs"] = StructuredOutputsParams.from_dict(
                request.structured_outputs
            )
        guided = _guided(request)
        if guided is not None:
            sources["guided_*"] = guided
        if request.response_format is not None:
            form = request.response_format.model_dump(by_alias=True, exclude_none=True)
            from_format = structured_outputs_from_response_format(form)
            if from_format is not None:
                sources["response_format"] = from_format
    except (ValueError, TypeError) as err:
        raise APIError(str(err), param="structured_outputs") from err
    if len(sources) > 1:
        raise APIError(
            f"give one output constraint, got {len(sources)}: {', '.join(sources)}",
            param="structured_outputs",
        )
    return next(iter(sources.values()), None)
