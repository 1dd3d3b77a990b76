"""The whole hybrid decoder (model_defs/qwen3_next.py) equals transformers' models.

Oracles: `Qwen3NextForCausalLM` (grouped Gated DeltaNet projections, routed layers with a
shared expert and a dense `mlp_only_layers` layer, untied head), `Qwen3_5ForCausalLM`
(split projections, dense SwiGLU, tied head) and `Qwen3_5MoeForCausalLM` (split
projections, every layer routed), each on tiny random weights written by `save_pretrained`
(the checkpoint layout the loader reads), fp32, their pure-torch delta-rule paths. Layers
alternate linear / full attention, so the second full layer is KV-cache layer 1 and the
second Gated DeltaNet layer is pool 1. Ours is compiled once per architecture for this CPU
and driven directly: the paged KV cache from its `create_kv_cache`, the state pools made
here as [slots, row] and updated in place (the forward's returned pools are not used), the
sequence's state at slot 1 of two (slot 0 must stay zero). A 70-token prompt
(longer than a 64-token chunk) gives logits at every position within 2.5e-4 of
transformers'; then greedy decode steps equal transformers' argmax over the grown sequence
and their logits agree within 2.5e-4 too (through `decode_single`). A ragged batch of two
sequences, one prompt split over two calls, then batched `decode`, equals transformers on
each sequence alone.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
import tvm
from hybrid_checkpoints import ROPE, SHAPE, hf_hybrid_model
from safetensors.numpy import load_file
from tvm import relax

from vllm_tvm.checkpoints.families.qwen3_next import QWEN3_5, QWEN3_5_MOE, QWEN3_NEXT
from vllm_tvm.compiler.pipeline import lowering_pipeline
from vllm_tvm.compiler.recurrent_kernels import TargetRecurrentKernels
from vllm_tvm.model_defs.architectures import DEFINITIONS
from vllm_tvm.model_defs.qwen3_next import HybridForCausalLM
from vllm_tvm.model_defs.qwen3_next_config import HybridConfig
from vllm_tvm.runtime.kv.kv_cache import KVCacheConfig, PagedKVCache

TOLERANCE = 2.5e-4
"""Logits, absolute (they reach about 5.4). transformers' own two forms of the delta rule, its
64-token chunked one (what its prefill runs) and its step-by-step one, differ by 1.1e-4 at
position 62 of this prompt on an AMD EPYC host; ours differs from the chunked form by 1.7e-4
there and by at most 3e-5 at every other position."""
PROMPT_LENGTH = 70
DECODE_STEPS = 3
POOL_SLOTS, SLOT = 2, 1
HYBRID = DEFINITIONS["hybrid"]


class _Compiled:
    """Ours compiled for this CPU with the checkpoint's weights, and a KV cache."""

    def __init__(self, config: HybridConfig, weights: dict[str, np.ndarray]) -> None:
        target = tvm.target.Target("llvm")
        model = HybridForCausalLM(config, "float32", target, kernels=TargetRecurrentKernels(target))
        mod, named_params = model.export_tvm(spec=model.export_spec())
        executable = tvm.compile(mod, target=target, relax_pipeline=lowering_pipeline(target))
        self.vm = relax.VirtualMachine(executable, tvm.cpu())
        self.config = config
        self.model = model
        self.params = []
        sources_of = HYBRID.sources_for(config)
        for name, param in named_params:
            sources, axis = sources_of(name)
            array = np.concatenate([weights[source] for source in sources], axis=axis)
            self.params.append(tvm.runtime.tensor(array.reshape(param.shape).astype(np.float32)))
        self.kv_cache = PagedKVCache(
            self.vm["create_kv_cache"],
            KVCacheConfig(max_batch_size=2, max_total_seq_len=256, prefill_chunk_size=128),
        )

    def pools(self, slots: int = POOL_SLOTS) -> tuple[list, list]:
        """Zero conv and recurrent pools [slots, row], one each per linear layer."""
        layers = len(self.config.linear_layers)
        rows = [int(np.prod(shape)) for shape in self.model.state_shapes()]
        conv, rec = ([np.zeros((slots, row), np.float32)] * layers for row in rows)
        return [tvm.runtime.tensor(a) for a in conv], [tvm.runtime.tensor(a) for a in rec]

    def embed(self, token_ids: list[int], one_each: bool = False) -> tvm.runtime.Tensor:
        """Embeddings [1, n, H] of a ragged prefill, or [n, 1, H] (`one_each`) of a decode."""
        rows = self.vm["embed"](tvm.runtime.tensor(np.array(token_ids, np.int32)), self.params)
        return tvm.runtime.tensor(rows.numpy()[:, None] if one_each else rows.numpy()[None])


def _int32(values: list[int]) -> tvm.runtime.Tensor:
    return tvm.runtime.tensor(np.array(values, np.int32))


@pytest.fixture(scope="module", params=[QWEN3_NEXT, QWEN3_5, QWEN3_5_MOE])
def models(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory):
    """(transformers' model, ours compiled) for each architecture, one compile each."""
    hf = hf_hybrid_model(request.param)
    directory = tmp_path_factory.mktemp(request.param)
    hf.save_pretrained(directory)
    weights = load_file(directory / "model.safetensors")
    if hf.config.tie_word_embeddings:
        assert "lm_head.weight" not in weights
    config = HYBRID.parse_config(json.loads((directory / "config.json").read_text()))
    return hf, _Compiled(config, weights)


def _hf_logits(hf: torch.nn.Module, token_ids: list[int]) -> np.ndarray:
    with torch.no_grad():
        return hf(torch.tensor([token_ids])).logits[0].numpy()


def test_prefill_then_greedy_decode_matches_transformers(models) -> None:
    hf, ours = models
    rng = np.random.default_rng(0)
    prompt = rng.integers(0, SHAPE["vocab_size"], PROMPT_LENGTH).tolist()
    conv, rec = ours.pools()
    kv = ours.kv_cache
    kv.add_sequence(0)
    try:
        kv.begin_forward([0], [PROMPT_LENGTH])
        logits, *_ = ours.vm["prefill"](
            ours.embed(prompt),
            _int32(list(range(PROMPT_LENGTH))),
            kv.handle,
            _int32([0, PROMPT_LENGTH]),
            _int32([SLOT]),
            conv,
            rec,
            ours.params,
        )
        kv.end_forward()
        prefill = logits.numpy()[0]
        tokens = list(prompt)
        steps = []
        for _ in range(DECODE_STEPS):
            tokens.append(int(np.argmax(steps[-1] if steps else prefill[-1])))
            kv.begin_forward([0], [1])
            logits, *_ = ours.vm["decode_single"](
                ours.embed(tokens[-1:]), kv.handle, _int32([SLOT]), conv, rec, ours.params
            )
            kv.end_forward()
            steps.append(logits.numpy()[0, 0])
    finally:
        kv.clear()
    want = _hf_logits(hf, tokens)
    np.testing.assert_allclose(prefill, want[:PROMPT_LENGTH], atol=TOLERANCE, rtol=0)
    np.testing.assert_allclose(np.stack(steps), want[PROMPT_LENGTH:], atol=TOLERANCE, rtol=0)
    assert tokens[PROMPT_LENGTH:] == [int(t) for t in want[PROMPT_LENGTH - 1 : -1].argmax(-1)]
    for pool in [*conv, *rec]:  # the pools handed in, updated in place
        assert not pool.numpy()[1 - SLOT].any(), "the idle slot was written"
        assert pool.numpy()[SLOT].any()


def test_a_multimodal_checkpoint_reads_its_text_tower_and_vision_tower(tmp_path) -> None:
    """Qwen3.5's multimodal checkpoint: the decoder's config is `text_config` (the head's
    tie at the top level), every decoder tensor is found under the text tower's prefix and
    every vision tensor under `model.visual.`, each shape what the definition wants; every
    tensor of the checkpoint is read."""
    from transformers import Qwen3_5Config, Qwen3_5ForConditionalGeneration

    from vllm_tvm.model_defs.qwen3_5_vl import Qwen3_5VLForConditionalGeneration

    vision = {"depth": 1, "hidden_size": 16, "intermediate_size": 16, "num_heads": 1}
    text = {**SHAPE, "rope_parameters": {**ROPE, "mrope_section": [1, 1, 0]}}
    hf_config = Qwen3_5Config(
        text_config=text, vision_config={**vision, "out_hidden_size": SHAPE["hidden_size"]}
    )
    Qwen3_5ForConditionalGeneration(hf_config).save_pretrained(tmp_path)
    weights = load_file(tmp_path / "model.safetensors")
    family = DEFINITIONS["hybrid-vl"]
    config = family.parse_config(json.loads((tmp_path / "config.json").read_text()))
    assert (config.decoder_architecture, config.tie_word_embeddings) == (QWEN3_5, False)
    assert config.layer_types == tuple(SHAPE["layer_types"])
    target = tvm.target.Target("llvm")
    model = Qwen3_5VLForConditionalGeneration(
        config, "float32", target, kernels=TargetRecurrentKernels(target)
    )
    sources_of = family.sources_for(config)
    read = set()
    for name, param in model.named_parameters():
        sources, axis = sources_of(name)
        arrays = [weights[source] for source in sources]
        assert np.concatenate(arrays, axis=axis).size == np.prod(param.shape), name
        read.update(sources)
    assert set(weights) == read
    assert any(name.startswith("model.visual.") for name in read)


def test_a_ragged_batch_in_two_chunks_then_batched_decode_matches_transformers(models) -> None:
    """Two sequences at slots 2 and 0 of three: the first call carries the short prompt
    whole and the long one's first 40 tokens, the second call the long one's rest (its
    state and KV carried over), then both decode together; each sequence's logits equal
    transformers' on it alone."""
    hf, ours = models
    rng = np.random.default_rng(1)
    lengths, first_chunk, slots = [PROMPT_LENGTH, 9], 40, [2, 0]
    prompts = [rng.integers(0, SHAPE["vocab_size"], n).tolist() for n in lengths]
    conv, rec = ours.pools(3)
    kv = ours.kv_cache

    def prefill(seq_ids: list[int], chunks: list[list[int]]) -> np.ndarray:
        sizes = [len(chunk) for chunk in chunks]
        kv.begin_forward(seq_ids, sizes)
        logits, *_ = ours.vm["prefill"](
            ours.embed([t for chunk in chunks for t in chunk]),
            _int32(list(range(sum(sizes)))),
            kv.handle,
            _int32([0, *np.cumsum(sizes).tolist()]),
            _int32([slots[i] for i in seq_ids]),
            conv,
            rec,
            ours.params,
        )
        kv.end_forward()
        return logits.numpy()[0]

    for seq_id in (0, 1):
        kv.add_sequence(seq_id)
    try:
        first = prefill([0, 1], [prompts[0][:first_chunk], prompts[1]])
        second = prefill([0], [prompts[0][first_chunk:]])
        got = [np.concatenate([first[:first_chunk], second]), first[first_chunk:]]
        tokens = [list(prompt) for prompt in prompts]
        for _ in range(DECODE_STEPS):
            for seq_tokens, seq_logits in zip(tokens, got, strict=True):
                seq_tokens.append(int(np.argmax(seq_logits[-1])))
            kv.begin_forward([0, 1], [1, 1])
            logits, *_ = ours.vm["decode"](
                ours.embed([t[-1] for t in tokens], one_each=True),
                kv.handle,
                _int32(slots),
                conv,
                rec,
                ours.params,
            )
            kv.end_forward()
            got = [np.concatenate([g, logits.numpy()[b]]) for b, g in enumerate(got)]
    finally:
        kv.clear()
    for seq_tokens, seq_logits in zip(tokens, got, strict=True):
        np.testing.assert_allclose(seq_logits, _hf_logits(hf, seq_tokens), atol=TOLERANCE, rtol=0)
