"""`--cpu-int8-activations` on K-quant weights: Q2_K ... Q6_K products on Q8_K activations.

Oracles: llama.cpp's quantize-then-dot definition (written in numpy in
test_cpu_int8_kquant_dot.py) for one product routed by the compiler's rewrite
(compiler/int8_activations.py), at static and run-time row counts; and, for a tiny GGUF
llama whose matrices are Q4_K and Q6_K (as a Q4_K_M file mixes them), Q5_K, Q3_K and
Q2_K, transformers on the weights it reads from the file itself, with the input of every
linear layer rounded as llama.cpp's Q8_K does (per 256 values: q = nearest_int(x * -127 /
v), v the first value of largest magnitude, times the fp32 step 1 / (-127 / v)). A K-quant
product is exactly
the rounded activations times the dequantized weights (the mins' share goes through the
bsums, which are the rounded values' sums), so no correction is needed; the float path
(`off`) stays the plain one. Both within test_cpu_int8_activations.py's ORACLE_ATOL
(measured 8e-7 here; logits of magnitude up to ~2).
"""

from __future__ import annotations

from pathlib import Path

import gguf
import numpy as np
import pytest
import torch
import tvm
from gguf import GGMLQuantizationType as Q
from gguf_fused_dequant_helpers import PROMPT, write_quantized_llama
from gguf_synth import load_with_transformers
from test_cpu_int8_activations import (
    NATIVE_ISA,
    _artifact,
    assert_paths_equal_their_oracles,
    needs_int8_dot,
    routed_library,
)
from test_cpu_int8_kquant_dot import BUILDERS, quantize_q8_k_reference
from transformers import LlamaForCausalLM
from tvm import relax

from vllm_tvm.artifacts.manifest import read_manifest
from vllm_tvm.checkpoints.gguf_repack import repack
from vllm_tvm.checkpoints.gguf_weights import RawTensor
from vllm_tvm.checkpoints.weight_formats import FORMATS
from vllm_tvm.schedules.cpu_int8_kquant_dot import INT8_KQUANT_FORMATS

FEATURES, COLUMNS = 32, 512

FLOAT_PATH_RELATIVE_RMS = 0.05
"""The int8 path's logits against the float path's, as the RMS of the difference over the
RMS of the float logits, per row: the rounding of each activation to its super-block's int8
step, through two random layers (measured 0.8-0.9 % per row here)."""


@needs_int8_dot
@pytest.mark.parametrize("rows", [1, 5], ids=["static_one_row", "run_time_rows"])
@pytest.mark.parametrize("qtype", list(BUILDERS), ids=lambda t: t.name)
def test_routed_product_equals_llama_cpp_quantize_then_dot(qtype: Q, rows: int) -> None:
    fmt = FORMATS[qtype.name.lower()]
    library = routed_library(fmt.name, rows, FEATURES, COLUMNS, "q8_k")
    rng = np.random.default_rng(3)
    data, _ = BUILDERS[qtype](rng, FEATURES, COLUMNS)
    planes = repack(RawTensor(data, qtype, (FEATURES, COLUMNS)), fmt)
    x = rng.standard_normal((1, rows, COLUMNS), dtype=np.float32)
    vm = relax.VirtualMachine(library, tvm.cpu())
    arguments = [tvm.runtime.tensor(a) for a in (x, *(planes[p.name] for p in fmt.planes))]
    got = vm["forward"](*arguments).numpy()[0]
    xq, xd, _ = quantize_q8_k_reference(x[0])
    rounded = xq.astype(np.float64) * np.repeat(xd.astype(np.float64), 256, axis=1)
    weights = gguf.quants.dequantize(data, qtype).reshape(FEATURES, COLUMNS).astype(np.float64)
    bound = 1e-6 * (np.abs(rounded) @ np.abs(weights).T)
    assert (np.abs(got - rounded @ weights.T) <= bound).all()


MIXED_TYPES = {
    **{f"model.layers.0.self_attn.{p}_proj.weight": Q.Q4_K for p in "qkv"},
    **{f"model.layers.1.self_attn.{p}_proj.weight": Q.Q6_K for p in "qkv"},
    **{f"model.layers.{n}.self_attn.o_proj.weight": Q.Q5_K for n in (0, 1)},
    **{f"model.layers.0.mlp.{p}_proj.weight": Q.Q4_K for p in ("gate", "up")},
    **{f"model.layers.1.mlp.{p}_proj.weight": Q.Q3_K for p in ("gate", "up")},
    "model.layers.0.mlp.down_proj.weight": Q.Q6_K,
    "model.layers.1.mlp.down_proj.weight": Q.Q2_K,
    "model.embed_tokens.weight": Q.Q4_K,
    "lm_head.weight": Q.Q6_K,
}
"""Q4_K_M's mix (Q4_K, Q6_K for a down projection and the output head), Q5_K for the
output projections and Q3_K / Q2_K for the second layer's MLP, so that every K-quant
product is routed. The q / k / v projections, fused into one product, share a type (mixed,
they would be dequantized at load)."""


@pytest.fixture(scope="module")
def mixed_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_quantized_llama(tmp_path_factory.mktemp("kquant8") / "mixed.gguf", MIXED_TYPES)


def _round_as_q8_k(x: torch.Tensor) -> torch.Tensor:
    """llama.cpp's Q8_K round trip of the last axis (see quantize_q8_k_reference)."""
    flat = x.reshape(-1, x.shape[-1]).numpy()
    q, d, _ = quantize_q8_k_reference(flat)
    rounded = (q.reshape(len(flat), -1, 256) * d[..., None]).astype(np.float32)
    return torch.from_numpy(rounded.reshape(x.shape))


def _transformers_logits(model_path: Path, tokens: list[int], rounded: bool) -> np.ndarray:
    """Logits at the last prompt position and after, from transformers on the file's
    weights as it reads them (each linear layer's input rounded as Q8_K when `rounded`)."""
    config, state, _ = load_with_transformers(model_path)
    model = LlamaForCausalLM(config)
    model.load_state_dict({name: torch.from_numpy(np.array(v)) for name, v in state.items()})
    if rounded:
        for module in model.modules():
            if isinstance(module, torch.nn.Linear):
                forward = module.forward
                module.forward = lambda x, forward=forward: forward(_round_as_q8_k(x))
    with torch.no_grad():
        logits = model(torch.tensor([tokens])).logits[0].numpy()
    return logits[len(PROMPT) - 1 :]


@needs_int8_dot
def test_kquant_logits_equal_transformers_with_q8_k_activations(mixed_file: Path) -> None:
    manifest = read_manifest(_artifact(mixed_file, "on"))
    assert set(INT8_KQUANT_FORMATS) <= {param.format for param in manifest.params}
    assert manifest.cpu_int8_activations == NATIVE_ISA
    assert_paths_equal_their_oracles(
        mixed_file,
        lambda tokens, rounded: _transformers_logits(mixed_file, tokens, rounded),
        FLOAT_PATH_RELATIVE_RMS,
    )
