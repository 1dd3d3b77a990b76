"""The vector-width GPU schedules take exactly the kernels they can prove safe.

gpu_elementwise.py turns an elementwise kernel into 16-byte accesses, and gpu_norm.py hands
wide RMSNorm rows to dlight's vector rule. A wrong "yes" would read misaligned or out of
bounds on the GPU, so these tests pin every reason to decline, and check (through the CUDA
source of a kernel built the way artifacts are, with nvcc) that a kernel taken really moves
16 bytes an access.
What the kernels compute is checked on the H200 against transformers
(benchmarks/h200_llama.py --check; docs/BENCHMARKS.md).
"""

from __future__ import annotations

import shutil

import pytest
import tvm
import tvm_ffi
from tvm import relax, tirx
from tvm.relax.frontend import nn
from tvm.script import tirx as T

from vllm_tvm.compiler.cuda_build import cuda_build_environment
from vllm_tvm.compiler.targets import resolve_target
from vllm_tvm.schedules.gpu_elementwise import VectorizedElementwise
from vllm_tvm.schedules.gpu_norm import WideRowRMSNorm

CUDA = resolve_target("cuda").make_target()
CPU = resolve_target("llvm").make_target()


def _elementwise(shape_in: tuple, shape_out: tuple, body, dtype: str = "bfloat16"):
    """A PrimFunc writing out[i, j] = body(a, i, j) over a symbolic row count."""

    @T.prim_func(private=True, s_tir=True)
    def func(var_a: T.handle, var_out: T.handle):
        n = T.int64()
        a = T.match_buffer(var_a, (n, *shape_in), dtype)
        out = T.match_buffer(var_out, (n, *shape_out), dtype)
        for i, j in T.grid(n, shape_out[0]):
            with T.sblock("compute"):
                vi, vj = T.axis.remap("SS", [i, j])
                out[vi, vj] = body(a, vi, vj)

    return func


def _add_rows(dtype: str = "bfloat16", width: int = 64):
    @T.prim_func(private=True, s_tir=True)
    def func(var_a: T.handle, var_b: T.handle, var_out: T.handle):
        n = T.int64()
        a = T.match_buffer(var_a, (n, width), dtype)
        b = T.match_buffer(var_b, (n, width), dtype)
        out = T.match_buffer(var_out, (n, width), dtype)
        for i, j in T.grid(n, width):
            with T.sblock("add"):
                vi, vj = T.axis.remap("SS", [i, j])
                out[vi, vj] = a[vi, vj] + b[vi, vj]

    return func


def _vectorized_extents(sch) -> list[int]:
    """The extents of the vectorized loops of a scheduled function."""
    extents: list[int] = []

    def keep(loop: tirx.For) -> None:
        if loop.kind == tirx.ForKind.VECTORIZED:
            extents.append(int(loop.extent))

    tvm_ffi.structural_walk(sch.mod["main"].body, [(tirx.For, keep)])
    return extents


def _apply(rule, func, target=CUDA):
    with target:
        return rule.apply(func, target, False)


def test_a_bfloat16_add_takes_eight_lanes_and_a_float32_add_four():
    assert _vectorized_extents(_apply(VectorizedElementwise(), _add_rows("bfloat16"))) == [8]
    assert _vectorized_extents(_apply(VectorizedElementwise(), _add_rows("float32"))) == [4]


def test_an_index_or_row_value_that_does_not_move_with_the_row_is_allowed():
    # out[i, j] = a[i, j] * a[i, 0]: the second read is one value per row.
    func = _elementwise((64,), (64,), lambda a, i, j: a[i, j] * a[i, 0])
    assert _vectorized_extents(_apply(VectorizedElementwise(), func)) == [8]


def test_an_aligned_offset_into_a_wider_row_is_allowed():
    # SiLU-and-mul's shape: the second half of a [n, 2w] row, w a multiple of the lanes.
    func = _elementwise((128,), (64,), lambda a, i, j: a[i, j] * a[i, j + 64])
    assert _vectorized_extents(_apply(VectorizedElementwise(), func)) == [8]


@pytest.mark.parametrize(
    ("why", "func"),
    [
        ("row not a multiple of 8", _add_rows(width=12)),
        (
            "offset breaks 16-byte alignment",
            _elementwise((72,), (64,), lambda a, i, j: a[i, j + 1]),
        ),
        (
            "source row width not a multiple of 8",
            _elementwise((68,), (64,), lambda a, i, j: a[i, j]),
        ),
        ("the row index moves with the lane", _elementwise((64,), (64,), lambda a, i, j: a[j, i])),
        ("a strided read", _elementwise((128,), (64,), lambda a, i, j: a[i, 2 * j])),
        ("a reshaped read", _elementwise((8, 8), (64,), lambda a, i, j: a[i, j // 8, j % 8])),
    ],
)
def test_kernels_it_cannot_prove_safe_are_declined(why: str, func):
    assert _apply(VectorizedElementwise(), func) is None, why


def test_an_output_not_written_along_the_innermost_axis_is_declined():
    @T.prim_func(private=True, s_tir=True)
    def func(var_a: T.handle, var_out: T.handle):
        n = T.int64()
        a = T.match_buffer(var_a, (n, 64), "bfloat16")
        out = T.match_buffer(var_out, (n, 64), "bfloat16")
        for i, j in T.grid(n, 64):
            with T.sblock("row_first"):
                vi, vj = T.axis.remap("SS", [i, j])
                out[vi, 0] = a[vi, vj]

    assert _apply(VectorizedElementwise(), func) is None


def test_a_buffer_with_an_element_offset_is_declined():
    @T.prim_func(private=True, s_tir=True)
    def func(var_a: T.handle, var_out: T.handle):
        n = T.int64()
        offset = T.int64()
        a = T.match_buffer(var_a, (n, 64), "bfloat16", elem_offset=offset)
        out = T.match_buffer(var_out, (n, 64), "bfloat16")
        for i, j in T.grid(n, 64):
            with T.sblock("copy"):
                vi, vj = T.axis.remap("SS", [i, j])
                out[vi, vj] = a[vi, vj]

    assert _apply(VectorizedElementwise(), func) is None


def test_cpu_targets_are_left_alone():
    assert _apply(VectorizedElementwise(), _add_rows(), CPU) is None


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc on PATH")
def test_the_cuda_source_moves_sixteen_bytes_per_access():
    """Built inside the artifacts' CUDA build scope: whether TVM's CUDA runtime is loaded
    depends on which tests ran before, and TVM's own default compiler (NVRTC) is absent."""
    func = _add_rows().with_attr("global_symbol", "add_rows")
    with cuda_build_environment(resolve_target("cuda")) as target:
        scheduled = VectorizedElementwise().apply(func, target, False).mod["main"]
        source = tvm.tirx.build(tvm.IRModule({"add_rows": scheduled}), target=target)
    cuda = source.imports[0].inspect_source()
    # Two 16-byte loads and one 16-byte store per thread.
    assert cuda.count("*(uint4*)") == 3, cuda


def _take_rows(width: int):
    """An embedding lookup: out[i, j] = table[ids[i], j] (bfloat16 rows of `width`)."""

    @T.prim_func(private=True, s_tir=True)
    def func(table: T.Buffer((64, width), "bfloat16"), var_ids: T.handle, var_out: T.handle):
        n = T.int64()
        ids = T.match_buffer(var_ids, (n,), "int32")
        out = T.match_buffer(var_out, (n, width), "bfloat16")
        for i, j in T.grid(n, width):
            with T.sblock("take"):
                vi, vj = T.axis.remap("SS", [i, j])
                out[vi, vj] = table[ids[vi], vj]

    return func


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc on PATH")
def test_a_row_gather_whose_rows_are_not_whole_thread_blocks_builds_in_vectors():
    """Qwen3.6-27B's 5120-wide embedding rows: 640 lanes of 8 per row, not a multiple of the
    256 threads of a block. Fusing the rows before the lane split made the token id each lane
    reads depend on the lane, a bfloat16 vector gather CUDA codegen cannot emit."""
    func = _take_rows(5120).with_attr("global_symbol", "take_rows")
    with cuda_build_environment(resolve_target("cuda")) as target:
        scheduled = VectorizedElementwise().apply(func, target, False).mod["main"]
        source = tvm.tirx.build(tvm.IRModule({"take_rows": scheduled}), target=target)
    cuda = source.imports[0].inspect_source()
    assert cuda.count("*(uint4*)") == 2, cuda


def _heads_first():
    """The image prefill's q/k/v transpose: [n, heads, 16] -> [heads, n, 16], n symbolic."""

    @T.prim_func(private=True, s_tir=True)
    def func(var_a: T.handle, var_out: T.handle):
        n = T.int64()
        a = T.match_buffer(var_a, (n, 4, 16), "bfloat16")
        out = T.match_buffer(var_out, (4, n, 16), "bfloat16")
        for h, i, d in T.grid(4, n, 16):
            with T.sblock("transpose"):
                vh, vi, vd = T.axis.remap("SSS", [h, i, d])
                out[vh, vi, vd] = a[vi, vh, vd]

    return func.with_attr("global_symbol", "heads_first")


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc on PATH")
def test_a_transpose_over_a_symbolic_axis_builds_for_cuda_in_vectors():
    """Its outer indices divide by the symbolic extent; vectorised, their sign selects
    would be bool vectors, which CUDA's code generator cannot print."""
    with cuda_build_environment(resolve_target("cuda")) as target:
        scheduled = VectorizedElementwise().apply(_heads_first(), target, False).mod["main"]
        source = tvm.tirx.build(tvm.IRModule({"heads_first": scheduled}), target=target)
    cuda = source.imports[0].inspect_source()
    # One 16-byte load and one 16-byte store per thread.
    assert cuda.count("*(uint4*)") == 2, cuda


class _Norm(nn.Module):
    def __init__(self, width: int, dtype: str) -> None:
        self.weight = nn.Parameter((width,), dtype)

    def forward(self, x: nn.Tensor) -> nn.Tensor:
        return nn.op.rms_norm(x, self.weight, axes=[-1], epsilon=1e-5)


def _rms_norm_func(width: int, dtype: str = "bfloat16", rows: tuple = (1, "n")) -> tirx.PrimFunc:
    """The fused PrimFunc TVM's pipeline makes of an rms_norm over [*rows, width] (the
    models' [1, seq_len, hidden] by default)."""
    spec = {"forward": {"x": nn.spec.Tensor([*rows, width], dtype)}}
    mod, _ = _Norm(width, dtype).export_tvm(spec=spec)
    mod = tvm.transform.Sequential(
        [
            relax.transform.LegalizeOps(),
            relax.transform.AnnotateTIROpPattern(),
            relax.transform.FuseOps(),
            relax.transform.FuseTIR(),
        ]
    )(mod)
    funcs = [f for _, f in mod.functions.items() if isinstance(f, tirx.PrimFunc)]
    assert len(funcs) == 1
    return funcs[0]


def test_a_4096_wide_bfloat16_norm_reads_its_row_once_in_vectors():
    sch = _apply(WideRowRMSNorm(), _rms_norm_func(4096))
    # The row's load into registers and the output's store, 8 elements each.
    assert _vectorized_extents(sch) == [8, 8]


@pytest.mark.parametrize(
    ("width", "dtype", "target"),
    [
        (2048, "bfloat16", CUDA),
        (4104, "bfloat16", CUDA),
        (4096, "float32", CUDA),
        (4096, "bfloat16", CPU),
    ],
)
def test_norms_the_vector_split_does_not_fit_keep_the_generic_rules(width, dtype, target):
    assert _apply(WideRowRMSNorm(), _rms_norm_func(width, dtype), target) is None


def test_a_two_dimensional_norm_is_declined_not_an_error():
    # dlight's rule fuses every block's leading axes; over [n, hidden] the rsqrt block has
    # none to fuse and the rule raises, which the wrapper turns into "not mine".
    assert _apply(WideRowRMSNorm(), _rms_norm_func(4096, rows=("n",))) is None


def test_the_rule_list_gives_wide_norms_and_elementwise_kernels_their_vector_rules():
    from vllm_tvm.schedules.rules import schedule_passes

    mod = tvm.IRModule(
        {
            "norm": _rms_norm_func(4096).with_attr("global_symbol", "norm"),
            "add_rows": _add_rows().with_attr("global_symbol", "add_rows"),
        }
    )
    with CUDA:
        scheduled = tvm.transform.Sequential(schedule_passes(CUDA))(mod)
    for name in ("norm", "add_rows"):
        assert 8 in _vectorized_extents(tvm.s_tir.Schedule(scheduled[name])), name
