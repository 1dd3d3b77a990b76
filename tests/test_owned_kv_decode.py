"""The model's forwards over KV pages the runtime owns (`prefill_owned` / `decode_owned`):
the page table and metadata on their own, greedy tokens against transformers and against
TVM's cache on the same artifact (CPU), and the CUDA decode step lowered to one captured
graph (no GPU needed).

The CPU artifact is the tiny Llama built with the `owned_kv` compile option; the runner
calls the owned functions when the artifact has them, and TVM's cache for the same
checkpoint built without the option.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch
import tvm
from tiny_models import TINY_MODELS, load_oracle, make_tiny_model

from vllm_tvm.artifacts.backends import ATTENTION_FLASHINFER
from vllm_tvm.artifacts.compile_options import CompileOptions
from vllm_tvm.artifacts.owned_kv import (
    OWNED_DECODE,
    OWNED_PREFILL,
    OWNED_PREFILL_FRESH,
    OWNED_PREFILL_MIXED,
    OWNED_RAGGED_ATTENTION,
    RAGGED_FLASHINFER,
)
from vllm_tvm.artifacts.runtime_spec import OwnedPagesSpec
from vllm_tvm.compiler.build import make_request
from vllm_tvm.compiler.export import export_model
from vllm_tvm.compiler.owned_kv_kernels import RAGGED_KERNEL
from vllm_tvm.compiler.pipeline import lowering_pipeline
from vllm_tvm.entrypoints.llm import LLM
from vllm_tvm.model_defs.rope_scaling import cache_rope_frequencies
from vllm_tvm.runtime.kv.kv_cache import KVCacheConfig
from vllm_tvm.runtime.kv.owned_kv_cache import (
    OwnedKVCache,
    decode_bucket,
    mixed_metadata,
    prefill_metadata,
)
from vllm_tvm.runtime.kv.owned_pages import OwnedPageTable
from vllm_tvm.runtime.sampling.params import SamplingParams

PAGE = 16
PROMPTS = ["Once upon a time", "The quick brown fox jumps over", "Beautiful is better than ugly."]
NEW_TOKENS = 24


def test_page_table_shares_forked_pages_and_frees_them_last() -> None:
    table = OwnedPageTable(num_pages=4, page_size=PAGE)
    table.add_sequence(0)
    table.grow([0], [2 * PAGE])
    table.fork_sequence(0, 1, PAGE)
    assert table.pages(1) == table.pages(0)[:1]
    table.grow([1], [1])
    assert table.pages(1)[1] not in table.pages(0) and table.available_pages() == 1
    table.remove_sequence(0)
    assert table.available_pages() == 2, "the shared first page stays with the child"
    table.popn(1, PAGE + 1)
    assert table.pages(1) == [] and table.available_pages() == 4


def test_page_table_refuses_appending_into_a_shared_page_and_an_empty_pool() -> None:
    table = OwnedPageTable(num_pages=2, page_size=PAGE)
    table.add_sequence(0)
    table.grow([0], [5])
    table.fork_sequence(0, 1)
    with pytest.raises(ValueError, match="another sequence shares"):
        table.grow([1], [1])
    table.add_sequence(2)
    with pytest.raises(MemoryError, match="needs 2 KV pages; 1 are free"):
        table.grow([2], [2 * PAGE])
    assert table.sequence_length(2) == 0, "a refused forward changes nothing"


def test_prefill_metadata_of_a_chunk_after_cached_tokens() -> None:
    arrays = prefill_metadata([[7, 3], [5]], cached=[15, 0], new=[2, 3], page_size=PAGE)
    q_indptr, page_indptr, values, last, positions, slots = (a.tolist() for a in arrays)
    assert (q_indptr, page_indptr, values, last) == ([0, 2, 5], [0, 1, 1], [7], [15, PAGE])
    assert positions == [15, 16, 0, 1, 2]
    assert slots == [7 * PAGE + 15, 3 * PAGE, 5 * PAGE, 5 * PAGE + 1, 5 * PAGE + 2]


def test_mixed_metadata_puts_the_one_token_rows_and_the_prompts_back_in_step_order() -> None:
    """A fresh two-token prompt (step rows 0, 1) before one token of a sequence with 4
    cached (row 2): the decoded row first (its pages cover the new token), then the
    prompt's (no cached pages), and `row_order` undoes it."""
    arrays = mixed_metadata([[5], [3]], cached=[0, 4], new=[2, 1], page_size=PAGE)
    assert arrays is not None
    decode_rows, decode_indptr, decode_values, decode_last, prompt_rows = (
        a.tolist() for a in arrays[:5]
    )
    q_indptr, page_indptr, _, last, order = (a.tolist() for a in arrays[5:10])
    assert (decode_rows, decode_indptr, decode_values, decode_last) == ([2], [0, 1], [3], [5])
    assert (prompt_rows, q_indptr, page_indptr, last, order) == (
        [0, 1],
        [0, 2],
        [0, 0],
        [PAGE],
        [1, 2, 0],
    )
    assert arrays[-1].tolist() == [5 * PAGE, 5 * PAGE + 1, 3 * PAGE + 4]
    assert mixed_metadata([[5], [3]], cached=[0, 4], new=[2, 2], page_size=PAGE) is None
    assert mixed_metadata([[5], [3]], cached=[1, 4], new=[1, 1], page_size=PAGE) is None


def test_llama3_frequencies_equal_transformers() -> None:
    from transformers import LlamaConfig
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    scaling = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0}
    scaling |= {"high_freq_factor": 4.0, "original_max_position_embeddings": 8192}
    config = LlamaConfig(head_dim=128, rope_theta=500000.0, rope_scaling=scaling)
    theirs, factor = ROPE_INIT_FUNCTIONS["llama3"](config, "cpu")
    ours, our_factor = cache_rope_frequencies("llama3", scaling, 500000.0, 128)
    np.testing.assert_allclose(ours, theirs.numpy(), rtol=1e-6)
    assert our_factor == factor == 1.0


def test_decode_buckets_pad_up_and_refuse_past_the_largest() -> None:
    assert [decode_bucket(b) for b in (1, 3, 5, 9, 256)] == [1, 4, 8, 16, 256]
    with pytest.raises(ValueError, match="serve 1 to 256"):
        decode_bucket(257)


@pytest.fixture(scope="module")
def owned_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_tiny_model(TINY_MODELS["llama"], tmp_path_factory.mktemp("owned_llama"))


@pytest.fixture(scope="module")
def owned_llm(owned_model: Path) -> LLM:
    return LLM(owned_model, device="cpu", owned_kv=True, show_progress=False)


def _greedy(llm: LLM) -> list[list[int]]:
    params = SamplingParams(temperature=0.0, max_tokens=NEW_TOKENS, ignore_eos=True)
    return [out.outputs[0].token_ids for out in llm.generate(PROMPTS, params)]


def test_owned_greedy_tokens_equal_transformers(owned_llm: LLM, owned_model: Path) -> None:
    assert isinstance(owned_llm.runner.kv_cache, OwnedKVCache)
    oracle = load_oracle(owned_model)
    oracle.generation_config.eos_token_id = None
    oracle.generation_config.pad_token_id = 0
    for prompt, tokens in zip(PROMPTS, _greedy(owned_llm), strict=True):
        ids = owned_llm.tokenizer.encode(prompt)
        with torch.no_grad():
            out = oracle.generate(torch.tensor([ids]), max_new_tokens=NEW_TOKENS, do_sample=False)
        assert tokens == out[0, len(ids) :].tolist()


def test_prefill_over_cached_pages_matches_transformers(owned_llm: LLM, owned_model: Path) -> None:
    """A prompt in two chunks: the first a fresh prefill (`prefill_owned_fresh`), the
    second over the first's pages (`prefill_owned`, a chunk starting inside a page)."""
    runner = owned_llm.runner
    ids = owned_llm.tokenizer.encode(PROMPTS[2]) * 2
    runner.kv_cache.add_sequence(9)
    try:
        runner.prefill_logits([9], [ids[:5]])
        logits = runner.prefill_logits([9], [ids[5:]]).numpy()
    finally:
        runner.kv_cache.remove_sequence(9)
    with torch.no_grad():
        expected = load_oracle(owned_model)(torch.tensor([ids])).logits[0, -1]
    assert np.abs(logits[-1] - expected.numpy()).max() <= 1e-4


def test_a_mixed_step_matches_transformers(
    owned_llm: LLM, owned_model: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """In one forward (`prefill_owned_mixed`): a fresh prompt, the last token of a sequence
    with the rest cached (the decode kernel), and a prompt's second chunk after its first
    (its own chunk merged with its cached tokens): each row's logits within 1e-4 of
    transformers'."""
    runner = owned_llm.runner
    fresh, cached = (owned_llm.tokenizer.encode(prompt) for prompt in PROMPTS[:2])
    chunked = owned_llm.tokenizer.encode(PROMPTS[2]) * 2
    ran = []
    choose = runner.kv_cache.prefill_arguments

    def recording(functions: list[str]) -> tuple[str, list[object]]:
        name, arguments = choose(functions)
        ran.append(name)
        return name, arguments

    monkeypatch.setattr(runner.kv_cache, "prefill_arguments", recording)
    for seq_id in (7, 8, 9):
        runner.kv_cache.add_sequence(seq_id)
    try:
        runner.prefill_logits([7, 9], [cached[:-1], chunked[:5]])
        chunks = [fresh, cached[-1:], chunked[5:]]
        logits = runner.prefill_logits([8, 7, 9], chunks).numpy()
    finally:
        for seq_id in (7, 8, 9):
            runner.kv_cache.remove_sequence(seq_id)
    assert ran[-1] == OWNED_PREFILL_MIXED
    oracle = load_oracle(owned_model)
    with torch.no_grad():
        for row, ids in enumerate((fresh, cached, chunked)):
            expected = oracle(torch.tensor([ids])).logits[0, -1].numpy()
            assert np.abs(logits[row] - expected).max() <= 1e-4


def test_owned_decode_logits_equal_the_cache_path(owned_llm: LLM, owned_model: Path) -> None:
    """The checkpoint built without the option (TVM's cache): decode logits of a batch of
    three (padded to the bucket of four) within fp32 rounding of the owned path's."""
    cache_llm = LLM(owned_model, device="cpu", show_progress=False)
    assert not isinstance(cache_llm.runner.kv_cache, OwnedKVCache)
    logits = []
    for llm in (owned_llm, cache_llm):
        runner = llm.runner
        prompts = [llm.tokenizer.encode(p) for p in PROMPTS[:3]]
        for seq_id in range(3):
            runner.kv_cache.add_sequence(seq_id)
        try:
            runner.prefill_logits([0, 1, 2], prompts)
            logits.append(runner.decode_logits([0, 1, 2], [5, 6, 7]).numpy())
        finally:
            for seq_id in range(3):
                runner.kv_cache.remove_sequence(seq_id)
    np.testing.assert_allclose(logits[0], logits[1], rtol=0, atol=2e-5)


def test_cuda_decode_step_is_one_captured_graph(tiny_model_dir) -> None:
    """Everything after the embedding's gather (which reads the step's token ids) runs in
    the one captured region: every layer's append and attention, the GEMMs, the final norm
    and the lm head."""
    model = str(tiny_model_dir("llama"))
    options = CompileOptions(model=model, target="cuda", dtype="bfloat16", owned_kv=True)
    request = make_request(options)
    mod = export_model(request).mod
    target = request.target.make_target()
    with target, tvm.transform.PassContext(config={"relax.backend.use_cuda_graph": True}):
        lowered = lowering_pipeline(target)(mod)
    capture = f"{OWNED_DECODE}_cuda_graph_capture"
    assert capture in [gv.name_hint for gv in lowered.functions]
    step, graph = lowered[OWNED_DECODE].script(), lowered[capture].script()
    assert step.count("vm.builtin.cuda_graph.run_or_capture") == 1
    layers = 2
    for kernel in ("device_decode_kv_append(", "device_decode_attention("):
        assert (step.count(kernel), graph.count(kernel)) == (0, layers)
    assert "take(" in step and "take(" not in graph


def test_a_definition_not_checked_over_owned_pages_keeps_the_cache(tiny_model_dir) -> None:
    """GPT-2 (learned positions): a CUDA build not asked for owned pages exports the
    cache's functions alone; asking for them is refused by name."""
    options = CompileOptions(model=str(tiny_model_dir("gpt2_tied")), target="cuda")
    assert OWNED_DECODE not in export_model(make_request(options)).manifest.functions
    with pytest.raises(ValueError, match=r"owned_kv: .* do not serve LearnedPosition"):
        export_model(make_request(replace(options, owned_kv=True)))


def test_the_option_keys_its_own_artifact_and_the_flag_sets_it(tiny_model_dir) -> None:
    """`owned_kv` is a compile option: it changes the artifact's key, and `--owned-kv` of
    every front end's flags sets it (off by default)."""
    import argparse

    from vllm_tvm.cli.common_args import add_compile_arguments
    from vllm_tvm.compiler.build import cache_key_for

    options = CompileOptions(model=str(tiny_model_dir("llama")))
    owned = replace(options, owned_kv=True)
    assert cache_key_for(make_request(options)) != cache_key_for(make_request(owned))
    parser = argparse.ArgumentParser()
    add_compile_arguments(parser)
    assert parser.parse_args([]).owned_kv is False
    assert parser.parse_args(["--owned-kv"]).owned_kv is True
    CompileOptions(model=options.model, target="cuda", attention="flashinfer", owned_kv=True)


def test_with_flashinfer_the_prefills_call_the_registered_ragged_product(
    tiny_model_dir, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Built for attention `flashinfer`, every prefill's own-chunk product is the packed
    function the runtime registers (no TIR ragged kernel in the library), and the runtime
    spec tells the runtime so, with the query heads its plan needs. (FlashInfer's JIT is not
    needed: the model's own cache stays TIR here; the H200 runs the real build.)"""
    from vllm_tvm.compiler import export

    attach = export.attach_owned_kernels
    monkeypatch.setattr(
        export, "attach_owned_kernels", lambda *args: attach(*args[:4], ATTENTION_FLASHINFER)
    )
    options = CompileOptions(
        model=str(tiny_model_dir("llama")), target="cuda", dtype="bfloat16", owned_kv=True
    )
    exported = export_model(make_request(options))
    owned = exported.manifest.runtime.owned_pages
    assert owned is not None
    assert (owned.ragged_attention, owned.q_heads, owned.kv_heads) == (RAGGED_FLASHINFER, 4, 2)
    assert RAGGED_KERNEL not in [gv.name_hint for gv in exported.mod.functions]
    layers = 2
    for name in (OWNED_PREFILL_FRESH, OWNED_PREFILL, OWNED_PREFILL_MIXED):
        assert exported.mod[name].script().count(OWNED_RAGGED_ATTENTION) == layers


def test_the_ragged_plan_covers_the_rows_that_attend_to_their_own_chunk() -> None:
    """A fresh prefill plans all of its rows; a mixed step only its prompts' rows (the
    one-token rows go through the decode kernel)."""

    class Recorder:
        def __init__(self) -> None:
            self.planned: list[list[int]] = []

        def plan(self, q_indptr: np.ndarray) -> None:
            self.planned.append(q_indptr.tolist())

    recorder = Recorder()
    config = KVCacheConfig(
        max_batch_size=4, max_total_seq_len=8 * PAGE, prefill_chunk_size=64, page_size=PAGE
    )
    spec = OwnedPagesSpec(layers=1, kv_heads=1, head_dim=4, q_heads=1)
    cache = OwnedKVCache(
        config, spec, "float32", 4 * PAGE, lambda shape, dtype: None, lambda a: a, recorder
    )
    functions = [OWNED_PREFILL, OWNED_PREFILL_FRESH, OWNED_PREFILL_MIXED]
    for seq_id in (0, 1):
        cache.add_sequence(seq_id)
    cache.begin_forward([0], [3])
    assert cache.prefill_arguments(functions)[0] == OWNED_PREFILL_FRESH
    cache.end_forward()
    cache.begin_forward([1, 0], [5, 1])
    assert cache.prefill_arguments(functions)[0] == OWNED_PREFILL_MIXED
    cache.end_forward()
    assert recorder.planned == [[0, 3], [0, 5]]
