"""Request body -> the engine's `SamplingParams` and structured-output constraint.

Why it exists: both generation routes map the same OpenAI/vLLM fields onto the engine, with
the same defaults (the checkpoint's generation_config.json values for fields the request
leaves unset, as vLLM does) and the same refusals, named: a constraint may come from
`response_format`, vLLM's `structured_outputs` or a legacy `guided_*` field, but only one.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from vllm_tvm.runtime.sampling.params import SamplingParams, check_requested_max_tokens
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


def sampling_params(
    request: SamplingFields,
    *,
    defaults: Mapping[str, int | float],
    max_tokens: int | None,
    logprobs: int | None,
    prompt_logprobs: int | None,
    skip_special_tokens: bool | None = None,
) -> SamplingParams:
    """The engine parameters of `request`; APIError 400 naming the bad value.

    `max_tokens` is the request's budget (None: unset, then the checkpoint's max_new_tokens
    if it has one, else up to the length limit; below 1 is refused, as vLLM does);
    `skip_special_tokens` None keeps the request's value.
    """
    values: dict[str, Any] = {}
    for name, fallback in _DEFAULTED.items():
        given = getattr(request, name)
        values[name] = given if given is not None else defaults.get(name, fallback)
    if max_tokens is None:
        max_tokens = int(defaults["max_tokens"]) if "max_tokens" in defaults else None
    try:
        check_requested_max_tokens(max_tokens)
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
            max_tokens=max_tokens,
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
