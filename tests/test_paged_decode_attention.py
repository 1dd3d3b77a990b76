"""schedules/paged_decode_attention.py's CPU form against float64 numpy, over rows long enough
to span several of its KV tiles (the online softmax across tiles), a part without keys, and
the log-sum-exp the split-KV merge weighs parts by. The CPU form is the GPU form's loops with
one thread a task; the step-level test (test_device_decode_attention.py) covers the rest."""

from __future__ import annotations

import numpy as np
import tvm

from vllm_tvm.schedules.paged_decode_attention import EMPTY_LSE, TILE, paged_decode_attention

Q_HEADS, KV_HEADS, HEAD_DIM, PAGE = 6, 2, 8, 16
KEYS = [2 * TILE + 21, 0, TILE]
"""Keys a part: a partial third tile, none, exactly one full tile."""


def test_cpu_kernel_matches_float64_attention_across_tiles() -> None:
    kernel = paged_decode_attention(Q_HEADS, KV_HEADS, HEAD_DIM, "float32", PAGE, gpu=False)
    executable = tvm.compile(tvm.IRModule({"main": kernel.with_attr("global_symbol", "main")}))
    rng = np.random.default_rng(0)
    pages_each = [-(-n // PAGE) for n in KEYS]
    num_pages = sum(pages_each) + 3
    order = rng.permutation(num_pages).astype(np.int32)
    indptr = np.concatenate([[0], np.cumsum(pages_each)]).astype(np.int32)
    last = np.array(
        [n - (p - 1) * PAGE if p else 0 for n, p in zip(KEYS, pages_each, strict=True)], np.int32
    )
    pages = rng.standard_normal((num_pages, 2, KV_HEADS, PAGE, HEAD_DIM)).astype(np.float32)
    q = rng.standard_normal((len(KEYS), Q_HEADS, HEAD_DIM)).astype(np.float32)
    device = tvm.cpu()
    arrays = [q, pages, indptr, order[: indptr[-1]], last]
    output = tvm.runtime.empty(q.shape, "float32", device)
    lse = tvm.runtime.empty((len(KEYS), Q_HEADS), "float32", device)
    executable["main"](*(tvm.runtime.tensor(a, device) for a in arrays), output, lse)

    group = Q_HEADS // KV_HEADS
    for part, keys in enumerate(KEYS):
        if keys == 0:
            assert not output.numpy()[part].any()
            assert (lse.numpy()[part] == EMPTY_LSE).all()
            continue
        idx = np.arange(keys)
        table = order[indptr[part] : indptr[part + 1]]
        k = pages[table[idx // PAGE], 0, :, idx % PAGE].astype(np.float64)  # [keys, kv, d]
        v = pages[table[idx // PAGE], 1, :, idx % PAGE].astype(np.float64)
        for head in range(Q_HEADS):
            scores = k[:, head // group] @ q[part, head].astype(np.float64) / np.sqrt(HEAD_DIM)
            top = scores.max()
            weights = np.exp(scores - top)
            expected = weights @ v[:, head // group] / weights.sum()
            np.testing.assert_allclose(output.numpy()[part, head], expected, rtol=1e-5, atol=1e-6)
            expected_lse = (top + np.log(weights.sum())) / np.log(2)
            np.testing.assert_allclose(lse.numpy()[part, head], expected_lse, rtol=1e-5)
