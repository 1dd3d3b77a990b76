"""The runtime's tokenizer: an HF `tokenizers.Tokenizer` plus the special-token facts
(BOS/EOS, whether BOS is prepended, the chat template) that the checkpoint keeps beside it.

Why a wrapper: a checkpoint spreads these facts over several files (`tokenizer.json`,
`tokenizer_config.json`, `config.json`, GGUF metadata); the rest of the runtime should read
them from one place and never care which layout they came from.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tokenizers import Tokenizer as HFTokenizer


@dataclass
class Tokenizer:
    """A loaded tokenizer and its special-token facts."""

    backend: HFTokenizer
    bos_token_id: int | None = None
    eos_token_ids: list[int] = field(default_factory=list)
    add_bos_token: bool = False
    chat_template: str | None = None
    bos_token: str | None = None
    eos_token: str | None = None

    @property
    def vocab_size(self) -> int:
        """Number of ids the tokenizer can produce, added tokens included."""
        return self.backend.get_vocab_size(with_added_tokens=True)

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        """Token ids of `text`; BOS is prepended when the checkpoint asks for it."""
        ids = self.backend.encode(text, add_special_tokens=add_special_tokens).ids
        if (
            add_special_tokens
            and self.add_bos_token
            and self.bos_token_id is not None
            and (not ids or ids[0] != self.bos_token_id)
        ):
            ids = [self.bos_token_id, *ids]
        return ids

    def decode(self, ids: list[int], skip_special_tokens: bool = True) -> str:
        """Text of `ids`."""
        return self.backend.decode(list(ids), skip_special_tokens=skip_special_tokens)

    def id_to_token(self, token_id: int) -> str | None:
        """The vocabulary string of one id (None when the id is out of range)."""
        return self.backend.id_to_token(token_id)


def _read_json(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}


def _token_content(value: Any) -> str | None:
    """tokenizer_config.json stores special tokens as a string or as an AddedToken dict."""
    if isinstance(value, dict):
        return value.get("content")
    return value if isinstance(value, str) else None


def _load_hf_directory(model_dir: Path) -> Tokenizer:
    tokenizer_file = model_dir / "tokenizer.json"
    if not tokenizer_file.is_file():
        raise FileNotFoundError(f"no tokenizer.json in {model_dir}")
    backend = HFTokenizer.from_file(str(tokenizer_file))
    tok_config = _read_json(model_dir / "tokenizer_config.json")
    model_config = _read_json(model_dir / "config.json")
    bos_token = _token_content(tok_config.get("bos_token"))
    eos_token = _token_content(tok_config.get("eos_token"))
    bos_id = backend.token_to_id(bos_token) if bos_token else model_config.get("bos_token_id")
    eos_ids: list[int] = []
    if eos_token and backend.token_to_id(eos_token) is not None:
        eos_ids.append(backend.token_to_id(eos_token))
    config_eos = model_config.get("eos_token_id")
    for eos in config_eos if isinstance(config_eos, list) else [config_eos]:
        if isinstance(eos, int) and eos not in eos_ids:
            eos_ids.append(eos)
    chat_template = tok_config.get("chat_template")
    template_file = model_dir / "chat_template.jinja"
    if template_file.is_file():
        chat_template = template_file.read_text(encoding="utf-8")
    return Tokenizer(
        backend=backend,
        bos_token_id=bos_id,
        eos_token_ids=eos_ids,
        add_bos_token=bool(tok_config.get("add_bos_token", False)),
        chat_template=chat_template if isinstance(chat_template, str) else None,
        bos_token=bos_token,
        eos_token=eos_token,
    )


def load_tokenizer(path: str | Path) -> Tokenizer:
    """Load the tokenizer of a model directory (or a tokenizer file's directory)."""
    path = Path(path)
    if path.is_file() and path.name == "tokenizer.json":
        path = path.parent
    if path.is_dir():
        return _load_hf_directory(path)
    raise FileNotFoundError(f"no tokenizer found at {path}")
