"""The names both sides of the owned-KV contract agree on: the functions an artifact exports
when its model runs over KV pages the runtime owns (model_defs/owned_kv.py), the switch that
turns them off, and the batch bound of the decode step.

Why in artifacts: the compiler decides whether to export the functions and the runtime
whether to call them; both read the one switch here.
"""

from __future__ import annotations

import os

OWNED_PREFILL = "prefill_owned"
OWNED_PREFILL_FRESH = "prefill_owned_fresh"
"""The prefill of sequences with nothing cached: attention over the rows' own q/k/v, no
page reads (measured on the H200 at the 8B shape, the paged kernel serving a lone
1,024-token prompt took TTFT from 110 ms on TVM's cache to 260 ms)."""
OWNED_DECODE = "decode_owned"
OWNED_DECODE_SINGLE = "decode_owned_single"
"""`decode_owned` for one sequence: static shapes let every projection be scheduled as a
plain GEMV, as the cache's `decode_single` does (measured on the H200 at the 8B shape, the
dynamic-batch step ran b1 at 5.44 ms a token against the cache path's 5.18)."""
OWNED_DECODE_MAX_BATCH = 256
"""The largest decode batch `decode_owned` serves: the bound its intermediate buffers are
planned for, so a captured graph's buffers hold any bucket up to it."""
OWNED_KV_ENV = "VLLM_TVM_OWNED_KV"
"""The switch: "1" on at compile time (every target; refused by name for a model the owned
pages do not serve), "0" off (compile: not exported; run: the cache's functions are called
even when exported); unset: off at compile time, on at run time whenever an artifact
exports the functions."""


def owned_kv_setting() -> str | None:
    """`OWNED_KV_ENV`'s value ("0", "1"), None when unset; any other value is refused."""
    setting = os.environ.get(OWNED_KV_ENV)
    if setting not in (None, "0", "1"):
        raise ValueError(f"{OWNED_KV_ENV}={setting!r}: expected '0' or '1'")
    return setting
