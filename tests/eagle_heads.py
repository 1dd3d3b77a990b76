"""Tiny EAGLE-1 heads in the checkpoint layout vLLM loads (no `model.` prefix, `fc.weight`,
one decoder layer without its input RMSNorm, no final norm, embeddings and LM head left to
the target), written next to a tiny target checkpoint."""

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
        if name.endswith(("o_proj.weight", "down_proj.weight")):
            tensor.zero_()
    tensors["lm_head.weight"] = tensors["model.embed_tokens.weight"].clone()
    save_file(tensors, weights, metadata={"format": "pt"})
    return path


def _write(path: Path, config: dict, tensors: dict[str, torch.Tensor]) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    (path / "config.json").write_text(json.dumps(config))
    save_file(tensors, path / "model.safetensors", metadata={"format": "pt"})
    return path
