"""The names both sides of the owned-KV contract agree on: the functions an artifact exports
when its model runs over KV pages the runtime owns (model_defs/owned_kv.py), and the batch
bound of the decode step.

Why in artifacts: the compiler exports the functions (when the `owned_kv` compile option
asks, artifacts/compile_options.py) and the runtime calls them (when the runtime spec has
`owned_pages`); both read the names here.
"""

from __future__ import annotations

OWNED_PREFILL = "prefill_owned"
OWNED_PREFILL_FRESH = "prefill_owned_fresh"
"""The prefill of sequences with nothing cached: attention over the rows' own q/k/v, no
page reads (measured on the H200 at the 8B shape, the paged kernel serving a lone
1,024-token prompt took TTFT from 110 ms on TVM's cache to 260 ms)."""
OWNED_PREFILL_MIXED = "prefill_owned_mixed"
"""A step of one-token rows of cached sequences beside prompts with nothing cached: the
former through the decode kernel, the latter through the ragged one."""
OWNED_DECODE = "decode_owned"
OWNED_DECODE_SINGLE = "decode_owned_single"
"""`decode_owned` for one sequence: static shapes let every projection be scheduled as a
plain GEMV, as the cache's `decode_single` does (measured on the H200 at the 8B shape, the
dynamic-batch step ran b1 at 5.44 ms a token against the cache path's 5.18)."""
OWNED_RAGGED_ATTENTION = "vllm_tvm.owned_ragged_attention"
"""The packed function `(q, k, v, q_indptr, out, lse)` an artifact built with attention
`flashinfer` calls for a prefill's causal product over its rows' own k/v; the runtime
registers it (FlashInfer's ragged kernel from the model library, planned for the forward's
rows) before it loads the library. Its lse is base 2, as TVM's kernels' and merge's."""
RAGGED_TIR = "tir"
RAGGED_FLASHINFER = "flashinfer"
"""`OwnedPagesSpec.ragged_attention`: TVM's TIR ragged kernel inside the library, or
OWNED_RAGGED_ATTENTION."""
OWNED_DECODE_MAX_BATCH = 256
"""The largest decode batch `decode_owned` serves: the bound its intermediate buffers are
planned for, so a captured graph's buffers hold any bucket up to it."""
