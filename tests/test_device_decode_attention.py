"""The device-resident decode step (compiler/device_decode_attention.py fed by
runtime/kv/decode_step_buffers.py) against float64 numpy, and its capture into one CUDA graph.

The CPU build runs the same Relax function with TVM's CPU kernels: a bucket of 4 rows with 3
sequences (one padding row), lengths across page boundaries, pages scattered in the pool,
three layers chained. The oracle reads the KV pages through the block tables itself (not the
packed metadata) and attends in float64. The CUDA check lowers the function for sm_90a and
reads where the kernels ended up: all of them inside one captured region.
"""

from __future__ import annotations

import numpy as np
import pytest
import tvm

from vllm_tvm.compiler.device_decode_attention import (
    APPEND_KERNEL,
    DECODE_KERNEL,
    OWN_KERNEL,
    STEP_FUNCTION,
    TVM_KERNEL,
    DecodeAttentionShape,
    build_decode_attention_step,
)
from vllm_tvm.compiler.pipeline import lowering_pipeline
from vllm_tvm.runtime.kv.decode_step_buffers import (
    SKIPPED_SLOT,
    DecodeStepBuffers,
    DecodeStepLayout,
    pack_decode_step,
)

PAGE = 16
SHAPE = DecodeAttentionShape(num_q_heads=4, num_kv_heads=2, head_dim=16, dtype="float32")
ROWS, PAGES_PER_ROW, NUM_PAGES, LAYERS = 4, 4, 16, 3
SEQ_LENS = [1, 17, 40]
"""Lengths after the step's token: a first token, one past a page, a partly filled third page."""


def test_pack_lays_out_pages_lengths_positions_and_slots() -> None:
    layout = DecodeStepLayout(rows=3, pages_per_row=2)
    packed = pack_decode_step(layout, [[5], [2, 9]], [3, 17], PAGE)

    def part(span: tuple[int, int]) -> list[int]:
        return packed[span[0] : span[0] + span[1]].tolist()

    assert part(layout.page_indptr) == [0, 1, 3, 3]
    assert part(layout.page_values) == [5, 2, 9, 0, 0, 0]
    assert part(layout.last_page_len) == [3, 1, 0]
    assert part(layout.positions) == [2, 16, 0]
    assert part(layout.append_slots) == [5 * PAGE + 2, 9 * PAGE + 0, SKIPPED_SLOT]


def test_pack_splits_a_row_into_parts_of_consecutive_pages() -> None:
    layout = DecodeStepLayout(rows=2, pages_per_row=3, splits=2)
    packed = pack_decode_step(layout, [[5, 6, 7]], [40], PAGE)

    def part(span: tuple[int, int]) -> list[int]:
        return packed[span[0] : span[0] + span[1]].tolist()

    assert part(layout.page_indptr) == [0, 2, 3, 3, 3]
    assert part(layout.page_values) == [5, 6, 7, 0, 0, 0]
    assert part(layout.last_page_len) == [PAGE, 40 - 2 * PAGE, 0, 0]
    assert part(layout.positions) == [39, 39, 0, 0]
    assert part(layout.append_slots) == [7 * PAGE + 7, SKIPPED_SLOT]


@pytest.mark.parametrize(
    ("tables", "lens", "message"),
    [
        ([[1]], [17], "needs 2 pages, has 1"),
        ([[1, 2, 3]], [40], "holds 2 a row"),
        ([[1]] * 4, [1] * 4, "exceeds its bucket of 3"),
        ([[1]], [0], "holds its new token"),
    ],
)
def test_pack_refuses_a_step_its_bucket_cannot_hold(tables, lens, message) -> None:
    with pytest.raises(ValueError, match=message):
        pack_decode_step(DecodeStepLayout(rows=3, pages_per_row=2), tables, lens, PAGE)


def _reference_step(pages, tables, q, k, v):
    """float64: each layer writes k/v at the row's last position, then attends its query
    (the previous layer's output) over the row's keys, read through its block table."""
    group = SHAPE.num_q_heads // SHAPE.num_kv_heads
    pages = [layer.astype(np.float64) for layer in pages]
    query = q.astype(np.float64)
    for layer in pages:
        for row, (table, length) in enumerate(zip(tables, SEQ_LENS, strict=True)):
            page, slot = table[(length - 1) // PAGE], (length - 1) % PAGE
            layer[page, 0, :, slot], layer[page, 1, :, slot] = k[row], v[row]
        out = np.zeros_like(query)
        for row, (table, length) in enumerate(zip(tables, SEQ_LENS, strict=True)):
            idx = np.arange(length)
            keys = layer[np.asarray(table)[idx // PAGE], 0, :, idx % PAGE]  # [len, h_kv, d]
            values = layer[np.asarray(table)[idx // PAGE], 1, :, idx % PAGE]
            for head in range(SHAPE.num_q_heads):
                scores = keys[:, head // group] @ query[row, head] / np.sqrt(SHAPE.head_dim)
                weights = np.exp(scores - scores.max())
                out[row, head] = weights @ values[:, head // group] / weights.sum()
        query = out
    return query, pages


@pytest.mark.parametrize(
    ("splits", "kernel"), [(1, OWN_KERNEL), (2, OWN_KERNEL), (3, OWN_KERNEL), (3, TVM_KERNEL)]
)
def test_cpu_step_matches_float64_paged_attention(splits: int, kernel: str) -> None:
    """splits 3 leaves parts without keys beside parts with keys, in every row but one.
    Our kernel's CPU form is the same TIR as its GPU form, one thread a task; a row of 40
    keys spans a tile boundary only with a tile under 40, so the tiles' online softmax is
    checked on the GPU by benchmarks/h200_decode_capture.py's torch check."""
    target = tvm.target.Target("llvm")
    mod = build_decode_attention_step(
        SHAPE, LAYERS, ROWS, PAGES_PER_ROW, NUM_PAGES, target, splits, kernel
    )
    executable = tvm.compile(mod, target, relax_pipeline=lowering_pipeline(target))
    device = tvm.cpu()
    vm = tvm.runtime.vm.VirtualMachine(executable, device)
    rng = np.random.default_rng(0)
    order = rng.permutation(NUM_PAGES).tolist()
    tables = [order[0:1], order[1:3], order[3:6]]
    pages = [
        rng.standard_normal(SHAPE.pages_shape(NUM_PAGES)).astype(np.float32) for _ in range(LAYERS)
    ]
    heads = (ROWS, SHAPE.num_q_heads, SHAPE.head_dim)
    kv_heads = (ROWS, SHAPE.num_kv_heads, SHAPE.head_dim)
    q, k, v = (rng.standard_normal(s).astype(np.float32) for s in (heads, kv_heads, kv_heads))

    def to_device(array: np.ndarray):
        return tvm.runtime.tensor(array, device)

    buffers = DecodeStepBuffers(ROWS, PAGES_PER_ROW, PAGE, to_device, splits)
    buffers.update(tables, SEQ_LENS)
    device_pages = [to_device(layer) for layer in pages]
    output = vm[STEP_FUNCTION](
        *(to_device(x) for x in (q, k, v)), *buffers.kernel_arguments(), *device_pages
    )
    expected, expected_pages = _reference_step(pages, tables, q[:3], k[:3], v[:3])
    got = output.numpy()
    np.testing.assert_allclose(got[:3], expected, rtol=1e-5, atol=2e-6)
    assert not got[3].any(), "the padding row attends to nothing"
    for written, reference in zip(device_pages, expected_pages, strict=True):
        np.testing.assert_array_equal(written.numpy(), reference.astype(np.float32))


@pytest.mark.parametrize(("rows", "splits"), [(64, 1), (1, 16)])
def test_cuda_step_is_one_captured_graph(rows: int, splits: int) -> None:
    """Every append and attention kernel of the step runs inside the one captured function
    but the last kernel (see build_decode_attention_step): the last attention, or with
    split KV the last merge."""
    target = tvm.target.Target({"kind": "cuda", "arch": "sm_90a"}, host="llvm")
    shape = DecodeAttentionShape(32, 8, 128, "bfloat16")
    mod = build_decode_attention_step(shape, LAYERS, rows, 64, 4096, target, splits)
    with tvm.transform.PassContext(config={"relax.backend.use_cuda_graph": True}):
        lowered = lowering_pipeline(target)(mod)
    captured = [gv.name_hint for gv in lowered.functions if gv.name_hint.endswith("_capture")]
    assert captured == [f"{STEP_FUNCTION}_cuda_graph_capture"]
    step = lowered[STEP_FUNCTION].script()
    capture = lowered[captured[0]].script()
    assert step.count("vm.builtin.cuda_graph.run_or_capture") == 1
    assert (step.count(f"{APPEND_KERNEL}("), capture.count(f"{APPEND_KERNEL}(")) == (0, LAYERS)
    outside = 1 if splits == 1 else 0
    assert (step.count(f"{DECODE_KERNEL}("), capture.count(f"{DECODE_KERNEL}(")) == (
        outside,
        LAYERS - outside,
    )
