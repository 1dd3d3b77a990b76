"""Phi-3, OLMo-2, Granite and GPT-2 from GGUF files in llama.cpp's layout, against transformers.

Each family's tiny checkpoint (tiny_models.py) is written as llama.cpp's converter would
write it (gguf_families.py); transformers on the checkpoint is the oracle: the GGUF config
must describe the same model, every tensor must come back equal, and our engine must give
transformers' greedy tokens and prefill logits. Where transformers itself reads such a file
(phi3, gpt2), its tensors are a second oracle, one that checks the writer's layout apart
from our reader. One compile per family (F32; the Phi-3, OLMo-2 and GPT-2 files describe
their HF directory's model exactly, so in a whole run they reuse the artifact that
test_generate_matches_transformers.py compiles) plus one for Phi-3 in Q8_0 kept quantized.
Every tensor name the reader takes, for every supported architecture, must be one that
llama.cpp defines for it (the `gguf` package's MODEL_TENSORS).
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import gguf
import numpy as np
import pytest
from gguf import GGMLQuantizationType as Q
from gguf_families import write_family_gguf
from gguf_synth import SynthTensor, load_with_transformers, write_gguf
from quantized_checkpoints import PROMPTS, assert_equals_oracle, dequantized_oracle
from safetensors.numpy import load_file
from tiny_models import load_oracle
from tokenizers import Tokenizer

from vllm_tvm.artifacts.compile_options import CompileOptions
from vllm_tvm.checkpoints.family_index import gguf_architectures
from vllm_tvm.checkpoints.gguf_config import hf_config_from_gguf
from vllm_tvm.checkpoints.gguf_tensor_names import accepted_tensor_names
from vllm_tvm.checkpoints.gguf_weights import GGUFWeights
from vllm_tvm.checkpoints.model_config import read_model_config
from vllm_tvm.compiler.build import make_request
from vllm_tvm.entrypoints.llm import LLM
from vllm_tvm.model_defs.architectures import family_for
from vllm_tvm.model_defs.config import parse_llama_family_config
from vllm_tvm.runtime.tokenization import load_tokenizer

FAMILIES = {
    "phi3": "phi3_longrope_partial",
    "olmo2": "olmo2_yarn",
    "granite": "granite_dynamic_tied",
    "gpt2": "gpt2_tied",
}


@pytest.fixture(scope="module")
def family_gguf(tiny_model_dir, tmp_path_factory: pytest.TempPathFactory):
    """Factory: (tiny checkpoint dir, its F32 GGUF file) by GGUF architecture."""
    made: dict[str, tuple[Path, Path]] = {}

    def get(arch: str) -> tuple[Path, Path]:
        if arch not in made:
            model_dir = tiny_model_dir(FAMILIES[arch])
            path = tmp_path_factory.mktemp(f"gguf-{arch}") / f"{arch}.gguf"
            write_family_gguf(model_dir, path)
            made[arch] = (model_dir, path)
        return made[arch]

    return get


@pytest.mark.parametrize("arch", FAMILIES)
def test_config_describes_the_model_the_hf_directory_does(arch: str, family_gguf) -> None:
    model_dir, path = family_gguf(arch)
    hf, ours = read_model_config(model_dir), read_model_config(path)
    expected = family_for(hf).parse_config(hf)
    if arch == "granite":
        # llama.cpp writes nothing for dynamic NTK, which within the context is plain RoPE.
        expected = replace(expected, rope_type="default")
    assert family_for(ours).parse_config(ours) == expected


@pytest.mark.parametrize("arch", FAMILIES)
def test_every_tensor_equals_the_checkpoint(arch: str, family_gguf) -> None:
    model_dir, path = family_gguf(arch)
    weights, state = GGUFWeights(path), load_file(model_dir / "model.safetensors")
    assert sorted(weights.names()) == sorted(state)
    for name in weights.names():
        assert weights.shape(name) == state[name].shape, name
        np.testing.assert_array_equal(weights.get(name), state[name], name)


@pytest.mark.parametrize("arch", ["phi3", "gpt2"])
def test_every_tensor_equals_transformers_reading_the_file(arch: str, family_gguf) -> None:
    _, path = family_gguf(arch)
    weights = GGUFWeights(path)
    # transformers reads gpt2.context_length as `n_ctx`, keeps `n_positions` at its default
    # 1024 and so refuses (or, told to, redraws) the position table of another context.
    _, theirs, _ = load_with_transformers(path, ignore_mismatched_sizes=True)
    compared = [name for name in weights.names() if name != "transformer.wpe.weight"]
    assert len(compared) >= len(weights.names()) - 1
    for name in compared:
        np.testing.assert_array_equal(weights.get(name), theirs[name], name)


def test_gpt2_conv1d_blocks_are_not_handed_out_in_the_wrong_layout(family_gguf) -> None:
    weights = GGUFWeights(family_gguf("gpt2")[1])
    with pytest.raises(ValueError, match="stored transposed"):
        weights.raw("transformer.h.0.attn.c_attn.weight")


@pytest.mark.parametrize("arch", FAMILIES)
def test_tokenizer_encodes_as_the_checkpoints(arch: str, family_gguf) -> None:
    model_dir, path = family_gguf(arch)
    hf = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
    ours = load_tokenizer(path)
    for prompt in PROMPTS:
        assert ours.encode(prompt) == hf.encode(prompt).ids


@pytest.mark.parametrize("arch", FAMILIES)
def test_greedy_tokens_and_logits_equal_transformers(arch: str, family_gguf) -> None:
    model_dir, path = family_gguf(arch)
    assert_equals_oracle(LLM(path, device="cpu", show_progress=False), load_oracle(model_dir))


def test_phi3_q8_0_kept_quantized_equals_transformers_on_its_values(
    tiny_model_dir, tmp_path: Path
) -> None:
    model_dir = tiny_model_dir(FAMILIES["phi3"])
    path = tmp_path / "phi3-q8_0.gguf"
    expected = write_family_gguf(model_dir, path, Q.Q8_0)
    formats = make_request(CompileOptions(path)).weight_formats
    assert formats["model.layers.0.self_attn.qkv_proj.weight"] == "q8_0"
    assert formats["model.layers.1.mlp.gate_up_proj.weight"] == "q8_0"
    oracle = dequantized_oracle(model_dir, expected)
    assert_equals_oracle(LLM(path, device="cpu", show_progress=False), oracle)


def test_opt_is_refused_with_the_reason(tmp_path: Path) -> None:
    table = np.zeros((8, 32), np.float32)
    path = write_gguf(
        tmp_path / "opt.gguf", "opt", {}, [SynthTensor("token_embd.weight", table, Q.F32)]
    )
    with pytest.raises(ValueError, match=r"'opt': llama\.cpp defines no OPT architecture"):
        hf_config_from_gguf(path)


def test_phi3_attention_factor_other_than_transformers_is_refused(
    tiny_model_dir, tmp_path: Path
) -> None:
    path = tmp_path / "phi3-factor.gguf"
    write_family_gguf(tiny_model_dir(FAMILIES["phi3"]), path)
    field = gguf.GGUFReader(path, "r+").fields["phi3.rope.scaling.attn_factor"]
    field.parts[field.data[0]][0] = 1.5
    with pytest.raises(ValueError, match=r"unsupported phi3\.rope\.scaling\.attn_factor 1\.5"):
        hf_config_from_gguf(path)


@pytest.mark.parametrize("arch", gguf_architectures())
def test_every_tensor_name_read_is_one_llama_cpp_defines_for_the_architecture(arch: str) -> None:
    model_arch = gguf.MODEL_ARCH[arch.upper()]
    defined = {gguf.TENSOR_NAMES[t].replace("{bid}", "N") for t in gguf.MODEL_TENSORS[model_arch]}
    # An untied head is read for every architecture; llama.cpp's Gemma 1/2 always tie it.
    defined.add("output")
    for name in accepted_tensor_names(arch):
        # Most names end in .weight / .bias; a few have no suffix (ssm_a).
        assert name in defined or name.rsplit(".", 1)[0] in defined, name


def _granite_file(path: Path, **scales: float) -> Path:
    metadata = {
        "granite.block_count": 1,
        "granite.context_length": 64,
        "granite.embedding_length": 32,
        "granite.feed_forward_length": 64,
        "granite.attention.head_count": 2,
        "granite.attention.layer_norm_rms_epsilon": 1e-5,
        **{f"granite.{key.replace('__', '.')}": value for key, value in scales.items()},
    }
    table = np.zeros((8, 32), np.float32)
    return write_gguf(path, "granite", metadata, [SynthTensor("token_embd.weight", table, Q.F32)])


def test_granite_scales_left_out_read_as_llama_cpp_reads_them(tmp_path: Path) -> None:
    # llama.cpp (src/models/granite.cpp): an absent attention scale is 1/sqrt(head size), an
    # absent embedding or residual scale scales nothing, and logit_scale is required.
    parsed = parse_llama_family_config(
        hf_config_from_gguf(_granite_file(tmp_path / "g.gguf", logit_scale=4.0))
    )
    assert parsed.attention_scale == 16**-0.5
    assert (parsed.embedding_scale, parsed.residual_multiplier) == (1.0, 1.0)
    assert parsed.logits_scaling == 4.0
    with pytest.raises(ValueError, match=r"lacks the metadata key 'granite\.logit_scale'"):
        hf_config_from_gguf(_granite_file(tmp_path / "none.gguf", attention__scale=0.5))
