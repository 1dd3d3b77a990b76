"""Which running sequence holds which slot of the recurrent-state pool.

Why it exists: a hybrid model's recurrent layers (gated delta net) keep a fixed-size state
per sequence, a convolution state and an SSM state per layer, in pools indexed by a slot
(runtime/kv/recurrent_pool.py holds them on the device). Unlike KV blocks a state does not
grow with the sequence and cannot be shared or cut back: it is the whole past folded into
one value. So the rules are few, and kept here:

- one slot per running sequence, taken at admission (the block manager's `allocate`) and
  zeroed then, so a sequence never sees another's state;
- kept across prefill chunks (the state after a chunk is where the next chunk starts);
- given back at finish, abort, error and preemption. A preempted sequence recomputes its
  tokens from a fresh zeroed slot when it is admitted again (its state cannot be rebuilt
  from the KV blocks that survive in the prefix cache, so prefix caching is off for such
  models: `RuntimeSpec.prefix_caching`);
- never two live sequences on one slot; as many running sequences as slots at most.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from vllm_tvm.artifacts.runtime_spec import RecurrentStateSpec

if TYPE_CHECKING:
    from vllm_tvm.runtime.requests.sequence import EngineSequence


def state_bytes_per_slot(states: Sequence[RecurrentStateSpec]) -> int:
    """Device bytes one sequence's recurrent state takes over all recurrent layers (on each
    rank): layers x (conv + SSM state bytes) for each kind of state."""
    return sum(state.layers * (state.conv_state_bytes + state.ssm_state_bytes) for state in states)


class RecurrentSlots:
    """The slots of one recurrent-state pool and the sequences holding them."""

    def __init__(self, num_slots: int, zero_slot: Callable[[int], None]) -> None:
        """`zero_slot(slot)` clears a slot's state on the device (the pool's `zero_slot`);
        it is called when a sequence takes the slot."""
        if num_slots < 1:
            raise ValueError(f"a recurrent-state pool needs at least one slot, got {num_slots}")
        self.num_slots = num_slots
        self._zero_slot = zero_slot
        self._free: list[int] = list(range(num_slots - 1, -1, -1))  # lowest slot taken first
        self._holders: dict[int, int] = {}
        """slot -> seq_id of the sequence holding it."""

    @property
    def num_free(self) -> int:
        return len(self._free)

    @property
    def num_used(self) -> int:
        return self.num_slots - len(self._free)

    @property
    def usage(self) -> float:
        """Fraction of the slots held by running sequences."""
        return self.num_used / self.num_slots

    def holders(self) -> dict[int, int]:
        """A copy of slot -> seq_id for every slot in use."""
        return dict(self._holders)

    def take(self, seq: EngineSequence) -> None:
        """Give `seq` a free slot, zeroed (check `num_free` first)."""
        assert seq.recurrent_slot is None, f"sequence {seq.seq_id} already holds a slot"
        slot = self._free.pop()
        self._zero_slot(slot)
        self._holders[slot] = seq.seq_id
        seq.recurrent_slot = slot

    def release(self, seq: EngineSequence) -> None:
        """`seq` gives its slot back (no-op when it holds none)."""
        slot = seq.recurrent_slot
        if slot is None:
            return
        holder = self._holders.pop(slot)
        assert holder == seq.seq_id, f"slot {slot} held by {holder}, released by {seq.seq_id}"
        self._free.append(slot)
        seq.recurrent_slot = None
