"""Load the tokenizer of an HF-style model directory, whatever tokenizer files it has.

Why: HF checkpoints store the tokenizer in one of three layouts (`tokenizer.json`, a
SentencePiece `tokenizer.model`, or `vocab.json` + `merges.txt`) and the special-token facts
in up to five JSON files (`tokenizer_config.json`, `special_tokens_map.json`,
`added_tokens.json`, `config.json`, `generation_config.json`) plus `chat_template.jinja`.
This module reads them all and fills one `Tokenizer`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tokenizers import Tokenizer as HFTokenizer

from vllm_tvm.runtime.tokenization.byte_level_bpe import AddedTokenSpec
from vllm_tvm.runtime.tokenization.tokenizer import Tokenizer

TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "vocab.json + merges.txt")


def _read_json(path: Path) -> dict[str, Any]:
    if not path.is_file():
        return {}
    value = json.loads(path.read_text(encoding="utf-8"))
    return value if isinstance(value, dict) else {}


def _token_content(value: Any) -> str | None:
    """Configs store special tokens as a string or as an AddedToken dict."""
    if isinstance(value, dict):
        content = value.get("content")
        return content if isinstance(content, str) else None
    return value if isinstance(value, str) else None


def _declared_added_tokens(
    tok_config: dict[str, Any], model_dir: Path
) -> dict[int, AddedTokenSpec]:
    """Added tokens by id, from tokenizer_config.json's added_tokens_decoder and added_tokens.json
    (the latter has no special flag: its tokens count as special, as HF loads them)."""
    added: dict[int, AddedTokenSpec] = {}
    for content, token_id in _read_json(model_dir / "added_tokens.json").items():
        if isinstance(token_id, int):
            added[token_id] = AddedTokenSpec(content, special=True)
    for key, value in (tok_config.get("added_tokens_decoder") or {}).items():
        content = _token_content(value)
        if content is not None:
            special = bool(value.get("special", False)) if isinstance(value, dict) else False
            added[int(key)] = AddedTokenSpec(content, special=special)
    return added


def _chat_templates(
    tok_config: dict[str, Any], model_dir: Path
) -> tuple[str | None, dict[str, str]]:
    """The default chat template and the named ones."""
    template = tok_config.get("chat_template")
    named: dict[str, str] = {}
    if isinstance(template, list):
        named = {
            entry["name"]: entry["template"]
            for entry in template
            if isinstance(entry, dict) and "name" in entry and "template" in entry
        }
        template = named.get("default")
    json_template = _read_json(model_dir / "chat_template.json").get("chat_template")
    if isinstance(json_template, str):
        template = json_template
    template_file = model_dir / "chat_template.jinja"
    if template_file.is_file():
        template = template_file.read_text(encoding="utf-8")
    return (template if isinstance(template, str) else None), named


def _backend(model_dir: Path, tok_config: dict[str, Any]) -> tuple[HFTokenizer, bool]:
    """The HF tokenizer of the directory and whether its layout adds BOS by default."""
    if (model_dir / "tokenizer.json").is_file():
        return HFTokenizer.from_file(str(model_dir / "tokenizer.json")), False
    if (model_dir / "tokenizer.model").is_file():
        from vllm_tvm.runtime.tokenization.sentencepiece_model import load_sentencepiece_backend

        added = _declared_added_tokens(tok_config, model_dir)
        backend, _ = load_sentencepiece_backend(model_dir / "tokenizer.model", added)
        return backend, True  # SentencePiece tokenizers (LlamaTokenizer) prepend BOS
    if (model_dir / "vocab.json").is_file() and (model_dir / "merges.txt").is_file():
        from vllm_tvm.runtime.tokenization.bpe_files import load_bpe_files

        added = _declared_added_tokens(tok_config, model_dir)
        return load_bpe_files(model_dir, tok_config.get("tokenizer_class"), added), False
    raise FileNotFoundError(
        f"no tokenizer in {model_dir}; looked for: {', '.join(TOKENIZER_FILES)}"
    )


def _int_list(value: Any) -> list[int]:
    values = value if isinstance(value, list) else [value]
    return [v for v in values if isinstance(v, int)]


def load_hf_directory(model_dir: Path) -> Tokenizer:
    """The tokenizer and special-token facts of the HF model directory `model_dir`."""
    tok_config = _read_json(model_dir / "tokenizer_config.json")
    backend, default_add_bos = _backend(model_dir, tok_config)
    special_map = _read_json(model_dir / "special_tokens_map.json")
    model_config = _read_json(model_dir / "config.json")
    generation_config = _read_json(model_dir / "generation_config.json")

    bos_token = _token_content(tok_config.get("bos_token", special_map.get("bos_token")))
    eos_token = _token_content(tok_config.get("eos_token", special_map.get("eos_token")))
    bos_id = backend.token_to_id(bos_token) if bos_token else None
    if bos_id is None:
        bos_candidates = _int_list(model_config.get("bos_token_id"))
        bos_id = bos_candidates[0] if bos_candidates else None
    eos_ids: list[int] = []
    eos_from_token = backend.token_to_id(eos_token) if eos_token else None
    for eos in [
        *_int_list(eos_from_token),
        *_int_list(generation_config.get("eos_token_id")),
        *_int_list(model_config.get("eos_token_id")),
    ]:
        if eos not in eos_ids:
            eos_ids.append(eos)
    template, named = _chat_templates(tok_config, model_dir)
    return Tokenizer(
        backend=backend,
        bos_token_id=bos_id,
        eos_token_ids=eos_ids,
        add_bos_token=bool(tok_config.get("add_bos_token", default_add_bos)),
        chat_template=template,
        bos_token=bos_token,
        eos_token=eos_token,
        named_chat_templates=named,
    )
