"""The runtime's tokenizer: an HF `tokenizers.Tokenizer` plus the special-token facts
(BOS/EOS, whether BOS is prepended, the chat template) that the checkpoint keeps beside it.

Why a wrapper: a checkpoint spreads these facts over several files (`tokenizer.json`,
`tokenizer_config.json`, `config.json`, GGUF metadata); the rest of the runtime should read
them from one place and never care which layout they came from.
"""

from __future__ import annotations

from collections.abc import Mapping
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
    # Alternative templates by name (e.g. "tool_use", "rag"), as some checkpoints ship.
    named_chat_templates: dict[str, str] = field(default_factory=dict)

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

    def apply_chat_template(
        self,
        messages: list[Mapping[str, Any]],
        *,
        add_generation_prompt: bool = True,
        tools: list[Mapping[str, Any]] | None = None,
        chat_template: str | None = None,
        **kwargs: Any,
    ) -> str:
        """The prompt text for `messages` from this checkpoint's chat template (or the given
        `chat_template`, or a named one such as "tool_use"), rendered like HF transformers.

        The text already holds the template's special tokens: encode it with
        `add_special_tokens=False`. Extra keywords (e.g. `enable_thinking`) reach the template.
        Raises `ValueError` when there is no template.
        """
        from vllm_tvm.runtime.tokenization.chat_template import render_chat_template

        template = self._select_template(chat_template, tools)
        return render_chat_template(
            template,
            messages,
            add_generation_prompt=add_generation_prompt,
            tools=tools,
            bos_token=self.bos_token,
            eos_token=self.eos_token,
            **kwargs,
        )

    def _select_template(
        self, chat_template: str | None, tools: list[Mapping[str, Any]] | None
    ) -> str:
        if chat_template is not None:
            return self.named_chat_templates.get(chat_template, chat_template)
        if tools and "tool_use" in self.named_chat_templates:
            return self.named_chat_templates["tool_use"]
        if self.chat_template is not None:
            return self.chat_template
        raise ValueError(
            "this checkpoint has no chat template; pass chat_template=<jinja text> "
            f"(named templates available: {sorted(self.named_chat_templates) or 'none'})"
        )


_HF_MARKERS = ("tokenizer.json", "tokenizer.model", "vocab.json")


def _refuse_unsupported_format(path: Path) -> None:
    """Name the tokenizer file formats that exist in the wild but are not read here, instead
    of failing later with "no tokenizer found" (or worse, loading a neighbour file)."""
    if path.suffix == ".tiktoken":
        raise ValueError(
            f"unsupported tokenizer format 'tiktoken' ({path.name}: tiktoken ranks); supported: "
            "tokenizer.json, SentencePiece tokenizer.model, vocab.json + merges.txt, .gguf"
        )
    if path.suffix == ".json" and path.name.startswith("tekken"):
        raise ValueError(
            f"unsupported tokenizer format 'tekken' ({path.name}: Mistral Tekken JSON); "
            "supported: tokenizer.json, SentencePiece tokenizer.model, vocab.json + merges.txt, "
            ".gguf"
        )


def load_tokenizer(path: str | Path) -> Tokenizer:
    """Load the tokenizer of a model directory, of a tokenizer file inside one, or of a
    `.gguf` file.

    A directory may hold `tokenizer.json`, a SentencePiece `tokenizer.model`, or
    `vocab.json` + `merges.txt` (tried in that order), with the usual HF config files; a
    directory with none of them but exactly one `.gguf` file loads that file's vocabulary.
    Raises `FileNotFoundError` when none is there and `ValueError` for unsupported variants.
    """
    from vllm_tvm.runtime.tokenization.gguf_tokenizer_cache import load_cached_gguf_tokenizer
    from vllm_tvm.runtime.tokenization.hf_directory import TOKENIZER_FILES, load_hf_directory

    path = Path(path)
    if path.is_file() and path.suffix == ".gguf":
        return load_cached_gguf_tokenizer(path)
    if path.is_file():
        _refuse_unsupported_format(path)
        path = path.parent
    if path.is_dir():
        has_hf_files = any((path / name).is_file() for name in _HF_MARKERS)
        ggufs = sorted(path.glob("*.gguf"))
        if not has_hf_files and len(ggufs) == 1:
            return load_cached_gguf_tokenizer(ggufs[0])
        if not has_hf_files and len(ggufs) > 1:
            raise FileNotFoundError(
                f"no {', '.join(TOKENIZER_FILES)} in {path}, and {len(ggufs)} .gguf files: "
                "pass the one to use"
            )
        return load_hf_directory(path)
    raise FileNotFoundError(f"no tokenizer found at {path}: expected a directory or a .gguf file")
