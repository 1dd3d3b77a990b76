"""Which sequences of a step can take their next token from the device, and the draw itself.

Why it exists: the host sampler (sampler.py) needs each row's whole logits on the host, a
33 MB copy per step at batch 64 with a 128,256-token vocabulary plus a numpy pass over it.
Most requests need none of what only the host does, so the engine samples their rows on the
device (`DeviceLogits.argmax` / `.sample`) and copies back one token each.

What keeps a sequence on the host path (its row must reach the host sampler), from what
`Sampler.sample` applies before and after the draw:
- `logprobs` (the returned values need the row) and `prompt_logprobs` (the whole request);
- `allowed_token_ids`, `bad_words`, `logit_bias`, and `min_tokens` until it is reached;
- repetition, frequency and presence penalties;
- a logits hook that may mask its row (sampling/dispatch.py decides that);
- a random draw when the artifact has no compiled `sample` (greedy still runs on device).
Greedy rows and rows with only temperature / top_k / top_p / min_p / seed run on the device.

Randomness: a random row takes one uniform per step from `Sampler.uniforms` (its own seeded
generator, or the shared one), exactly the draw the host path would have consumed; it
becomes the row's 32-bit noise key. The same seed therefore gives the same tokens, and a
request's generator stays in step even if a later token goes to the host path. Device and
host draws for the same uniform are equally distributed but not the same token.

`VLLM_TVM_DEVICE_SAMPLING=0` turns the device path off (every row on the host, as before).
"""

from __future__ import annotations

import os
from collections.abc import Sequence

import numpy as np

from vllm_tvm.runtime.sampling.device_logits import DeviceLogits
from vllm_tvm.runtime.sampling.sampler import Sampler, SamplingContext

DEVICE_SAMPLING_ENV = "VLLM_TVM_DEVICE_SAMPLING"
"""`0` samples every row on the host (A/B runs, or to rule the device path out)."""


def device_sampling_enabled() -> bool:
    """Whether the environment leaves device sampling on (the default)."""
    return os.environ.get(DEVICE_SAMPLING_ENV, "1") != "0"


def needs_host_row(ctx: SamplingContext) -> bool:
    """Whether this sequence's next token needs its full logits row on the host sampler."""
    params = ctx.params
    return (
        params.logprobs is not None
        or params.prompt_logprobs is not None
        or params.allowed_token_ids is not None
        or bool(ctx.bad_words_token_ids)
        or bool(params.logit_bias)
        or (params.min_tokens > 0 and len(ctx.output_token_ids) < params.min_tokens)
        or params.repetition_penalty != 1.0
        or params.frequency_penalty != 0.0
        or params.presence_penalty != 0.0
    )


def sample_rows(
    logits: DeviceLogits,
    rows: Sequence[int],
    contexts: Sequence[SamplingContext],
    sampler: Sampler,
) -> np.ndarray:
    """int64 tokens for `rows` of `logits`, row `rows[i]` drawn under `contexts[i]`.

    All greedy: one argmax over the tensor. Otherwise one `sample` call in which the rows not
    listed are reduced greedily and ignored. Random rows draw their uniforms from `sampler`.
    """
    picked = np.asarray(rows, dtype=np.int64)
    random_rows = [i for i, ctx in enumerate(contexts) if not ctx.params.greedy]
    if not random_rows:
        return logits.argmax()[picked]
    count = logits.shape[0]
    temperature = np.zeros(count, np.float32)
    top_k = np.zeros(count, np.int64)
    top_p = np.ones(count, np.float32)
    min_p = np.zeros(count, np.float32)
    keys = np.zeros(count, np.uint32)
    uniforms = sampler.uniforms([contexts[i] for i in random_rows])
    for i, uniform in zip(random_rows, uniforms, strict=True):
        row, params = rows[i], contexts[i].params
        temperature[row] = params.temperature
        top_k[row] = params.top_k
        top_p[row] = params.top_p
        min_p[row] = params.min_p
        keys[row] = int(uniform * 2**32)
    return logits.sample(temperature, top_k, top_p, min_p, keys)[picked]
