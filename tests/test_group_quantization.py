"""`--quantization q8_0|q4_0|q4_1`: a float checkpoint quantized in groups of 32 at load.

Oracle: transformers on the same checkpoint with every quantized weight replaced by its
round trip through llama.cpp's reference quantizer (the `gguf` package's `quantize` /
`dequantize`), computed here in the test. Our fused kernels dequantize the same blocks in
fp32, so prefill logits agree within 1e-4 and greedy tokens exactly; against the original
float model the logits only agree within quantization error.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from gguf import GGMLQuantizationType
from gguf.quants import dequantize, quantize
from quantized_checkpoints import PROMPTS, assert_equals_oracle, prefill_logits
from tiny_models import load_oracle

from vllm_tvm.artifacts.compile_options import CompileOptions
from vllm_tvm.checkpoints.group_quantization import (
    GroupQuantizedWeights,
    check_quantization,
    relative_error,
)
from vllm_tvm.checkpoints.safetensors_weights import SafetensorsWeights
from vllm_tvm.cli.main import main as cli_main
from vllm_tvm.compiler.build import make_request
from vllm_tvm.entrypoints.llm import LLM

TYPES = {
    "q8_0": GGMLQuantizationType.Q8_0,
    "q4_0": GGMLQuantizationType.Q4_0,
    "q4_1": GGMLQuantizationType.Q4_1,
}


def _dequantized_oracle(model_dir, method: str):
    """transformers' fp32 model whose linear and embedding weights went through the
    reference quantizer and back."""
    oracle = load_oracle(model_dir)
    qtype = TYPES[method]
    with torch.no_grad():
        for param in oracle.parameters():
            if param.ndim != 2 or param.shape[-1] % 32:
                continue
            weight = param.detach().numpy().astype(np.float32)
            param.copy_(torch.from_numpy(dequantize(quantize(weight, qtype), qtype)))
    return oracle


@pytest.mark.parametrize("method", sorted(TYPES))
def test_quantized_model_equals_transformers_on_dequantized_weights(
    method: str, tiny_model_dir
) -> None:
    model_dir = tiny_model_dir("llama")
    llm = LLM(model_dir, device="cpu", quantization=method, show_progress=False)
    manifest = llm.runner.manifest
    assert manifest.quantization == method
    quantized = {p.name.rpartition(".")[0] for p in manifest.params if p.format == method}
    assert "model.layers.0.self_attn.qkv_proj.weight" in quantized
    assert "model.embed_tokens.weight" in quantized
    assert_equals_oracle(llm, _dequantized_oracle(model_dir, method))
    # The quantization is real: the float model's logits differ by more than rounding.
    ids = llm.tokenizer.encode(PROMPTS[2])
    with torch.no_grad():
        original = load_oracle(model_dir)(torch.tensor([ids])).logits[0].numpy()
    assert np.abs(prefill_logits(llm, ids) - original).max() > 1e-3


def test_loader_blocks_are_the_reference_quantizers_bytes(tiny_model_dir) -> None:
    source = SafetensorsWeights(tiny_model_dir("llama"))
    name = "model.layers.1.mlp.down_proj.weight"
    raw = GroupQuantizedWeights(source, "q4_1").raw(name)
    weight = np.asarray(source.get(name), dtype=np.float32)
    assert raw.shape == weight.shape
    assert np.array_equal(raw.data, quantize(weight, GGMLQuantizationType.Q4_1))


def test_relative_error_orders_the_methods(tiny_model_dir) -> None:
    weight = SafetensorsWeights(tiny_model_dir("llama")).get("model.layers.0.mlp.up_proj.weight")
    errors = {method: relative_error(weight, method) for method in TYPES}
    assert 0 < errors["q8_0"] < errors["q4_1"] < errors["q4_0"] < 0.2
    assert relative_error(np.zeros((2, 32), np.float32), "q4_0") == 0.0


def test_unknown_method_refused_by_name() -> None:
    with pytest.raises(ValueError, match=r"unsupported quantization 'awq'.*q8_0, q4_0, q4_1"):
        check_quantization("awq")


def test_gguf_checkpoint_refused_with_quantization(tmp_path) -> None:
    from gguf_fused_dequant_helpers import write_quantized_llama

    path = write_quantized_llama(tmp_path / "tiny.gguf", GGMLQuantizationType.Q8_0)
    with pytest.raises(ValueError, match=r"applies to float checkpoints.*GGUF"):
        make_request(CompileOptions(path, quantization="q4_0"))


def test_compile_prints_the_error_report(tiny_model_dir, tmp_path, capsys) -> None:
    code = cli_main(
        [
            "compile",
            str(tiny_model_dir("qwen3_qknorm")),
            "--quantization",
            "q8_0",
            "--output",
            str(tmp_path / "artifact"),
        ]
    )
    assert code == 0
    report = capsys.readouterr().err
    assert "quantization q8_0: relative error" in report
    assert "model.layers.1.self_attn.k_proj.weight" in report
    assert "mean " in report and "worst " in report
