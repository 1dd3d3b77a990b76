"""The causal depthwise conv1d of Gated DeltaNet layers, with its rolling conv state: TIR.

What it computes, for each sequence of a ragged batch and each channel c, with kernel size K
and the sequence's conv state (the K - 1 inputs before its first new token, oldest first;
zeros for a fresh sequence):

    y[t, c] = silu(sum_j weight[c, j] * x[t - (K - 1) + j, c])

reading x before the first new token from the state, and hands back the state after the
last new token (the last K - 1 inputs, reaching into the old state when fewer than K - 1
tokens arrived). This is transformers' `causal_conv1d_fn` / `causal_conv1d_update` with the
layer's SiLU; transformers keeps K inputs in its cache, of which the convolution reads the
last K - 1. Decode is the same kernel with one token per sequence.

Layout (recurrent_layout.py): a task per (sequence, block of channels); on GPUs a thread per
channel walks its sequence's tokens, on CPUs one loop over tokens with the channels
innermost (vectorised). Inputs and outputs are fp32. States: a pool [slots, K - 1,
channels], tokens major so a step reads and writes whole rows, sequence b's at `slots[b]`,
updated in place: a thread reads its channel's old state for the outputs first, then
writes the new entries in ascending order, entry j from old entry `length + j` >= j, which
no write has reached yet.
"""

from __future__ import annotations

import math

from tvm import tirx
from tvm.script import tirx as T

from vllm_tvm.schedules.recurrent_layout import ColumnLayout

GPU_CHANNELS_PER_TASK = 128
"""Channels of one GPU thread block (a thread each) at most; a block is the largest divisor
of the channel count up to this, so no thread falls past the last channel."""


def causal_conv1d(channels: int, kernel_size: int, gpu: bool) -> tirx.PrimFunc:
    """`(x [n, channels], weight [channels, kernel_size], seq_starts [batch + 1] i32,
    slots [batch] i32, states [pool, kernel_size - 1, channels]) -> y [n, channels]`, fp32
    but the indices; sequence b's state at states[slots[b]], updated in place."""
    taps = kernel_size - 1
    block = math.gcd(GPU_CHANNELS_PER_TASK, channels) if gpu else channels
    blocks = -(-channels // block)
    layout = ColumnLayout(block, gpu)

    @T.prim_func(private=True, s_tir=True)
    def conv(
        var_x: T.handle,
        var_weight: T.handle,
        var_seq_starts: T.handle,
        var_slots: T.handle,
        var_states: T.handle,
        var_y: T.handle,
    ) -> None:
        T.func_attr({"tirx.is_scheduled": True, "tirx.noalias": True})
        tokens = T.int64()
        batch = T.int64()
        pool = T.int64()
        x = T.match_buffer(var_x, (tokens, channels), "float32")
        weight = T.match_buffer(var_weight, (channels, kernel_size), "float32")
        seq_starts = T.match_buffer(var_seq_starts, (batch + 1,), "int32")
        slots = T.match_buffer(var_slots, (batch,), "int32")
        states = T.match_buffer(var_states, (pool, taps, channels), "float32")
        y = T.match_buffer(var_y, (tokens, channels), "float32")
        for task in layout.task_loop(batch * blocks):
            for tx in layout.thread_loop():
                with T.sblock("causal_conv"):
                    T.reads()
                    T.writes()
                    acc = T.sblock_alloc_buffer(
                        (layout.columns_per_thread,), "float32", scope="local"
                    )
                    seq: T.let[T.int64] = task // blocks
                    slot: T.let[T.int64] = T.Cast("int64", slots[seq])
                    first: T.let[T.int64] = T.Cast("int64", seq_starts[seq])
                    length: T.let[T.int64] = T.Cast("int64", seq_starts[seq + 1]) - first
                    base: T.let[T.int64] = (task % blocks) * block
                    for t in T.serial(length):
                        for jj in layout.column_loop():
                            acc[jj] = T.float32(0)
                        for j in T.serial(kernel_size):
                            for jj in layout.column_loop():
                                acc[jj] = acc[jj] + weight[base + layout.column(tx, jj), j] * (
                                    T.if_then_else(
                                        t - taps + j >= 0,
                                        x[
                                            first + T.max(t - taps + j, 0),
                                            base + layout.column(tx, jj),
                                        ],
                                        states[slot, T.max(t + j, 0), base + layout.column(tx, jj)],
                                    )
                                )
                        for jj in layout.column_loop():
                            y[first + t, base + layout.column(tx, jj)] = acc[jj] * T.sigmoid(
                                acc[jj]
                            )
                    for j in T.serial(taps):
                        for jj in layout.column_loop():
                            states[slot, j, base + layout.column(tx, jj)] = T.if_then_else(
                                length - taps + j >= 0,
                                x[
                                    first + T.max(length - taps + j, 0),
                                    base + layout.column(tx, jj),
                                ],
                                states[slot, T.max(length + j, 0), base + layout.column(tx, jj)],
                            )

    return conv
