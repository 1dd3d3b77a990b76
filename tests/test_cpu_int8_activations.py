"""`--cpu-int8-activations`: Q8_0 / Q4_0 products on int8 activations, through the compiler.

Oracles: llama.cpp's quantize-then-dot definition (written in numpy in test_cpu_int8_dot.py)
for one product routed by the compiler's rewrite (compiler/int8_activations.py), at
run-time and static row counts; and, for a tiny GGUF llama, transformers on the file's
dequantized weights with the input of every linear layer rounded as llama.cpp's Q8_0 does
(per block of 32: int8 steps of max|x| / 127, the step stored as fp16). Against the float
path (`off`, the greedy-exact one) the logits differ by that rounding: the stated bound.
"""

from __future__ import annotations

import re
from pathlib import Path

import gguf
import numpy as np
import pytest
import torch
import tvm
from gguf import GGMLQuantizationType as Q
from gguf_fused_dequant_helpers import PROMPT, greedy, tiny_config
from gguf_synth import convert, model_metadata, random_hf_model, write_gguf
from test_cpu_int8_dot import _quantize_reference
from transformers import LlamaForCausalLM
from tvm import relax
from tvm.relax.frontend import nn

from vllm_tvm.artifacts.compile_options import CompileOptions
from vllm_tvm.artifacts.manifest import read_manifest
from vllm_tvm.checkpoints.gguf_repack import repack
from vllm_tvm.checkpoints.gguf_weights import RawTensor
from vllm_tvm.checkpoints.weight_formats import FORMATS
from vllm_tvm.cli.main import build_parser
from vllm_tvm.compiler.build import cache_key_for, compile_cached, make_request
from vllm_tvm.compiler.int8_activations import int8_activations_pass
from vllm_tvm.compiler.pipeline import lowering_pipeline
from vllm_tvm.compiler.targets import resolve_target
from vllm_tvm.model_defs.quant_linear import QuantWeight
from vllm_tvm.schedules.cpu_int8_dot import VNNI, int8_dot_isa

NATIVE_ISA = int8_dot_isa(resolve_target("llvm").make_target())
needs_int8_dot = pytest.mark.skipif(NATIVE_ISA is None, reason="no AVX2 / VNNI on this CPU")
FEATURES, COLUMNS = 40, 160
STEPS = 8
INT8_TYPES = [Q.Q8_0, Q.Q4_0]

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
    def __init__(self, fmt: str) -> None:
        self.weight = QuantWeight(FORMATS[fmt], (FEATURES, COLUMNS))

    def forward(self, x: nn.Tensor) -> nn.Tensor:
        return self.weight.nt_matmul(x, "float32")


@needs_int8_dot
@pytest.mark.parametrize("rows", [1, 5], ids=["static_one_row", "run_time_rows"])
@pytest.mark.parametrize("qtype", INT8_TYPES, ids=lambda t: t.name)
def test_routed_product_equals_llama_cpp_quantize_then_dot(qtype: Q, rows: int) -> None:
    fmt = FORMATS[qtype.name.lower()]
    shape = (1, 1, COLUMNS) if rows == 1 else (1, "n", COLUMNS)
    mod, _ = _OneProduct(fmt.name).export_tvm(
        spec={"forward": {"x": nn.spec.Tensor(shape, "float32")}}
    )
    mod = int8_activations_pass(NATIVE_ISA)(mod)
    names = {gv.name_hint for gv in mod.get_global_vars()}
    assert names == {"forward", "quantize_activations_q8_0", f"int8_dot_{fmt.name}"}
    target = resolve_target("llvm").make_target()
    library = tvm.compile(mod, target=target, relax_pipeline=lowering_pipeline(target))
    assembly = library.mod.imports[0].inspect_source("asm") if library.mod.imports else ""
    assembly = assembly or library.mod.inspect_source("asm")
    assert ("vpdpbusd" if NATIVE_ISA == VNNI else "vpmaddubsw") in assembly

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
    # the dequantized weights (d_w * q_w, exact in fp32), summed exactly.
    xq, xd = _quantize_reference(x[0])
    rounded = xq.astype(np.float64) * np.repeat(xd.astype(np.float64), 32, axis=1)
    weights = gguf.quants.dequantize(data, qtype).reshape(FEATURES, COLUMNS).astype(np.float64)
    bound = 1e-6 * (np.abs(rounded) @ np.abs(weights).T)
    assert (np.abs(got - rounded @ weights.T) <= bound).all()


@pytest.fixture(scope="module")
def q8_0_file(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, np.ndarray]]:
    """A tiny llama GGUF with every matrix in Q8_0, and its weights as transformers names
    them, dequantized by `gguf`."""
    config = tiny_config()
    state = random_hf_model(LlamaForCausalLM, config, 0)
    types = {name: Q.Q8_0 for name, value in state.items() if value.ndim == 2}
    conversion = convert(state, "llama", config, types, 0)
    path = tmp_path_factory.mktemp("int8") / "Q8_0.gguf"
    write_gguf(path, "llama", model_metadata("llama", config), conversion.tensors)
    weights = {
        name: gguf.quants.dequantize(conversion.stored[name], Q.Q8_0).reshape(value.shape)
        if name in types
        else value
        for name, value in state.items()
    }
    return path, weights


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


def _transformers_logits(weights: dict, tokens: list[int], rounded: bool) -> np.ndarray:
    """Logits at the last prompt position and after, from transformers on `weights` (the
    input of every linear layer rounded as Q8_0 when `rounded`)."""
    model = LlamaForCausalLM(tiny_config())
    model.load_state_dict({name: torch.from_numpy(np.array(v)) for name, v in weights.items()})
    if rounded:
        for module in model.modules():
            if isinstance(module, torch.nn.Linear):
                module.register_forward_pre_hook(lambda _, args: (_round_as_q8_0(args[0]),))
    with torch.no_grad():
        logits = model(torch.tensor([tokens])).logits[0].numpy()
    return logits[len(PROMPT) - 1 :]


@needs_int8_dot
def test_int8_logits_equal_transformers_with_rounded_activations(
    q8_0_file: tuple[Path, dict[str, np.ndarray]],
) -> None:
    """On the Q8_0 file (Q4_0's products are checked one by one above)."""
    model, weights = q8_0_file
    floats = greedy(_artifact(model, "off"), model, STEPS)
    integer = greedy(_artifact(model, "on"), model, STEPS, forced=floats.tokens)
    tokens = [*PROMPT, *floats.tokens[:-1]]
    oracle = _transformers_logits(weights, tokens, rounded=True)
    np.testing.assert_allclose(integer.logits, oracle, rtol=0, atol=ORACLE_ATOL)
    # The float path stays the plain one (the greedy-exact tests' path).
    plain = _transformers_logits(weights, tokens, rounded=False)
    np.testing.assert_allclose(floats.logits, plain, rtol=0, atol=ORACLE_ATOL)
    difference = np.sqrt(((integer.logits - floats.logits) ** 2).mean(axis=1))
    assert (difference <= FLOAT_PATH_RELATIVE_RMS * np.sqrt((floats.logits**2).mean(axis=1))).all()
    # The oracle tells the paths apart: the rounding moves logits far more than its bound.
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
            "no weight is kept as q8_0 or q4_0 (kept quantized: none;",
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
