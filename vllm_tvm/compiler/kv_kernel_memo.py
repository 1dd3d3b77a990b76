"""Builds each of the paged KV cache's TIR kernels once per process, not once per export.

Why: TVM's `TIRPagedKVCache` writes its ~15 kernels (attention prefill/decode, tree
attention, RoPE, page copies) as TVMScript and parses them every time a cache is made, so
an export of even a two-layer model spends almost all its time (2-3 s of 2.3-3 s on a quiet
machine) parsing the same kernels again. Every compile and every export in one process (a
test run compiles a hundred) pays it anew.

The kernel factories are pure: each returns a `PrimFunc` decided by its arguments alone
(head counts, head size, dtype, page size, RoPE scaling, sliding window, target), and a
PrimFunc is an immutable IR value that any number of modules may hold. So while an export
runs, `memoised_kv_kernels` puts a memoising wrapper in place of each factory in TVM's
`kv_cache` module (where the cache's constructors look them up), keyed by the factory and a
canonical form of every argument; an argument of a type the key cannot express calls the
factory itself. `VLLM_TVM_KV_KERNEL_MEMO=0` turns it off (every export parses again).
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
from collections.abc import Callable, Iterator
from typing import Any

from tvm.relax.frontend.nn.llm import kv_cache
from tvm.target import Target

MEMO_ENV = "VLLM_TVM_KV_KERNEL_MEMO"
KERNEL_FACTORIES = tuple(
    name
    for name in kv_cache.__all__
    if name.startswith(("_attention", "_merge", "_copy", "_compact", "_kv_cache", "tree_attn"))
    or name == "llama_rope_with_position_map"
)
"""The kernel factories `TIRPagedKVCache` / `FlashInferPagedKVCache` call, by name."""
_built: dict[tuple[str, str], Any] = {}


class _Unkeyable(Exception):
    """An argument the memo key cannot express exactly."""


def _canonical(value: Any) -> Any:
    """A JSON-able form of `value` equal for equal arguments and different otherwise."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return [type(value).__name__, value]
    if isinstance(value, Target):
        return ["Target", str(value)]  # the JSON of every attribute, the host's included
    if isinstance(value, dict):
        return ["dict", sorted((str(k), _canonical(v)) for k, v in value.items())]
    if isinstance(value, (list, tuple)):
        return [type(value).__name__, [_canonical(item) for item in value]]
    raise _Unkeyable(type(value).__name__)


def _memoised(name: str, factory: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(factory)
    def build(*args: Any, **kwargs: Any) -> Any:
        try:
            key = (name, json.dumps(_canonical([list(args), kwargs])))
        except _Unkeyable:
            return factory(*args, **kwargs)
        if key not in _built:
            _built[key] = factory(*args, **kwargs)
        return _built[key]

    return build


def built_kernel_count() -> int:
    """How many distinct kernels the memo holds (what a test reads to see a hit or a miss)."""
    return len(_built)


@contextlib.contextmanager
def memoised_kv_kernels() -> Iterator[None]:
    """Within the block, the KV cache's kernel factories return the kernel built before for
    the same arguments; the plain factories are back afterwards."""
    if os.environ.get(MEMO_ENV, "1") == "0":
        yield
        return
    originals = {name: getattr(kv_cache, name) for name in KERNEL_FACTORIES}
    try:
        for name, factory in originals.items():
            setattr(kv_cache, name, _memoised(name, factory))
        yield
    finally:
        for name, factory in originals.items():
            setattr(kv_cache, name, factory)
