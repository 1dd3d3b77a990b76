"""The grammar engine's view of one tokenizer, built once and shared by every request.

Why it exists: to mask tokens, llguidance needs the byte string of every vocabulary entry
arranged in a trie, which takes seconds for a 128k vocabulary (about 3.5 s for Llama-3 on
one core). Building that once per tokenizer, and compiling each request's constraint
against it (about a millisecond), keeps structured output cheap per request. It also fixes
the mask width: a model whose embedding is padded past the tokenizer (model vocab_size >
tokenizer size) gets masks as wide as the model's logits, with the padding ids never
allowed.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

import llguidance
from tokenizers import Tokenizer as HFTokenizer

from vllm_tvm.runtime.structured_output.bitmask import mask_words_for
from vllm_tvm.runtime.structured_output.grammars import grammar_text
from vllm_tvm.runtime.structured_output.matcher import GrammarMatcher
from vllm_tvm.runtime.structured_output.params import StructuredOutputsParams
from vllm_tvm.runtime.tokenization.tokenizer import Tokenizer

# Terse errors: they go back to API clients, who need the reason, not the parser's state.
_LIMITS = llguidance.LLParserLimits(verbose_errors=False)


class GrammarVocabulary:
    """A tokenizer prepared for grammar-constrained decoding (build once per tokenizer).

    `vocab_size` is the model's logits width; it defaults to the tokenizer's size and is
    raised to it if smaller. `eos_token_ids` are the tokens that end a completed grammar
    (default: the tokenizer's EOS ids).
    """

    def __init__(
        self,
        tokenizer: Tokenizer,
        vocab_size: int | None = None,
        eos_token_ids: Sequence[int] | None = None,
    ) -> None:
        self.tokenizer_size = tokenizer.vocab_size
        self.vocab_size = max(vocab_size or 0, self.tokenizer_size)
        wanted = tokenizer.eos_token_ids if eos_token_ids is None else eos_token_ids
        eos = list(dict.fromkeys(wanted))
        if not eos:
            raise ValueError(
                "structured output needs an EOS token id to end constrained text, got none; "
                "pass eos_token_ids or load a tokenizer that declares its EOS token."
            )
        outside = [t for t in eos if not 0 <= t < self.tokenizer_size]
        if outside:
            raise ValueError(
                f"EOS token ids {outside} are outside the tokenizer's vocabulary "
                f"[0, {self.tokenizer_size})."
            )
        self.eos_token_ids: tuple[int, ...] = tuple(eos)
        self.mask_words = mask_words_for(self.vocab_size)
        self.ll_tokenizer = llguidance.LLTokenizer(
            _plain_tokenizer_json(tokenizer.backend), n_vocab=self.vocab_size, eos_token=eos
        )

    def compile(self, params: StructuredOutputsParams) -> GrammarMatcher:
        """A fresh matcher for `params`; ValueError naming the problem if it is invalid
        (bad JSON schema, regex, grammar or choice)."""
        matcher = llguidance.LLMatcher(
            self.ll_tokenizer, grammar_text(params), log_level=0, limits=_LIMITS
        )
        if matcher.is_error():
            raise ValueError(f"invalid {params.describe()}: {matcher.get_error().strip()}")
        return GrammarMatcher(
            matcher,
            mask_words=self.mask_words,
            eos_token_ids=frozenset(self.eos_token_ids),
            description=params.describe(),
        )


def _plain_tokenizer_json(backend: HFTokenizer) -> str:
    """The tokenizer's JSON without padding or truncation settings, which would change how
    llguidance re-tokenizes text."""
    data = json.loads(backend.to_str())
    data["padding"] = None
    data["truncation"] = None
    return json.dumps(data)
