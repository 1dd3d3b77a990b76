"""The inputs of an image prefill that the host builds: which keys each row may see.

Why apart from the runner: it is plain numpy over the forward's layout (which rows are an
image's soft tokens, which sequence each row belongs to), testable without an artifact, and
the runner only hands the result to the compiled `prefill_images`.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from vllm_tvm.runtime.requests.prompt_images import ForwardImages

IMAGE_PREFILL = "prefill_images"
"""The prefill of a vision model's forwards that carry image soft tokens."""
MASKED = -1e30
"""The attention bias of a key a row may not see (exp underflows to 0 in fp32)."""


def image_attention_inputs(
    lengths: Sequence[int], images: ForwardImages
) -> tuple[np.ndarray, np.ndarray]:
    """The image prefill's attention bias [tokens, tokens] (a row sees the keys of its own
    sequence up to itself, and all of its image) and its soft-token rows [tokens] (1 at a
    soft token, else 0; float32, cast to the model's dtype by the caller)."""
    sequence = np.repeat(np.arange(len(lengths)), lengths)
    group = np.full(len(sequence), -1)
    group[images.rows] = images.groups
    index = np.arange(len(sequence))
    same_image = (group[:, None] == group[None, :]) & (group[:, None] >= 0)
    causal = index[None, :] <= index[:, None]
    allowed = (sequence[:, None] == sequence[None, :]) & (causal | same_image)
    return np.where(allowed, 0.0, MASKED).astype(np.float32), (group >= 0).astype(np.float32)
