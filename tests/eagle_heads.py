"""Tiny EAGLE-1 heads in the checkpoint layout vLLM loads (no `model.` prefix, `fc.weight`,
one decoder layer without its input RMSNorm, no final norm, embeddings and LM head left to
the target), written next to a tiny target checkpoint; tiny EAGLE-3 heads in EAGLE's
layout; tiny DeepSeek-V3 checkpoints with an MTP layer; targets that repeat their last
token, for heads whose drafts are all right."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file


def make_eagle_head(target: Path, path: Path, seed: int = 1, **config_changes) -> Path:
    """A random head for the tiny checkpoint `target` (its config, one layer)."""
    import transformers

    config = json.loads((target / "config.json").read_text())
    config.update(num_hidden_layers=1, architectures=["LlamaForCausalLM"], **config_changes)
    torch.manual_seed(seed)
    model = transformers.LlamaForCausalLM(transformers.LlamaConfig(**config)).eval()
    tensors = {
        name.removeprefix("model."): tensor.contiguous()
        for name, tensor in model.state_dict().items()
        if name.startswith("model.layers.0.") and "input_layernorm" not in name
    }
    size = config["hidden_size"]
    tensors["fc.weight"] = torch.randn(size, 2 * size) * (2 * size) ** -0.5
    return _write(path, config, tensors)


def make_echo_head(target: Path, path: Path) -> Path:
    """A head whose output is its input hidden state (fc passes the hidden half through, the
    layer adds nothing): it proposes what the target's hidden state predicted, again."""
    head = make_eagle_head(target, path)
    tensors = load_file(head / "model.safetensors")
    size = tensors["fc.weight"].shape[0]
    tensors["fc.weight"] = torch.cat([torch.zeros(size, size), torch.eye(size)], dim=1)
    tensors["layers.0.self_attn.o_proj.weight"].zero_()
    tensors["layers.0.mlp.down_proj.weight"].zero_()
    return _write(path, json.loads((head / "config.json").read_text()), tensors)


def make_repeating_target(target: Path, path: Path) -> Path:
    """A copy of `target` whose layers add nothing: with tied embeddings each position's
    logits are the last token's similarity to every token, so greedy decoding repeats."""
    shutil.copytree(target, path)
    weights = path / "model.safetensors"
    tensors = load_file(weights)
    for name, tensor in tensors.items():
        if name.endswith(_SILENT):
            tensor.zero_()
    tensors["lm_head.weight"] = tensors["model.embed_tokens.weight"].clone()
    save_file(tensors, weights, metadata={"format": "pt"})
    return path


def _write(path: Path, config: dict, tensors: dict[str, torch.Tensor]) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    (path / "config.json").write_text(json.dumps(config))
    save_file(tensors, path / "model.safetensors", metadata={"format": "pt"})
    return path


def add_mtp_layer(target: Path, path: Path, seed: int = 2, echo: bool = False) -> Path:
    """A copy of the DeepSeek-V3 checkpoint `target` with one random MTP layer (layer
    `num_hidden_layers`: enorm, hnorm, eh_proj, a decoder layer, shared_head), as V3 stores
    it. `echo`: the layer passes hnorm(hidden) through and its shared head is the target's
    LM head, so it proposes what the target's hidden state predicted, again."""
    import transformers

    shutil.copytree(target, path)
    config = json.loads((path / "config.json").read_text())
    layers = config["num_hidden_layers"]
    torch.manual_seed(seed)
    grown = transformers.DeepseekV3Config(**{**config, "num_hidden_layers": layers + 1})
    model = transformers.DeepseekV3ForCausalLM(grown).eval()
    model.save_pretrained(path / "grown", safe_serialization=True)  # the checkpoint's names
    grown_tensors = load_file(path / "grown" / "model.safetensors")
    shutil.rmtree(path / "grown")
    prefix = f"model.layers.{layers}."
    tensors = load_file(path / "model.safetensors")
    size = config["hidden_size"]
    tensors.update({k: v for k, v in grown_tensors.items() if k.startswith(prefix)})
    tensors[prefix + "enorm.weight"] = 1 + 0.1 * torch.randn(size)
    tensors[prefix + "hnorm.weight"] = 1 + 0.1 * torch.randn(size)
    tensors[prefix + "eh_proj.weight"] = torch.randn(size, 2 * size) * (2 * size) ** -0.5
    tensors[prefix + "shared_head.norm.weight"] = 1 + 0.1 * torch.randn(size)
    tensors[prefix + "shared_head.head.weight"] = torch.randn(config["vocab_size"], size) * 0.2
    if echo:
        tensors[prefix + "eh_proj.weight"] = torch.cat(
            [torch.zeros(size, size), torch.eye(size)], dim=1
        )
        for name in ("hnorm", "shared_head.norm"):
            tensors[f"{prefix}{name}.weight"] = torch.ones(size)
        tensors[prefix + "shared_head.head.weight"] = tensors["lm_head.weight"].clone()
        for name, tensor in tensors.items():
            if name.startswith(prefix) and name.endswith(_SILENT):
                tensor.zero_()
    config["num_nextn_predict_layers"] = 1
    (path / "config.json").write_text(json.dumps(config))
    save_file(tensors, path / "model.safetensors", metadata={"format": "pt"})
    return path


_SILENT = ("o_proj.weight", "down_proj.weight")
"""The projections whose zeros make a decoder layer add nothing to its residual stream."""


def make_eagle3_head(
    target: Path,
    path: Path,
    seed: int = 3,
    draft_vocab: int | None = None,
    layer_prefix: str = "midlayer.",
    **config_changes,
) -> Path:
    """A random EAGLE-3 head for the tiny Llama `target` in EAGLE's checkpoint layout
    (`LlamaForCausalLMEagle3`; `midlayer.*` with q/k/v over 2h and `hidden_norm`, `fc`
    [h, 3h], `norm`, `lm_head` over `draft_vocab` entries, `d2t` / `t2d`; no embeddings):
    its draft vocabulary is a random subset of the target's, `d2t` mapping entry i to
    target token i + d2t[i]."""
    config = json.loads((target / "config.json").read_text())
    vocab, size = config["vocab_size"], config["hidden_size"]
    draft_vocab = draft_vocab or vocab
    config.update(
        architectures=["LlamaForCausalLMEagle3"],
        num_hidden_layers=1,
        draft_vocab_size=draft_vocab,
        tie_word_embeddings=False,
        **config_changes,
    )
    generator = torch.Generator().manual_seed(seed)
    heads, kv_heads = config["num_attention_heads"], config["num_key_value_heads"]
    head_dim, inner = size // heads, config["intermediate_size"]

    def weight(rows: int, columns: int) -> torch.Tensor:
        return torch.randn(rows, columns, generator=generator) * columns**-0.5

    def norm() -> torch.Tensor:
        return 1 + 0.1 * torch.randn(size, generator=generator)

    layer = {
        "self_attn.q_proj.weight": weight(heads * head_dim, 2 * size),
        "self_attn.k_proj.weight": weight(kv_heads * head_dim, 2 * size),
        "self_attn.v_proj.weight": weight(kv_heads * head_dim, 2 * size),
        "self_attn.o_proj.weight": weight(size, heads * head_dim),
        "mlp.gate_proj.weight": weight(inner, size),
        "mlp.up_proj.weight": weight(inner, size),
        "mlp.down_proj.weight": weight(size, inner),
        "input_layernorm.weight": norm(),
        "hidden_norm.weight": norm(),
        "post_attention_layernorm.weight": norm(),
    }
    draft_ids = torch.randperm(vocab, generator=generator)[:draft_vocab].sort().values
    tensors = {layer_prefix + name: tensor for name, tensor in layer.items()}
    tensors.update(
        {
            "fc.weight": weight(size, 3 * size),
            "norm.weight": norm(),
            "lm_head.weight": torch.randn(draft_vocab, size, generator=generator) * 0.5,
            "d2t": draft_ids - torch.arange(draft_vocab),
            "t2d": torch.zeros(vocab, dtype=torch.bool).index_fill(0, draft_ids, True),
        }
    )
    return _write(path, config, tensors)


def make_echo_eagle3_head(repeating: Path, path: Path, **config_changes) -> Path:
    """An EAGLE-3 head for a target whose layers add nothing (`make_repeating_target`): fc
    passes the first aux state through (the token's embedding there), the layer adds
    nothing, its norm is the target's final norm and its LM head the target's rows in a
    shuffled order that `d2t` undoes, so it proposes what the target predicted from that
    position, again, only through the draft vocabulary's mapping (layer tensors spelt
    `layers.0.*`, as converted checkpoints spell them)."""
    head = make_eagle3_head(repeating, path, layer_prefix="layers.0.", **config_changes)
    tensors = load_file(head / "model.safetensors")
    target = load_file(repeating / "model.safetensors")
    size = tensors["fc.weight"].shape[0]
    vocab = target["lm_head.weight"].shape[0]
    order = torch.randperm(vocab, generator=torch.Generator().manual_seed(4))
    eye, zeros = torch.eye(size), torch.zeros(size, size)
    tensors["fc.weight"] = torch.cat([eye, zeros, zeros], dim=1)
    tensors["layers.0.self_attn.o_proj.weight"].zero_()
    tensors["layers.0.mlp.down_proj.weight"].zero_()
    tensors["norm.weight"] = target["model.norm.weight"].clone()
    tensors["lm_head.weight"] = target["lm_head.weight"][order].clone()
    tensors["d2t"] = order - torch.arange(vocab)
    tensors["t2d"] = torch.ones(vocab, dtype=torch.bool)
    config = json.loads((head / "config.json").read_text())
    return _write(path, {**config, "draft_vocab_size": vocab}, tensors)
