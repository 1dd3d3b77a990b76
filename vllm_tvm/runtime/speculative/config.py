"""`SpeculativeConfig`: vLLM's `--speculative-config` JSON, checked once, into one dataclass.

Why a module of its own, light on purpose: engine options (runtime/engine/args.py) hold it
and the command line parses it, neither of which may load TVM or numpy. What runs a
configuration lives in the other modules of this package.

vLLM's keys: `method` (ngram, draft_model, eagle, eagle3, mtp, suffix), `num_speculative_tokens`,
`prompt_lookup_min` / `prompt_lookup_max` (n-gram lengths; one given sets the other, none:
both 5, as in vLLM) and `model` (the draft or head checkpoint; `model` without `method`
means a draft model, as in vLLM). Methods this engine does not run yet (suffix decoding)
and every other vLLM key are refused by name, so a configuration is never silently half
applied.

A draft model or an EAGLE head (`eagle`: EAGLE-1, over the target's final hidden state;
`eagle3`: EAGLE-3, over the inputs of three of the target's layers, with its own LM head
over a draft vocabulary) is compiled like the target (same target, same dtype);
`draft_artifact` is that build, None until the entry point resolves it (as
`EngineArgs.artifact`), never JSON.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

METHODS = ("ngram", "draft_model", "eagle", "eagle3", "mtp", "suffix")
"""The methods of vLLM's `method` key this engine knows (any other is refused as unknown)."""

BUILT_METHODS = ("ngram", "draft_model", "eagle", "eagle3", "mtp")
"""The methods this engine runs; the others of METHODS are refused by name."""

MODEL_METHODS = {
    "draft_model": "draft",
    "eagle": "EAGLE head",
    "eagle3": "EAGLE-3 head",
    "mtp": "MTP layer",
}
"""The methods that draft with a model of their own, and what it is; all but `mtp` (whose
layers are the target checkpoint's unless `model` names another) need its `model` path."""

DEFAULT_PROMPT_LOOKUP = 5
"""vLLM's n-gram length when neither `prompt_lookup_min` nor `prompt_lookup_max` is given."""

KEYS = ("method", "num_speculative_tokens", "prompt_lookup_min", "prompt_lookup_max", "model")


@dataclass(frozen=True)
class SpeculativeConfig:
    """How decode steps propose tokens: `method`, up to `num_speculative_tokens` per step
    verified in one forward; n-gram lookup matches the last `prompt_lookup_max` down to
    `prompt_lookup_min` tokens earlier in the sequence; a draft model, EAGLE or EAGLE-3
    head (`model`, compiled as `draft_artifact`) decodes the drafts itself."""

    method: str
    num_speculative_tokens: int
    prompt_lookup_min: int = DEFAULT_PROMPT_LOOKUP
    prompt_lookup_max: int = DEFAULT_PROMPT_LOOKUP
    model: str | None = None
    draft_artifact: str | None = None

    def __post_init__(self) -> None:
        if self.method not in METHODS:
            raise ValueError(
                f"unknown speculative method {self.method!r}; vLLM's methods are "
                + ", ".join(METHODS)
            )
        if self.method not in BUILT_METHODS:
            raise ValueError(
                f"speculative method {self.method!r} is not implemented in vllm-tvm; "
                "implemented: " + ", ".join(BUILT_METHODS)
            )
        _positive("num_speculative_tokens", self.num_speculative_tokens)
        _positive("prompt_lookup_min", self.prompt_lookup_min)
        _positive("prompt_lookup_max", self.prompt_lookup_max)
        if self.prompt_lookup_min > self.prompt_lookup_max:
            raise ValueError(
                f"prompt_lookup_min {self.prompt_lookup_min} exceeds prompt_lookup_max "
                f"{self.prompt_lookup_max}"
            )
        if self.method == "ngram" and self.model is not None:
            raise ValueError(
                f"speculative method 'ngram' takes no draft model (got model {self.model!r})"
            )
        if self.method in MODEL_METHODS and self.method != "mtp" and not self.model:
            raise ValueError(
                f"speculative method {self.method!r} needs the {MODEL_METHODS[self.method]}'s "
                "'model' path"
            )

    @classmethod
    def from_json(cls, value: str | dict[str, Any]) -> SpeculativeConfig:
        """The configuration of a JSON object (text or already a dict), vLLM's keys."""
        if isinstance(value, str):
            try:
                value = json.loads(value)
            except json.JSONDecodeError as err:
                raise ValueError(f"speculative config is not valid JSON: {err}") from None
        if not isinstance(value, dict):
            raise ValueError(f"speculative config must be a JSON object, got {value!r}")
        unknown = sorted(set(value) - set(KEYS))
        if unknown:
            raise ValueError(
                f"speculative config key(s) {', '.join(map(repr, unknown))} are not supported; "
                "supported: " + ", ".join(KEYS)
            )
        method = value.get("method")
        if method is None:
            if value.get("model") is None:
                raise ValueError("speculative config needs a 'method' (or a draft 'model')")
            method = "draft_model"
        low, high = value.get("prompt_lookup_min"), value.get("prompt_lookup_max")
        low = high if low is None else low
        high = low if high is None else high
        return cls(
            method=method,
            num_speculative_tokens=value.get("num_speculative_tokens"),  # type: ignore[arg-type]
            prompt_lookup_min=DEFAULT_PROMPT_LOOKUP if low is None else low,
            prompt_lookup_max=DEFAULT_PROMPT_LOOKUP if high is None else high,
            model=value.get("model"),
        )


def as_speculative_config(
    value: SpeculativeConfig | str | dict[str, Any] | None,
) -> SpeculativeConfig | None:
    """An engine option's value as a configuration: as given, parsed from JSON, or None."""
    if value is None or isinstance(value, SpeculativeConfig):
        return value
    return SpeculativeConfig.from_json(value)


def _positive(name: str, value: Any) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ValueError(f"speculative config {name} must be an integer >= 1, got {value!r}")
