"""An EAGLE-1 head (the layout vLLM loads, e.g. yuhuili/EAGLE-LLaMA3-Instruct-8B): a small
network that predicts the target's next token from the target's own last hidden state.

Why it is its own definition: its input is not a token's embedding alone. At draft position
p it reads fc(concat(embed(token p+1), hidden p)) (`fc` [hidden, 2 * hidden], with a bias
when the checkpoint has one, zeros otherwise), where hidden p is the target's final-norm
hidden state at p (what its LM head reads; the draft's own output when drafting further).
Then come Llama decoder layers of which the first has no input RMSNorm, no final norm, and
the target's LM head (EAGLE's cnets.py, vLLM's llama_eagle.py). The exported functions take
that hidden state next to the embeddings and return the head's output hidden state next to
the logits, for the next draft:
- `prefill(input_embed [1, n, h], input_hidden [1, n, h], logit_positions, kv_cache)` ->
  (logits [1, m, vocab], output hidden [1, m, h]) at the positions;
- `decode(input_embed [b, 1, h], input_hidden [b, 1, h], kv_cache)` -> the same per row.
Embeddings and LM head are parameters like any other; the runtime hands it the target's
(runtime/speculative/head_runner.py) unless the head's checkpoint carries its own.
"""

from __future__ import annotations

from typing import Any

from tvm.relax.frontend import nn
from tvm.relax.frontend.nn import Tensor, op
from tvm.relax.frontend.nn.llm.kv_cache import PagedKVCache
from tvm.target import Target

from vllm_tvm.model_defs.config import LlamaFamilyConfig
from vllm_tvm.model_defs.layers import NTLinear
from vllm_tvm.model_defs.llama import LlamaDecoderLayer, LlamaForCausalLM, fused_weight_sources


class EagleBody(nn.Module):
    """Embedding table, fc and decoder layers (the checkpoint's names, under `model.`)."""

    def __init__(self, config: LlamaFamilyConfig, dtype: str) -> None:
        size = config.hidden_size
        self.embed_tokens = nn.Embedding(config.vocab_size, size, dtype=dtype)
        self.fc = NTLinear(2 * size, size, True, dtype)
        layers = [LlamaDecoderLayer(config, dtype, i) for i in range(config.num_hidden_layers)]
        layers[0].input_layernorm = None
        self.layers = nn.ModuleList(layers)

    def forward(self, embeddings: Tensor, hidden: Tensor, kv_cache: PagedKVCache) -> Tensor:
        hidden = self.fc(op.concat([embeddings, hidden], dim=-1))
        for layer_id, layer in enumerate(self.layers):
            hidden = layer(hidden, kv_cache, layer_id)
        return hidden


class EagleHead(LlamaForCausalLM):
    """The exported head: `embed`, `prefill`, `decode`, `create_kv_cache` (module doc)."""

    owned_kv_ready = False

    def __init__(
        self, config: LlamaFamilyConfig, dtype: str, target: Target, attention: str = "tir"
    ) -> None:
        if config.norm_position != "pre" or config.sandwich_norms:
            raise ValueError("an EAGLE head has Llama's pre-norm layers; got another layout")
        super().__init__(config, dtype, target, attention)
        self.model = EagleBody(config, dtype)
        self.lm_head = NTLinear(config.hidden_size, config.vocab_size, False, dtype)

    def prefill(  # type: ignore[override]
        self,
        input_embed: Tensor,
        input_hidden: Tensor,
        logit_positions: Tensor,
        kv_cache: PagedKVCache,
    ) -> tuple[Tensor, Tensor, PagedKVCache]:
        hidden = self.model(input_embed, self.target_features(input_hidden), kv_cache)
        hidden = op.take(hidden, logit_positions, axis=1)
        return self.logits(hidden), hidden, kv_cache

    def target_features(self, input_hidden: Tensor) -> Tensor:
        """The hidden input of rows the target computed, from what the target exported
        (`prefill` only: a fed draft's row is the head's own output)."""
        return input_hidden

    def decode(  # type: ignore[override]
        self, input_embed: Tensor, input_hidden: Tensor, kv_cache: PagedKVCache
    ) -> tuple[Tensor, Tensor, PagedKVCache]:
        hidden = self.model(input_embed, input_hidden, kv_cache)
        return self.logits(hidden), hidden, kv_cache

    def export_spec(self) -> dict[str, Any]:
        spec = super().export_spec()
        size = self.config.hidden_size
        spec["prefill"] = {
            "input_embed": nn.spec.Tensor([1, "seq_len", size], self.dtype),
            "input_hidden": nn.spec.Tensor([1, "seq_len", size], self.dtype),
            **{k: v for k, v in spec["prefill"].items() if k != "input_embed"},
        }
        spec["decode"] = {
            "input_embed": nn.spec.Tensor(["batch_size", 1, size], self.dtype),
            "input_hidden": nn.spec.Tensor(["batch_size", 1, size], self.dtype),
            **{k: v for k, v in spec["decode"].items() if k != "input_embed"},
        }
        del spec["decode_single"]
        return spec


def eagle_weight_sources(param_name: str) -> tuple[list[str], int]:
    """Checkpoint names of a head parameter: EAGLE checkpoints have no `model.` prefix."""
    return fused_weight_sources(param_name.removeprefix("model."))
