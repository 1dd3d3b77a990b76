"""GGUF weights kept quantized on the device (`--weight-format native`) against the plain path.

For each fused type (Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, and F16 /
BF16, kept 16-bit in fp32 CPU artifacts) a tiny llama file holds every matrix in that type.
The `dequantized` arm (every weight dequantized to fp32 at load, the path that exists
without this feature) is the oracle: the fused kernels must give the same logits within
1e-4 and the same greedy tokens. The manifest must say which parameters are quantized, the
loaded parameters must keep the planes' dtypes, and a checkpoint stored differently must be
refused before use. Repacked planes are checked
against the `gguf` package's own dequantizer.
"""

from __future__ import annotations

from pathlib import Path

import gguf
import numpy as np
import pytest
from gguf import GGMLQuantizationType as Q
from gguf_fused_dequant_helpers import (
    K_QUANTS,
    batched_logits,
    greedy,
    tiny_config,
    write_quantized_llama,
)

from vllm_tvm.artifacts.compile_options import CompileOptions
from vllm_tvm.artifacts.manifest import read_manifest
from vllm_tvm.checkpoints.gguf_repack import repack
from vllm_tvm.checkpoints.gguf_weights import GGUFWeights
from vllm_tvm.checkpoints.weight_formats import FLOAT, FORMATS, WIDENED
from vllm_tvm.cli.main import build_parser
from vllm_tvm.compiler.build import cache_key_for, compile_cached, make_request
from vllm_tvm.runtime.model.runner import ModelRunner
from vllm_tvm.runtime.weights.loader import WeightMismatchError

FUSED_TYPES = [Q.Q8_0, Q.Q4_0, Q.Q4_1, Q.Q5_0, Q.Q5_1, *K_QUANTS, Q.F16, Q.BF16]
STEPS = 8

# Every weight a llama compiles: embedding, fused q/k/v and gate/up, o/down, lm_head.
QUANTIZABLE = [
    "model.embed_tokens.weight",
    *(
        f"model.layers.{i}.{module}.weight"
        for i in range(2)
        for module in (
            "self_attn.qkv_proj",
            "self_attn.o_proj",
            "mlp.gate_up_proj",
            "mlp.down_proj",
        )
    ),
    "lm_head.weight",
]


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[Q, Path]:
    folder = tmp_path_factory.mktemp("fused")
    return {t: write_quantized_llama(folder / f"{t.name}.gguf", t) for t in FUSED_TYPES}


def _kept(qtype: Q) -> str:
    """The format a CPU build keeps `qtype` weights in: its own, or its wider one."""
    return WIDENED.get(qtype.name, qtype.name.lower())


def _artifact(model: Path, weight_format: str) -> Path:
    return compile_cached(
        make_request(CompileOptions(model, weight_format=weight_format)), show_progress=False
    )


def _assert_logits_close(fused: np.ndarray, plain: np.ndarray) -> None:
    """Equal within 1e-4 (logits of these files stay below 10): the same fp32 weights,
    summed in another order."""
    np.testing.assert_allclose(fused, plain, rtol=0, atol=1e-4)


@pytest.mark.parametrize("qtype", FUSED_TYPES, ids=lambda t: t.name)
def test_native_keeps_every_linear_and_embedding_weight_quantized(
    files: dict[Q, Path], qtype: Q
) -> None:
    request = make_request(CompileOptions(files[qtype]))
    assert dict(request.weight_formats) == {name: _kept(qtype) for name in QUANTIZABLE}


@pytest.mark.parametrize("qtype", FUSED_TYPES, ids=lambda t: t.name)
def test_fused_logits_equal_the_dequantized_path(files: dict[Q, Path], qtype: Q) -> None:
    model = files[qtype]
    fused = greedy(_artifact(model, "native"), model, STEPS)
    plain = greedy(_artifact(model, "dequantized"), model, STEPS, forced=fused.tokens)
    _assert_logits_close(fused.logits, plain.logits)


@pytest.mark.parametrize("qtype", [Q.Q4_1, Q.Q6_K], ids=lambda t: t.name)
def test_fused_batched_decode_logits_equal_the_dequantized_path(
    files: dict[Q, Path], qtype: Q
) -> None:
    model, prompts = files[qtype], [[5, 17, 33], [8, 61, 90, 3, 12], [40]]
    fused = batched_logits(_artifact(model, "native"), model, prompts, steps=3)
    plain = batched_logits(_artifact(model, "dequantized"), model, prompts, steps=3)
    _assert_logits_close(fused, plain)


@pytest.mark.parametrize("qtype", FUSED_TYPES, ids=lambda t: t.name)
def test_fused_greedy_tokens_equal_the_dequantized_path(files: dict[Q, Path], qtype: Q) -> None:
    model = files[qtype]
    fused = greedy(_artifact(model, "native"), model, STEPS)
    plain = greedy(_artifact(model, "dequantized"), model, STEPS)
    assert fused.tokens == plain.tokens


def test_tied_embedding_table_serves_embed_and_logits_quantized(tmp_path: Path) -> None:
    model = write_quantized_llama(tmp_path / "tied.gguf", Q.Q8_0, tied=True)
    request = make_request(CompileOptions(model))
    assert request.weight_formats["model.embed_tokens.weight"] == "q8_0"
    assert "lm_head.weight" not in request.weight_formats
    fused = greedy(_artifact(model, "native"), model, STEPS)
    plain = greedy(_artifact(model, "dequantized"), model, STEPS, forced=fused.tokens)
    _assert_logits_close(fused.logits, plain.logits)
    assert fused.tokens == [int(i) for i in np.argmax(plain.logits, axis=1)]


@pytest.mark.parametrize("qtype", FUSED_TYPES, ids=lambda t: t.name)
def test_loaded_weights_stay_in_their_stored_dtypes(files: dict[Q, Path], qtype: Q) -> None:
    """No matrix is widened to fp32 at load: the runner holds every linear and embedding
    weight as the planes of its type, in the planes' dtypes; only vectors (norms) are
    float arrays."""
    runner = ModelRunner(_artifact(files[qtype], "native"), files[qtype], show_progress=False)
    held = {
        entry.name: (str(param.dtype), len(param.shape))
        for entry, param in zip(runner.manifest.params, runner.params, strict=True)
    }
    planes = {
        f"{weight}.{plane.name}": plane.dtype
        for weight in QUANTIZABLE
        for plane in FORMATS[_kept(qtype)].planes
    }
    assert {name: held[name][0] for name in planes} == planes
    assert {rank for name, (_, rank) in held.items() if name not in planes} == {1}


def test_manifest_records_each_plane_with_its_format(files: dict[Q, Path]) -> None:
    manifest = read_manifest(_artifact(files[Q.Q4_1], "native"))
    qkv = [p for p in manifest.params if ".layers.0.self_attn.qkv_proj." in p.name]
    assert [(p.name.rsplit(".", 1)[1], p.format, p.plane, p.dtype) for p in qkv] == [
        ("qs", "q4_1", "qs", "uint32"),
        ("d", "q4_1", "d", "float16"),
        ("m", "q4_1", "m", "float16"),
    ]
    prefix = "model.layers.0.self_attn."
    assert qkv[0].sources == [f"{prefix}{p}_proj.weight" for p in "qkv"]
    rows = (4 + 2 + 2) * 16  # q, k, v heads times head_dim
    assert [p.shape for p in qkv] == [[rows, 64 // 8], [rows, 64 // 32], [rows, 64 // 32]]
    norm = next(p for p in manifest.params if p.name == "model.norm.weight")
    assert (norm.format, norm.plane) == (FLOAT, None)


def test_dequantized_arm_stores_every_parameter_as_float(files: dict[Q, Path]) -> None:
    request = make_request(CompileOptions(files[Q.Q4_1], weight_format="dequantized"))
    assert dict(request.weight_formats) == {}
    manifest = read_manifest(_artifact(files[Q.Q4_1], "dequantized"))
    assert {p.format for p in manifest.params} == {FLOAT}
    assert {p.dtype for p in manifest.params} == {"float32"}
    assert "model.layers.0.self_attn.qkv_proj.weight" in {p.name for p in manifest.params}


def test_weight_format_is_part_of_the_cache_key(files: dict[Q, Path]) -> None:
    native = cache_key_for(make_request(CompileOptions(files[Q.Q4_1])))
    plain = cache_key_for(make_request(CompileOptions(files[Q.Q4_1], weight_format="dequantized")))
    other_type = cache_key_for(make_request(CompileOptions(files[Q.Q8_0])))
    assert len({native, plain, other_type}) == 3


def test_dequantized_arm_serves_files_of_any_type_with_one_artifact(files: dict[Q, Path]) -> None:
    same_config = [files[t] for t in (Q.Q8_0, Q.Q4_0, Q.Q4_1)]
    keys = {
        cache_key_for(make_request(CompileOptions(f, weight_format="dequantized")))
        for f in same_config
    }
    assert len(keys) == 1


def test_checkpoint_of_another_quant_type_is_refused_naming_the_tensor(
    files: dict[Q, Path],
) -> None:
    artifact = _artifact(files[Q.Q4_0], "native")
    with pytest.raises(WeightMismatchError) as refused:
        ModelRunner(artifact, files[Q.Q8_0], show_progress=False)
    message = str(refused.value)
    assert "'model.embed_tokens.weight' is stored as Q8_0" in message
    assert "as Q4_0 blocks" in message
    assert "--weight-format dequantized" in message


def test_checkpoint_without_blocks_is_refused_for_a_native_artifact(
    files: dict[Q, Path], tmp_path: Path
) -> None:
    from transformers import LlamaForCausalLM

    LlamaForCausalLM(tiny_config()).save_pretrained(tmp_path / "hf")
    artifact = _artifact(files[Q.Q4_1], "native")
    with pytest.raises(WeightMismatchError, match="not one; compile the artifact"):
        ModelRunner(artifact, tmp_path / "hf", show_progress=False)


def test_projection_with_a_tensor_of_no_format_is_dequantized_at_load(tmp_path: Path) -> None:
    """k_proj stays F32 (no format), so its fused q/k/v cannot be kept quantized, not even
    in parts (test_gguf_mixed_fused_parts.py)."""
    prefix = "model.layers.0.self_attn."
    types = {
        f"{prefix}q_proj.weight": Q.Q4_0,
        f"{prefix}v_proj.weight": Q.Q8_0,
        f"{prefix}o_proj.weight": Q.Q4_1,
        "model.layers.1.mlp.down_proj.weight": Q.F16,
    }
    request = make_request(CompileOptions(write_quantized_llama(tmp_path / "mixed.gguf", types)))
    assert dict(request.weight_formats) == {
        f"{prefix}o_proj.weight": "q4_1",
        "model.layers.1.mlp.down_proj.weight": "f16",
    }


@pytest.mark.parametrize("qtype", [Q.F16, Q.BF16], ids=lambda t: t.name)
def test_16_bit_weights_stay_16_bit_only_where_the_artifact_would_widen_them(
    files: dict[Q, Path], qtype: Q
) -> None:
    """An fp32 CPU artifact keeps them 16-bit; a 16-bit artifact holds them in its own dtype
    (as float weights), and a tensor-parallel split takes float weights only, so there no
    format is chosen."""
    assert set(make_request(CompileOptions(files[qtype])).weight_formats.values()) == {
        qtype.name.lower()
    }
    assert dict(make_request(CompileOptions(files[qtype], dtype="float16")).weight_formats) == {}
    assert (
        dict(make_request(CompileOptions(files[qtype], tensor_parallel_size=2)).weight_formats)
        == {}
    )


def test_unknown_weight_format_is_refused_naming_the_choices(files: dict[Q, Path]) -> None:
    with pytest.raises(ValueError, match=r"unsupported weight format 'int2'; .*native, dequant"):
        make_request(CompileOptions(files[Q.Q4_1], weight_format="int2"))


@pytest.mark.parametrize("command", ["compile", "generate"])
def test_cli_weight_format_flag_defaults_to_native(command: str) -> None:
    prompt = ["--prompt", "x"] if command == "generate" else ["m.gguf"]
    parser = build_parser()
    assert parser.parse_args([command, *prompt]).weight_format == "native"
    flag = parser.parse_args([command, *prompt, "--weight-format", "dequantized"])
    assert flag.weight_format == "dequantized"


def _fields(words: np.ndarray, width: int) -> np.ndarray:
    """uint32 words [rows, n] -> their `width`-bit fields in order, lowest bits first."""
    shifts = width * np.arange(32 // width, dtype=np.uint32)
    fields = (words[:, :, None] >> shifts) & ((1 << width) - 1)
    return fields.reshape(words.shape[0], -1).astype(np.float32)


def _per(plane: np.ndarray, values: int) -> np.ndarray:
    """A per-block plane spread over the `values` weights each element covers."""
    return np.repeat(plane.astype(np.float32), values, axis=1)


def _decode_planes(p: dict[str, np.ndarray], qtype: Q, fmt: str) -> np.ndarray:
    """The weight from its planes (format `fmt` of type `qtype`) by ggml's formulas, written
    independently of the loader: int8 values, or bit fields packed in value order into uint32
    words (4-bit values, then the 1 or 2 high bits of Q5_0 / Q5_1 / Q5_K / Q6_K; 2-bit values
    and Q3_K's third bit), or, in the WIDENED formats, one value a byte; fp16 scale d (and
    min m) per 32 values; K-quants: fp16 d (dmin) per 256 values times integer scales (mins)
    per 32 (Q2_K, Q3_K, Q6_K: 16)."""
    if fmt in ("q8_0", WIDENED["Q5_0"]):
        return _per(p["d"], 32) * p["qs"].astype(np.float32)
    if fmt == WIDENED["Q6_K"]:
        return (_per(p["d"], 256) * _per(p["sc"], 16)) * p["qs"].astype(np.float32)
    if qtype == Q.F16:
        return p["w"].astype(np.float32)
    if qtype == Q.BF16:
        return (p["w"].astype(np.uint32) << 16).view(np.float32)
    if qtype in (Q.Q2_K, Q.Q3_K):
        q, scale = _fields(p["qs"], 2), _per(p["d"], 256) * _per(p["sc"], 16)
        if qtype == Q.Q3_K:
            return scale * (q + 4 * _fields(p["qh"], 1) - 4)
        return scale * q - _per(p["dmin"], 256) * _per(p["mn"], 16)
    q = _fields(p["qs"], 4)
    if qtype == Q.Q4_0:
        return _per(p["d"], 32) * (q - 8)
    if qtype == Q.Q4_1:
        return _per(p["d"], 32) * q + _per(p["m"], 32)
    if qtype == Q.Q5_0:
        return _per(p["d"], 32) * (q + 16 * _fields(p["qh"], 1) - 16)
    if qtype == Q.Q5_1:
        return _per(p["d"], 32) * (q + 16 * _fields(p["qh"], 1)) + _per(p["m"], 32)
    if qtype == Q.Q6_K:
        return (_per(p["d"], 256) * _per(p["sc"], 16)) * (q + 16 * _fields(p["qh"], 2) - 32)
    if qtype == Q.Q5_K:
        q = q + 16 * _fields(p["qh"], 1)
    return (_per(p["d"], 256) * _per(p["sc"], 32)) * q - _per(p["dmin"], 256) * _per(p["mn"], 32)


@pytest.mark.parametrize(
    ("qtype", "fmt"),
    [*((t, t.name.lower()) for t in FUSED_TYPES), *((Q[t], fmt) for t, fmt in WIDENED.items())],
    ids=lambda value: getattr(value, "name", value),
)
def test_repacked_planes_hold_the_values_ggml_decodes(
    files: dict[Q, Path], qtype: Q, fmt: str
) -> None:
    weights = GGUFWeights(files[qtype])
    for name in ("model.layers.1.self_attn.k_proj.weight", "model.layers.0.mlp.down_proj.weight"):
        raw = weights.raw(name)
        planes = repack(raw, FORMATS[fmt])
        expected = gguf.quants.dequantize(raw.data, qtype).reshape(raw.shape)
        np.testing.assert_array_equal(_decode_planes(planes, qtype, fmt), expected, name)


def test_repack_refuses_a_tensor_of_another_type(files: dict[Q, Path]) -> None:
    raw = GGUFWeights(files[Q.Q8_0]).raw("model.layers.0.mlp.down_proj.weight")
    with pytest.raises(ValueError, match="a Q8_0 tensor cannot be repacked as q4_1"):
        repack(raw, FORMATS["q4_1"])
