"""A tiny random `Gemma3ForConditionalGeneration` (transformers' class, tiny text and
vision configs) with a tokenizer that knows Gemma 3's image tokens, written once per test
module that needs it."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
from tiny_models import BASE, train_tokenizer
from tokenizers import AddedToken

GEMMA3_IMAGE_TOKENS = 4
"""Soft tokens per image (a 2x2 pooling of the 4x4 patch grid)."""
WEIGHT_STD = 0.15
IMAGE_TOKEN_STRINGS = ("<start_of_image>", "<end_of_image>", "<image_soft_token>")
TEXT = {
    **BASE,
    "head_dim": 16,
    "num_hidden_layers": 3,
    "sliding_window": 64,
    "tie_word_embeddings": False,
    "layer_types": ["sliding_attention", "sliding_attention", "full_attention"],
}
VISION = {
    "hidden_size": 32,
    "intermediate_size": 64,
    "num_hidden_layers": 2,
    "num_attention_heads": 2,
    "image_size": 56,
    "patch_size": 14,
    "vision_use_head": False,
}


CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<start_of_turn>' + message['role'] + '\\n' + message['content'] + '<end_of_turn>\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<start_of_turn>model\\n' }}{% endif %}"
)
"""Gemma's turn markers around each message (image parts arrive as the begin-of-image
token inside the content text)."""


@dataclass(frozen=True)
class TinyVLM:
    path: Path
    image_size: int
    text_hidden: int
    boi_token_id: int
    eoi_token_id: int
    image_token_id: int


def gemma3_vlm_checkpoint(path: Path, layer_types: list[str] | None = None) -> TinyVLM:
    """Config, weights, tokenizer (the image tokens added as specials) and Gemma 3's
    preprocessor config; `layer_types` replaces the text tower's (e.g. all
    "full_attention", a model the prefix cache serves)."""
    import transformers

    vocab, (boi, eoi, image) = vision_tokenizer(path, IMAGE_TOKEN_STRINGS)
    config = transformers.Gemma3Config(
        text_config={
            **TEXT,
            "vocab_size": vocab,
            "layer_types": layer_types or TEXT["layer_types"],
        },
        vision_config=VISION,
        mm_tokens_per_image=GEMMA3_IMAGE_TOKENS,
        boi_token_index=boi,
        eoi_token_index=eoi,
        image_token_index=image,
        tie_word_embeddings=False,
    )
    size = VISION["image_size"]
    preprocessor = {
        "image_processor_type": "Gemma3ImageProcessor",
        "size": {"height": size, "width": size},
        "do_pan_and_scan": False,
    }
    save_random_checkpoint(
        lambda: transformers.Gemma3ForConditionalGeneration(config),
        path,
        preprocessor,
        CHAT_TEMPLATE,
    )
    return TinyVLM(path, size, TEXT["hidden_size"], boi, eoi, image)


def greedy_oracle(model_class: type, path: Path) -> torch.nn.Module:
    """transformers' `model_class` from `path` in fp32, generating past any EOS."""
    model = model_class.from_pretrained(path, dtype=torch.float32).eval()
    model.generation_config.eos_token_id = None
    model.generation_config.pad_token_id = 0
    return model


def vision_tokenizer(path: Path, special_tokens: tuple[str, ...]) -> tuple[int, list[int]]:
    """The tiny tokenizer with `special_tokens` added, saved in `path`: (its vocabulary
    size, the ids of the added tokens)."""
    tokenizer = train_tokenizer(path)
    tokenizer.add_special_tokens([AddedToken(token, special=True) for token in special_tokens])
    tokenizer.save(str(path / "tokenizer.json"))
    return tokenizer.get_vocab_size(), [tokenizer.token_to_id(t) for t in special_tokens]


def save_random_checkpoint(
    make_model: Callable[[], torch.nn.Module],
    path: Path,
    preprocessor: dict,
    chat_template: str,
) -> None:
    """The model `make_model` builds, its weights seeded random, with its preprocessor
    config and chat template."""
    torch.manual_seed(0)
    model = make_model()
    with torch.no_grad():  # transformers' init leaves greedy decoding stuck on one token
        for parameter in model.parameters():
            parameter.normal_(0.0, WEIGHT_STD)
    model.eval().save_pretrained(path)
    (path / "preprocessor_config.json").write_text(json.dumps(preprocessor))
    tokenizer_config = {"chat_template": chat_template, "bos_token": "<s>", "eos_token": "</s>"}
    (path / "tokenizer_config.json").write_text(json.dumps(tokenizer_config))
