"""The Gated DeltaNet layer equals transformers' own layer module, states handed across calls.

Oracles: `Qwen3NextGatedDeltaNet` (fused, per-key-head grouped in_proj_qkvz / in_proj_ba)
and `Qwen3_5GatedDeltaNet` (split in_proj_qkv / z / b / a, concatenated at load) on the same
tiny random weights, their pure-torch paths (chunked delta rule for prompts, the recurrent
one for single tokens), fp32, each sequence run alone with a transformers cache. Ours runs
a ragged batch of two sequences (one longer than a chunk, neither a multiple of 64): a first
prompt chunk from zero states, a second chunk from the carried states, then decode steps.
Outputs and both states (transformers keeps K conv inputs, of which ours are the last
K - 1) agree within 1e-4. The states live at slots 2 and 0 of three-slot pools, updated in
place; slot 1 comes back bit for bit.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
import tvm
from gated_delta_layer_module import GatedDeltaNetModule
from tvm import relax

from vllm_tvm.compiler.pipeline import lowering_pipeline
from vllm_tvm.model_defs.gated_delta_net import (
    GatedDeltaNetOptions,
    ProjectionLayout,
    split_projection_sources,
)

TOLERANCE = 1e-4
HF_SHAPE = {
    "hidden_size": 48,
    "linear_num_key_heads": 2,
    "linear_num_value_heads": 4,
    "linear_key_head_dim": 16,
    "linear_value_head_dim": 8,
    "linear_conv_kernel_dim": 4,
    "rms_norm_eps": 1e-6,
    "num_hidden_layers": 1,
    "layer_types": ["linear_attention"],
    "hidden_act": "silu",
}
FIRST_CHUNK = [70, 5]
SECOND_CHUNK = [9, 3]
DECODE_STEPS = 3
POOL_SLOTS, SLOTS, IDLE_SLOT = 3, [2, 0], 1
"""The sequences' state slots in pools of three; the idle slot must come back unchanged."""
FAMILIES = {
    "qwen3_next": ProjectionLayout.GROUPED,
    "qwen3_5": ProjectionLayout.CONCATENATED,
}


def _hf_layer(family: str) -> tuple[torch.nn.Module, object]:
    if family == "qwen3_next":
        from transformers import Qwen3NextConfig
        from transformers.models.qwen3_next.modeling_qwen3_next import Qwen3NextGatedDeltaNet

        config = Qwen3NextConfig(**HF_SHAPE)
        layer = Qwen3NextGatedDeltaNet(config, 0)
    else:
        from transformers import Qwen3_5TextConfig
        from transformers.models.qwen3_5.modeling_qwen3_5 import Qwen3_5GatedDeltaNet

        config = Qwen3_5TextConfig(**HF_SHAPE)
        layer = Qwen3_5GatedDeltaNet(config, 0)
    torch.manual_seed(0)
    with torch.no_grad():
        for param in layer.parameters():
            param.copy_(torch.randn_like(param) * 0.3)
        layer.A_log.copy_(torch.log(torch.rand_like(layer.A_log) * 4 + 0.5))
    return layer.float().eval(), config


class _Compiled:
    """Our layer compiled for this CPU with the HF layer's weights."""

    def __init__(self, family: str, hf_layer: torch.nn.Module, config: object) -> None:
        options = GatedDeltaNetOptions.from_hf_config(config.to_dict(), FAMILIES[family])
        self.options = options
        target = tvm.target.Target("llvm")
        module = GatedDeltaNetModule(options, target, "float32")
        mod, named_params = module.export_tvm(spec=module.export_spec())
        executable = tvm.compile(mod, target=target, relax_pipeline=lowering_pipeline(target))
        self.vm = relax.VirtualMachine(executable, tvm.cpu())
        hf = {f"linear_attn.{k}": v.detach().numpy() for k, v in hf_layer.state_dict().items()}
        self.params = []
        for name, _ in named_params:
            sources, axis = (
                split_projection_sources(name)
                if options.layout is ProjectionLayout.CONCATENATED
                else ([name], 0)
            )
            array = np.concatenate([hf[source] for source in sources], axis=axis)
            self.params.append(tvm.runtime.tensor(array.astype(np.float32)))

    def call(self, function: str, *arrays: np.ndarray) -> list[np.ndarray]:
        """The function's outputs (the state pools, updated in place, among them)."""
        outputs = self.vm[function](*(tvm.runtime.tensor(a) for a in arrays), self.params)
        return [output.numpy() for output in outputs]


@pytest.fixture(scope="module", params=sorted(FAMILIES))
def layers(request: pytest.FixtureRequest) -> tuple[torch.nn.Module, object, _Compiled]:
    """(HF layer, its config, our compiled layer with the same weights), once per family."""
    hf_layer, config = _hf_layer(request.param)
    return hf_layer, config, _Compiled(request.param, hf_layer, config)


def _hf_states(cache: object, taps: int) -> tuple[np.ndarray, np.ndarray]:
    """(conv state [K - 1, channels], recurrent state) of a batch-1 transformers cache."""
    conv = cache.layers[0].conv_states[0][0].detach().numpy()
    return conv[:, -taps:].T, cache.layers[0].recurrent_states[0][0].detach().numpy()


def _assert_states(conv: np.ndarray, recurrent: np.ndarray, slot: int, cache, taps: int) -> None:
    want_conv, want_recurrent = _hf_states(cache, taps)
    np.testing.assert_allclose(conv[slot], want_conv, atol=TOLERANCE, rtol=0)
    np.testing.assert_allclose(recurrent[slot], want_recurrent, atol=TOLERANCE, rtol=0)


def test_prefill_chunks_and_decode_steps_match_transformers(layers) -> None:
    from transformers import DynamicCache

    hf_layer, config, ours = layers
    options = ours.options
    taps = options.conv_kernel_size - 1
    rng = np.random.default_rng(0)
    batch = len(FIRST_CHUNK)
    conv = rng.standard_normal(options.conv_state_shape(POOL_SLOTS)).astype(np.float32)
    recurrent = rng.standard_normal(options.recurrent_state_shape(POOL_SLOTS)).astype(np.float32)
    conv[SLOTS], recurrent[SLOTS] = 0.0, 0.0
    idle_conv, idle_recurrent = conv[IDLE_SLOT].copy(), recurrent[IDLE_SLOT].copy()
    slots = np.asarray(SLOTS, np.int32)
    caches = [DynamicCache(config=config) for _ in range(batch)]
    for lengths in (FIRST_CHUNK, SECOND_CHUNK):
        hidden = rng.standard_normal((1, sum(lengths), options.hidden_size)).astype(np.float32)
        starts = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)
        out, conv, recurrent = ours.call("prefill", hidden, starts, slots, conv, recurrent)
        for seq, cache in enumerate(caches):
            rows = hidden[:, starts[seq] : starts[seq + 1]]
            with torch.no_grad():
                want = hf_layer(torch.from_numpy(rows), cache=cache).numpy()
            got = out[:, starts[seq] : starts[seq + 1]]
            np.testing.assert_allclose(got, want, atol=TOLERANCE, rtol=0)
            _assert_states(conv, recurrent, SLOTS[seq], cache, taps)
    for _ in range(DECODE_STEPS):
        hidden = rng.standard_normal((batch, 1, options.hidden_size)).astype(np.float32)
        out, conv, recurrent = ours.call("decode", hidden, slots, conv, recurrent)
        for seq, cache in enumerate(caches):
            with torch.no_grad():
                want = hf_layer(torch.from_numpy(hidden[seq : seq + 1]), cache=cache).numpy()
            np.testing.assert_allclose(out[seq : seq + 1], want, atol=TOLERANCE, rtol=0)
            _assert_states(conv, recurrent, SLOTS[seq], cache, taps)
    np.testing.assert_array_equal(conv[IDLE_SLOT], idle_conv)
    np.testing.assert_array_equal(recurrent[IDLE_SLOT], idle_recurrent)
