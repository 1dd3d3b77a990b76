"""The recurrent-state pool on the device: per recurrent layer a convolution-state pool and
an SSM-state pool, `[slots, ...]` fp32 arrays the compiled forward updates in place.

Why it exists: a gated delta net layer keeps one fixed-size state per sequence instead of
KV pages, and its kernels read and write it at a per-sequence slot of a pool they are
handed (model_defs/gated_delta_net.py). Someone must own those pools for the life of the
engine, clear a slot before a new sequence uses it, and hand the forward the slots of its
batch rows with the pools; this is that owner. Which sequence holds which slot is decided
by recurrent_slots.py (through the block manager); this class only knows slots.

Layout: the runtime spec gives each state's size in bytes, so each pool is `[slots, row]`
fp32 with `row = bytes / 4`; a slot's row is contiguous, so the forward's view of it as
the layer's `[K - 1, conv_dim]` or `[heads, k_dim, v_dim]` is a free reshape (`views`).
Layers are ordered as the spec lists them: kind by kind, layer by layer within a kind.
A slot is zeroed by copying, on the device, a zero row kept beside the pools (one per row
size: a few MiB at most, not counted in the pool's bytes).

Snapshots (speculative decoding): a verify forward folds a sequence's last token and all
its drafts into its state, and a state cannot be cut back the way KV pages are. A pool
built with `snapshots` holds a second row per slot (rows `num_slots + slot`, which no
forward is handed): `save(slot)` copies the slot's state there before the verify forward,
`restore(slot)` copies it back when a draft was rejected (runtime/speculative/speculator.py
then recomputes the accepted tokens), so a rejected draft leaves no trace in the state.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import tvm

from vllm_tvm.artifacts.runtime_spec import RecurrentStateSpec

STATE_DTYPE = "float32"
STATE_ITEM_BYTES = 4


def _row_length(state: RecurrentStateSpec, name: str, size: int) -> int:
    if size % STATE_ITEM_BYTES:
        raise ValueError(
            f"{state.kind} {name} of {size} bytes is not a whole number of {STATE_DTYPE} "
            "values; the recurrent-state pool holds fp32 states"
        )
    return size // STATE_ITEM_BYTES


@dataclass(frozen=True)
class RecurrentForwardState:
    """What one forward over recurrent layers takes: the slot of each batch row (int32, on
    the device, distinct) and every layer's pools, in spec order."""

    slots: Any
    conv_pools: list[Any]
    ssm_pools: list[Any]


class RecurrentStatePool:
    """Every recurrent layer's conv and SSM pools of `num_slots` slots on one device."""

    def __init__(
        self,
        states: Sequence[RecurrentStateSpec],
        num_slots: int,
        device: Any,
        snapshots: bool = False,
    ) -> None:
        """`snapshots`: keep a snapshot row per slot (`save` / `restore`, module doc)."""
        if num_slots < 1:
            raise ValueError(f"a recurrent-state pool needs at least one slot, got {num_slots}")
        self.num_slots = num_slots
        self.snapshots = snapshots
        self.device = device
        self.conv_pools: list[Any] = []
        self.ssm_pools: list[Any] = []
        self._zero_rows: dict[int, Any] = {}
        for state in states:
            conv_row = _row_length(state, "conv state", state.conv_state_bytes)
            ssm_row = _row_length(state, "SSM state", state.ssm_state_bytes)
            for _ in range(state.layers):
                self.conv_pools.append(self._new_pool(conv_row))
                self.ssm_pools.append(self._new_pool(ssm_row))

    def _new_pool(self, row: int) -> Any:
        """An uninitialised pool of `[num_slots, row]`, twice as many rows with snapshots
        (every slot is zeroed before its use)."""
        if row not in self._zero_rows:
            self._zero_rows[row] = tvm.runtime.tensor(np.zeros(row, STATE_DTYPE), self.device)
        rows = self.num_slots * (2 if self.snapshots else 1)
        return tvm.runtime.empty((rows, row), STATE_DTYPE, self.device)

    @property
    def nbytes(self) -> int:
        """Device bytes of the pools, snapshot rows included (the zero rows aside)."""
        pools = [*self.conv_pools, *self.ssm_pools]
        return sum(int(pool.shape[0]) * int(pool.shape[1]) * STATE_ITEM_BYTES for pool in pools)

    def _rows(self, index: int) -> list[Any]:
        """Row `index` of every pool, seen in place."""
        views = []
        for pool in (*self.conv_pools, *self.ssm_pools):
            row = int(pool.shape[1])
            views.append(pool._create_view((row,), STATE_DTYPE, index * row * STATE_ITEM_BYTES))
        return views

    def _check_slot(self, slot: int) -> None:
        if not 0 <= slot < self.num_slots:
            raise IndexError(f"slot {slot} is outside the pool's {self.num_slots} slots")

    def zero_slot(self, slot: int) -> None:
        """Clear `slot` in every pool, on the device: a sequence starts from a zero state."""
        self._check_slot(slot)
        for view in self._rows(slot):
            view.copyfrom(self._zero_rows[int(view.shape[0])])

    def save(self, slot: int) -> None:
        """Copy `slot`'s state to its snapshot row, on the device (module doc)."""
        self._copy(slot, self.num_slots + slot)

    def restore(self, slot: int) -> None:
        """Copy `slot`'s snapshot back over its state: the state as `save` found it."""
        self._copy(self.num_slots + slot, slot)

    def _copy(self, source: int, destination: int) -> None:
        if not self.snapshots:
            raise ValueError("this recurrent-state pool keeps no snapshots")
        self._check_slot(min(source, destination))
        for target, origin in zip(self._rows(destination), self._rows(source), strict=True):
            target.copyfrom(origin)

    def forward_state(self, slots: Sequence[int]) -> RecurrentForwardState:
        """The slots of a batch's rows (row b uses `slots[b]`) with the pools, for the
        compiled forward; slots must be distinct, as the kernels update them in place."""
        if len(set(slots)) != len(slots):
            raise ValueError(f"a forward's slots must be distinct, got {list(slots)}")
        on_device = tvm.runtime.tensor(np.asarray(slots, dtype=np.int32), self.device)
        return RecurrentForwardState(on_device, list(self.conv_pools), list(self.ssm_pools))

    def take_back(self, conv_pools: Sequence[Any], ssm_pools: Sequence[Any]) -> None:
        """Hold the pools a compiled forward returned: Relax updates its arguments in place
        but only promises the returned values, so those are the pools from now on."""
        if (len(conv_pools), len(ssm_pools)) != (len(self.conv_pools), len(self.ssm_pools)):
            raise ValueError("a forward returned a different number of state pools")
        self.conv_pools, self.ssm_pools = list(conv_pools), list(ssm_pools)

    @staticmethod
    def views(pools: Sequence[Any], slot_shape: tuple[int, ...]) -> list[Any]:
        """`pools` seen as `[slots, *slot_shape]` (the layer's own state shape)."""
        for pool in pools:
            if int(np.prod(slot_shape)) != int(pool.shape[1]):
                raise ValueError(f"a slot of {pool.shape[1]} values cannot be seen as {slot_shape}")
        return [pool._create_view((int(pool.shape[0]), *slot_shape)) for pool in pools]
