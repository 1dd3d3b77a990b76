"""`--cpu-int8-activations`: Q8_0 / Q4_x / Q5_x products on int8 activations, via the compiler.

Oracles: llama.cpp's quantize-then-dot definition (written in numpy in test_cpu_int8_dot.py)
for one product routed by the compiler's rewrite (compiler/int8_activations.py), at
run-time and static row counts; and, for a tiny GGUF llama, transformers on the file's
dequantized weights with the input of every linear layer rounded as llama.cpp's Q8_0 does
(per block of 32: int8 steps of max|x| / 127, the step stored as fp16); for a Q4_1 file,
as its Q8_1 (the same, and each block's min m_w times s = fp16(d * sum(q)) in place of m_w
times the rounded block's sum, as `ggml_vec_dot_q4_1_q8_1` takes it). Against the float
path (`off`, the greedy-exact one) the logits differ by that rounding: the stated bound.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import gguf
import numpy as np
import pytest
import torch
import tvm
from gguf import GGMLQuantizationType as Q
from gguf_fused_dequant_helpers import PROMPT, greedy, tiny_config
from gguf_synth import convert, model_metadata, random_hf_model, write_gguf
from test_cpu_int8_dot import _block_sums_reference, _quantize_reference
from transformers import LlamaForCausalLM
from tvm import relax
from tvm.relax.frontend import nn

from vllm_tvm.artifacts.compile_options import CompileOptions
from vllm_tvm.artifacts.manifest import read_manifest
from vllm_tvm.checkpoints.gguf_repack import repack
from vllm_tvm.checkpoints.gguf_weights import RawTensor
from vllm_tvm.checkpoints.weight_formats import FORMATS, WIDENED
from vllm_tvm.cli.main import build_parser
from vllm_tvm.compiler.build import cache_key_for, compile_cached, make_request
from vllm_tvm.compiler.int8_activations import int8_activations_pass
from vllm_tvm.compiler.pipeline import lowering_pipeline
from vllm_tvm.compiler.targets import resolve_target
from vllm_tvm.model_defs.quant_linear import QuantWeight
from vllm_tvm.schedules.cpu_int8_dot import VNNI, int8_dot_isa

NATIVE_ISA = int8_dot_isa(resolve_target("llvm").make_target())
needs_int8_dot = pytest.mark.skipif(NATIVE_ISA is None, reason="no AVX2 / VNNI on this CPU")
FEATURES, COLUMNS = 48, 160
STEPS = 8
INT8_TYPES = [Q.Q8_0, Q.Q4_0, Q.Q4_1, Q.Q5_0, Q.Q5_1]
WITH_MINS = (Q.Q4_1, Q.Q5_1)

FLOAT_PATH_RELATIVE_RMS = 0.15
"""The bound on the int8 path's logits against the float path's, as the RMS of the
difference over the RMS of the float logits, per row. This tiny model's weights (std 0.5,
width 64) grow its activations fourfold a layer, so the rounding of each activation to its
block's int8 step (about 0.4 % of a value, relative) reaches its logits as a few percent
(measured 2-9 % per row for Q8_0); a real checkpoint's logits move far less."""

ORACLE_ATOL = 1e-4
"""Against transformers with the same rounding of each linear layer's input: the remaining
differences are fp32 sums in another order (measured 1.4e-6; logits of magnitude up to
~10), two orders of magnitude below what the rounding itself moves (asserted)."""


class _OneProduct(nn.Module):
    def __init__(self, fmt: str, features: int, columns: int) -> None:
        self.weight = QuantWeight(FORMATS[fmt], (features, columns))

    def forward(self, x: nn.Tensor) -> nn.Tensor:
        return self.weight.nt_matmul(x, "float32")


def routed_library(
    fmt_name: str, rows: int, features: int, columns: int, quantization: str
) -> relax.VMExecutable:
    """One `fmt_name` product of `rows` token rows (other than 1: a run-time count), routed by the
    rewrite to the `quantize_activations_<quantization>` kernel and the integer product,
    compiled for this machine (its assembly checked for the ISA's dot instruction)."""
    shape = (1, 1, columns) if rows == 1 else (1, "n", columns)
    mod, _ = _OneProduct(fmt_name, features, columns).export_tvm(
        spec={"forward": {"x": nn.spec.Tensor(shape, "float32")}}
    )
    mod = int8_activations_pass(NATIVE_ISA)(mod)
    names = {gv.name_hint for gv in mod.get_global_vars()}
    # A run-time row count of a block format takes the register-blocked GEMM; a static single
    # row, and every K-quant product, the GEMV.
    kernel = "dot" if rows == 1 or quantization == "q8_k" else "gemm"
    product = f"int8_{kernel}_{FORMATS[fmt_name].kernel}"
    assert names == {"forward", f"quantize_activations_{quantization}", product}
    target = resolve_target("llvm").make_target()
    library = tvm.compile(mod, target=target, relax_pipeline=lowering_pipeline(target))
    assembly = library.mod.imports[0].inspect_source("asm") if library.mod.imports else ""
    assembly = assembly or library.mod.inspect_source("asm")
    assert ("vpdpbusd" if NATIVE_ISA == VNNI else "vpmaddubsw") in assembly
    return library


@needs_int8_dot
@pytest.mark.parametrize("rows", [1, 11], ids=["static_one_row", "run_time_rows"])
@pytest.mark.parametrize(
    ("qtype", "fmt_name"),
    [*((t, t.name.lower()) for t in INT8_TYPES), (Q.Q5_0, WIDENED["Q5_0"])],
    ids=lambda value: getattr(value, "name", value),
)
def test_routed_product_equals_llama_cpp_quantize_then_dot(
    qtype: Q, fmt_name: str, rows: int
) -> None:
    """Also Q5_0 kept in Q8_0's planes (WIDENED), which the Q8_0 kernel multiplies: the
    same integer sums as llama.cpp's Q5_0 x Q8_0 dot."""
    fmt = FORMATS[fmt_name]
    activations = "q8_1" if qtype in WITH_MINS else "q8_0"
    library = routed_library(fmt.name, rows, FEATURES, COLUMNS, activations)

    rng = np.random.default_rng(3)
    data = np.asarray(
        gguf.quants.quantize(rng.standard_normal((FEATURES, COLUMNS), dtype=np.float32), qtype)
    ).view(np.uint8)
    planes = repack(RawTensor(data.reshape(FEATURES, -1), qtype, (FEATURES, COLUMNS)), fmt)
    x = rng.standard_normal((1, rows, COLUMNS), dtype=np.float32)
    vm = relax.VirtualMachine(library, tvm.cpu())
    arguments = [tvm.runtime.tensor(a) for a in (x, *(planes[p.name] for p in fmt.planes))]
    got = vm["forward"](*arguments).numpy()[0]
    # The definition: the activations as their int8 values times their fp16 steps, times
    # the dequantized weights (d_w * q_w + m_w, in fp32), summed exactly; with mins, each
    # block's m_w multiplies s_x, not the rounded block's sum.
    xq, xd = _quantize_reference(x[0])
    rounded = xq.astype(np.float64) * np.repeat(xd.astype(np.float64), 32, axis=1)
    weights = gguf.quants.dequantize(data, qtype).reshape(FEATURES, COLUMNS).astype(np.float64)
    expected = rounded @ weights.T
    if qtype in WITH_MINS:
        mins = _block_mins(data.reshape(FEATURES, -1), qtype).astype(np.float64)
        block_sums = rounded.reshape(rows, -1, 32).sum(axis=-1)
        expected += (_block_sums_reference(x[0]).astype(np.float64) - block_sums) @ mins.T
    bound = 1e-6 * (np.abs(rounded) @ np.abs(weights).T)
    assert (np.abs(got - expected) <= bound).all()


def _block_mins(rows: np.ndarray, qtype: Q) -> np.ndarray:
    """The fp16 min of each block of Q4_1 / Q5_1 rows (bytes 2-3, after d), as stored."""
    block_bytes = gguf.GGML_QUANT_SIZES[qtype][1]
    blocks = rows.reshape(rows.shape[0], -1, block_bytes)
    return blocks[:, :, 2:4].copy().view(np.float16)[..., 0]


def _tiny_file(
    factory: pytest.TempPathFactory, qtype: Q
) -> tuple[Path, dict[str, np.ndarray], dict[str, np.ndarray]]:
    """A tiny llama GGUF with every matrix in `qtype`; its weights as transformers names
    them, dequantized by `gguf`; and each matrix's stored block bytes."""
    config = tiny_config()
    state = random_hf_model(LlamaForCausalLM, config, 0)
    types = {name: qtype for name, value in state.items() if value.ndim == 2}
    conversion = convert(state, "llama", config, types, 0)
    path = factory.mktemp("int8") / f"{qtype.name}.gguf"
    write_gguf(path, "llama", model_metadata("llama", config), conversion.tensors)
    weights = {
        name: gguf.quants.dequantize(conversion.stored[name], qtype).reshape(value.shape)
        if name in types
        else value
        for name, value in state.items()
    }
    return path, weights, {name: conversion.stored[name] for name in types}


@pytest.fixture(scope="module")
def q8_0_file(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, np.ndarray]]:
    """A tiny llama GGUF with every matrix in Q8_0, and its weights dequantized by `gguf`."""
    path, weights, _ = _tiny_file(tmp_path_factory, Q.Q8_0)
    return path, weights


@pytest.fixture(scope="module")
def q4_1_file(
    tmp_path_factory: pytest.TempPathFactory,
) -> tuple[Path, dict[str, np.ndarray], dict[str, np.ndarray]]:
    """The same llama with every matrix in Q4_1: path, weights, each matrix's block mins."""
    path, weights, stored = _tiny_file(tmp_path_factory, Q.Q4_1)
    return path, weights, {name: _block_mins(rows, Q.Q4_1) for name, rows in stored.items()}


def _artifact(model: Path, choice: str) -> Path:
    options = CompileOptions(model, cpu_int8_activations=choice)
    return compile_cached(make_request(options), show_progress=False)


def _round_as_q8_0(x: torch.Tensor) -> torch.Tensor:
    """llama.cpp's Q8_0 round trip of the last axis, per block of 32 (roundf: halves away
    from zero; the step kept as fp16)."""
    blocks = x.reshape(*x.shape[:-1], -1, 32)
    step = blocks.abs().amax(dim=-1, keepdim=True) / 127
    inverse = torch.where(step != 0, 1 / torch.where(step != 0, step, 1), 0)
    scaled = blocks * inverse
    whole = torch.trunc(scaled)
    rounded = whole + (scaled - whole >= 0.5).float() - (scaled - whole <= -0.5).float()
    return (rounded * step.half().float()).reshape(x.shape)


def _q8_1_min_correction(x: torch.Tensor, mins: np.ndarray) -> torch.Tensor:
    """What Q8_1's s changes in a linear layer with block mins `mins` [out, blocks]: per
    block, m_w * (s_x - the sum of the rounded block), s_x = fp16(d * sum(q)), d unrounded."""
    flat = x.reshape(-1, x.shape[-1]).numpy()
    xq, xd = _quantize_reference(flat)
    rounded = xq.reshape(len(flat), -1, 32).sum(axis=-1, dtype=np.float32) * xd.astype(np.float32)
    delta = _block_sums_reference(flat).astype(np.float32) - rounded
    return torch.from_numpy(delta @ mins.astype(np.float32).T).reshape(*x.shape[:-1], -1)


def _on_rounded_input(
    forward: Callable[[torch.Tensor], torch.Tensor], mins: np.ndarray | None
) -> Callable[[torch.Tensor], torch.Tensor]:
    """A linear layer's `forward` on its input rounded as Q8_0 (as Q8_1 with block `mins`)."""

    def rounded(x: torch.Tensor) -> torch.Tensor:
        out = forward(_round_as_q8_0(x))
        return out if mins is None else out + _q8_1_min_correction(x, mins)

    return rounded


def _transformers_logits(
    weights: dict, tokens: list[int], rounded: bool, mins: dict[str, np.ndarray] | None = None
) -> np.ndarray:
    """Logits at the last prompt position and after, from transformers on `weights` (the
    input of every linear layer rounded as Q8_0 when `rounded`; as Q8_1 for the layers whose
    weights have block `mins`, by their HF name)."""
    model = LlamaForCausalLM(tiny_config())
    model.load_state_dict({name: torch.from_numpy(np.array(v)) for name, v in weights.items()})
    if rounded:
        for name, module in model.named_modules():
            if isinstance(module, torch.nn.Linear):
                block_mins = (mins or {}).get(f"{name}.weight")
                module.forward = _on_rounded_input(module.forward, block_mins)
    with torch.no_grad():
        logits = model(torch.tensor([tokens])).logits[0].numpy()
    return logits[len(PROMPT) - 1 :]


@needs_int8_dot
def test_int8_logits_equal_transformers_with_rounded_activations(
    q8_0_file: tuple[Path, dict[str, np.ndarray]],
) -> None:
    """On the Q8_0 file (Q4_0's products are checked one by one above)."""
    model, weights = q8_0_file
    assert_paths_equal_their_oracles(
        model,
        lambda tokens, rounded: _transformers_logits(weights, tokens, rounded),
        FLOAT_PATH_RELATIVE_RMS,
    )


def assert_paths_equal_their_oracles(
    model: Path, oracle: Callable[[list[int], bool], np.ndarray], relative: float
) -> None:
    """Greedy decode of `model` on the float path (`off`), and the int8 path (`on`) fed the
    same tokens: the int8 path's logits equal `oracle(tokens, True)` (transformers on
    rounded inputs), the float path's `oracle(tokens, False)`, within ORACLE_ATOL; the
    paths differ by at most `relative` (RMS over the float logits' RMS, per row), and by
    more than the oracle's tolerance, so that the oracle tells them apart."""
    floats = greedy(_artifact(model, "off"), model, STEPS)
    integer = greedy(_artifact(model, "on"), model, STEPS, forced=floats.tokens)
    tokens = [*PROMPT, *floats.tokens[:-1]]
    plain = oracle(tokens, False)
    np.testing.assert_allclose(integer.logits, oracle(tokens, True), rtol=0, atol=ORACLE_ATOL)
    # The float path stays the plain one (the greedy-exact tests' path).
    np.testing.assert_allclose(floats.logits, plain, rtol=0, atol=ORACLE_ATOL)
    difference = np.sqrt(((integer.logits - floats.logits) ** 2).mean(axis=1))
    assert (difference <= relative * np.sqrt((floats.logits**2).mean(axis=1))).all()
    assert np.abs(integer.logits - plain).max() > 100 * ORACLE_ATOL


FED_TOKENS = [11, 42, 7, 88, 23, 5, 64]
"""Tokens fed to the decode steps of the Q4_1 file (fixed: one compile, no float arm)."""


@needs_int8_dot
def test_q4_1_logits_equal_transformers_with_q8_1_activations(
    q4_1_file: tuple[Path, dict[str, np.ndarray], dict[str, np.ndarray]],
) -> None:
    model, weights, mins = q4_1_file
    assert (
        make_request(
            CompileOptions(model, cpu_int8_activations="auto")
        ).options.cpu_int8_activations
        == "on"
    )
    integer = greedy(_artifact(model, "auto"), model, STEPS, forced=FED_TOKENS)
    tokens = [*PROMPT, *FED_TOKENS]
    oracle = _transformers_logits(weights, tokens, rounded=True, mins=mins)
    np.testing.assert_allclose(integer.logits, oracle, rtol=0, atol=ORACLE_ATOL)
    # The oracle tells Q8_1 from Q8_0: m_w times the rounded block sum, not s, misses it.
    as_q8_0 = _transformers_logits(weights, tokens, rounded=True)
    assert np.abs(integer.logits - as_q8_0).max() > 100 * ORACLE_ATOL  # measured 0.2
    plain = _transformers_logits(weights, tokens, rounded=False)
    assert np.abs(integer.logits - plain).max() > 100 * ORACLE_ATOL


@needs_int8_dot
def test_auto_follows_the_target_and_the_manifest_records_the_instructions(
    q8_0_file: tuple[Path, dict[str, np.ndarray]],
) -> None:
    model, _ = q8_0_file
    assert (
        make_request(
            CompileOptions(model, cpu_int8_activations="auto")
        ).options.cpu_int8_activations
        == "on"
    )
    other = CompileOptions(model, target="llvm:aarch64", cpu_int8_activations="auto")
    assert make_request(other).options.cpu_int8_activations == "off"
    assert read_manifest(_artifact(model, "on")).cpu_int8_activations == NATIVE_ISA
    assert read_manifest(_artifact(model, "off")).cpu_int8_activations == "off"
    keys = {
        cache_key_for(make_request(CompileOptions(model, cpu_int8_activations=c)))
        for c in ("on", "off", "auto")
    }
    assert len(keys) == 2  # auto is the same artifact as on here


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"target": "llvm:aarch64"}, "target 'llvm:aarch64' has no integer dot products"),
        ({"dtype": "float16"}, "dtype 'float16': the integer path takes float32 activations"),
        (
            {"weight_format": "dequantized"},
            "no weight is kept as one of q8_0, q4_0, q4_1, q5_0, q5_1, q4_k, q5_k, q6_k, q3_k, "
            "q2_k "
            "(kept quantized: none;",
        ),
    ],
)
def test_on_where_it_cannot_apply_is_refused_by_name(
    q8_0_file: tuple[Path, dict[str, np.ndarray]], options: dict, message: str
) -> None:
    model, _ = q8_0_file
    if NATIVE_ISA is None:
        message = "target 'llvm' has no integer dot products"
    with pytest.raises(ValueError, match=re.escape(f"'on' does not apply: {message}")):
        make_request(CompileOptions(model, cpu_int8_activations="on", **options))


def test_on_for_a_gpu_and_unknown_choices_are_refused_before_anything_loads() -> None:
    with pytest.raises(ValueError, match="cpu_int8_activations 'on' needs a CPU \\(llvm\\) target"):
        CompileOptions("model.gguf", target="cuda", cpu_int8_activations="on")
    with pytest.raises(
        ValueError, match="unsupported cpu_int8_activations 'yes'; supported: auto, on, off"
    ):
        CompileOptions("model.gguf", cpu_int8_activations="yes")
    for command in ("compile", "generate", "serve", "bench"):
        parsed = build_parser().parse_args(
            [command, "m.gguf", "--cpu-int8-activations", "auto"]
            if command == "compile"
            else [command, "--cpu-int8-activations", "auto"]
        )
        assert parsed.cpu_int8_activations == "auto"
