"""`load_format="dummy"`: random weights of the artifact's shapes, an engine built from a
directory holding only config.json, and what an engine without a tokenizer refuses."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from vllm_tvm.artifacts.compile_options import CompileOptions
from vllm_tvm.artifacts.manifest import ParamEntry, read_manifest
from vllm_tvm.benchmarking import BenchConfig, run_benchmark
from vllm_tvm.entrypoints.llm import LLM
from vllm_tvm.entrypoints.resolve import resolve_artifact
from vllm_tvm.model_defs.architectures import family_for
from vllm_tvm.runtime.engine.args import EngineArgs
from vllm_tvm.runtime.engine.llm_engine import LLMEngine
from vllm_tvm.runtime.sampling.params import SamplingParams
from vllm_tvm.runtime.weights.dummy_weights import DUMMY_STD, is_norm_weight, make_dummy_params

BENCH_CONFIGS = sorted((Path(__file__).parent.parent / "benchmarks" / "configs").glob("*"))


@pytest.fixture(scope="module")
def config_only_dir(tiny_model_dir, tmp_path_factory) -> Path:
    """The tiny Llama's config.json alone: no weights, no tokenizer."""
    path = tmp_path_factory.mktemp("config_only")
    shutil.copy(tiny_model_dir("llama") / "config.json", path / "config.json")
    return path


@pytest.fixture(scope="module")
def artifact(config_only_dir) -> Path:
    return resolve_artifact(CompileOptions(config_only_dir), show_progress=False)


def test_dummy_params_follow_the_manifest_in_shape_and_dtype(artifact) -> None:
    entries = read_manifest(artifact).params
    params = make_dummy_params(entries, "cpu", seed=0, show_progress=False)
    assert [list(p.shape) for p in params] == [e.shape for e in entries]
    assert {str(p.dtype) for p in params} == {e.dtype for e in entries}


def test_norm_weights_are_one_and_the_others_have_std_0_02(artifact) -> None:
    entries = read_manifest(artifact).params
    params = make_dummy_params(entries, "cpu", seed=0, show_progress=False)
    for entry, param in zip(entries, params, strict=True):
        values = param.numpy()
        if is_norm_weight(entry.name):
            assert np.all(values == 1.0), entry.name
    embedding = params[[e.name for e in entries].index("model.embed_tokens.weight")].numpy()
    assert embedding.std() == pytest.approx(DUMMY_STD, rel=0.05)
    assert abs(embedding.mean()) < 0.1 * DUMMY_STD


def test_dummy_params_are_reproducible_from_the_seed(artifact) -> None:
    entries = read_manifest(artifact).params[:1]

    def first(seed: int) -> np.ndarray:
        return make_dummy_params(entries, "cpu", seed=seed, show_progress=False)[0].numpy()

    assert np.array_equal(first(4), first(4))
    assert not np.array_equal(first(4), first(5))


def test_bfloat16_params_are_made_in_bfloat16() -> None:
    entry = ParamEntry("model.layers.0.mlp.down_proj.weight", [8, 16], "bfloat16", ["x"])
    (param,) = make_dummy_params([entry], "cpu", show_progress=False)
    assert str(param.dtype) == "bfloat16"


def test_quantized_params_are_refused_by_name() -> None:
    entry = ParamEntry(
        "model.layers.0.mlp.down_proj.weight.qs", [8, 4], "uint32", ["x"], format="q4_0"
    )
    with pytest.raises(ValueError, match=r"down_proj\.weight\.qs is stored as 'q4_0'"):
        make_dummy_params([entry], "cpu", show_progress=False)


def test_a_benchmark_runs_from_a_config_json_only_directory(config_only_dir) -> None:
    config = BenchConfig.from_options(
        config_only_dir,
        load_format="dummy",
        concurrency=(2,),
        input_len=8,
        output_len=4,
        show_progress=False,
    )
    report = run_benchmark(config)
    assert report.conditions["load_format"] == "dummy"
    assert report.conditions["tokenizer_loaded"] is False
    assert report.levels[0].total_output_tokens == 2 * 2 * 4


@pytest.fixture(scope="module")
def engine_without_tokenizer(config_only_dir, artifact) -> LLMEngine:
    args = EngineArgs(
        model=config_only_dir,
        artifact=artifact,
        load_format="dummy",
        skip_tokenizer_init=True,
        num_blocks=4,
        show_progress=False,
    )
    return LLMEngine.from_args(args)


def test_an_engine_without_tokenizer_generates_from_token_ids_without_text(
    engine_without_tokenizer,
) -> None:
    engine = engine_without_tokenizer
    engine.add_request("ids", [5, 6, 7], SamplingParams(temperature=0, max_tokens=3))
    outputs = []
    while engine.has_unfinished:
        outputs.extend(o for o in engine.step() if o.finished)
    (output,) = outputs
    assert len(output.outputs[0].token_ids) == 3
    assert output.outputs[0].text == ""


def test_an_engine_without_tokenizer_refuses_a_text_prompt(engine_without_tokenizer) -> None:
    with pytest.raises(ValueError, match="text prompt needs a tokenizer"):
        engine_without_tokenizer.add_request("text", "hello", SamplingParams())


def test_an_engine_without_tokenizer_refuses_stop_strings(engine_without_tokenizer) -> None:
    with pytest.raises(ValueError, match=r"stop strings \['end'\] need a tokenizer"):
        engine_without_tokenizer.add_request("stop", [5], SamplingParams(stop=["end"]))


@pytest.mark.parametrize("path", BENCH_CONFIGS, ids=[p.name for p in BENCH_CONFIGS])
def test_the_shipped_benchmark_shapes_are_accepted_by_the_model_registry(path) -> None:
    config = json.loads((path / "config.json").read_text())
    parsed = family_for(config).parse_config(config)
    assert parsed.architecture == "LlamaForCausalLM"


def test_llm_takes_dummy_weights_and_no_tokenizer(config_only_dir, artifact) -> None:
    llm = LLM(
        config_only_dir,
        artifact=artifact,
        load_format="dummy",
        skip_tokenizer_init=True,
        num_blocks=4,
        show_progress=False,
    )
    (output,) = llm.generate([5, 6, 7], SamplingParams(temperature=0, max_tokens=2))
    assert llm.tokenizer is None
    assert len(output.outputs[0].token_ids) == 2
