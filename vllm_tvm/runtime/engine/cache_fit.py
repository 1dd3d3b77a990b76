"""Whether an engine's cache configuration fits its model's runtime spec: the prefix cache
only where the spec allows it, and for a model with recurrent state the slots that hold it.

Why a module of its own: the builder settles the configuration from the spec, but an engine
can be built from parts (benchmarks, tests, tools), and a wrong part would not fail loudly:
a prefix cache shared by a sliding-window or recurrent model gives wrong tokens, and a
recurrent model run with more sequences than slots, or with drafts over a pool that keeps
no snapshots (so a rejected draft could not be taken out of the state), too. So the
engine checks here, once, before its first step.

Prefix caching and recurrent state: a cached block holds KV entries only; the recurrent
state after it is not kept, so a sequence admitted on a prefix hit would start its state
from zero in the middle of its prompt. vLLM's hybrid cache keeps state snapshots at block
boundaries for that; this runtime does not (yet), so a compiled model with recurrent state
says `prefix_caching: false` and every prompt is computed from its first token.
"""

from __future__ import annotations

from vllm_tvm.runtime.engine.scheduler import SchedulerConfig
from vllm_tvm.runtime.kv.cache_config import CacheConfig
from vllm_tvm.runtime.kv.recurrent_slots import RecurrentSlots
from vllm_tvm.runtime.model.runner_interface import Runner
from vllm_tvm.runtime.speculative.config import SpeculativeConfig


def recurrent_slots_for(
    runner: Runner,
    cache: CacheConfig,
    scheduler: SchedulerConfig,
    speculative: SpeculativeConfig | None,
) -> RecurrentSlots | None:
    """The slots of `runner`'s recurrent-state pool for the block manager (None: the model
    keeps no recurrent state); ValueError naming what does not fit the model's spec."""
    spec = runner.spec
    if cache.enable_prefix_caching and not spec.prefix_caching:
        raise ValueError("prefix caching is on, but the model's runtime spec does not allow it")
    if not spec.recurrent_state:
        return None
    kinds = ", ".join(sorted({state.kind for state in spec.recurrent_state}))
    if spec.prefix_caching:
        raise ValueError(
            f"the model keeps recurrent state ({kinds}) but its runtime spec allows prefix "
            "caching: cached blocks do not hold that state"
        )
    pool = runner.recurrent_pool
    if speculative is not None and pool is not None and not pool.snapshots:
        raise ValueError(
            f"speculative decoding ({speculative.method}) over recurrent state ({kinds}) needs "
            "a recurrent-state pool that keeps a snapshot of each slot, to take rejected "
            "drafts back out of the state"
        )
    if pool is None or pool.num_slots != cache.recurrent_slots:
        held = 0 if pool is None else pool.num_slots
        raise ValueError(
            f"the runner's recurrent-state pool has {held} slots; the cache config "
            f"{cache.recurrent_slots}"
        )
    if scheduler.max_num_seqs > pool.num_slots:
        raise ValueError(
            f"max_num_seqs {scheduler.max_num_seqs} exceeds the {pool.num_slots} "
            "recurrent-state slots"
        )
    return RecurrentSlots(pool.num_slots, pool.zero_slot)
