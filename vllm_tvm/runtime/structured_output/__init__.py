"""Structured output: constrain generation to a JSON schema, regex, choice list or grammar by
masking the logits of every decode step with the tokens the grammar allows next.

Why a package: the request shapes (params), their translation into grammars, the per-tokenizer
vocabulary, the per-sequence matcher and the batch bitmask helpers change for different
reasons. The grammar engine is llguidance (the engine behind vLLM's `guidance` backend).

Engine use, per decode step of a batch:

    vocab = GrammarVocabulary(tokenizer, model_vocab_size)       # once per tokenizer
    matcher = vocab.compile(params)                              # per request (ValueError -> 400)
    bitmask = allocate_bitmask(max_batch, vocab.mask_words)      # once
    rows = fill_bitmasks(matchers_by_row, bitmask)               # each step
    apply_bitmask_inplace(logits, bitmask, rows)                 # before sampling
    matcher.accept(sampled_token)                                # after sampling
"""

from vllm_tvm.runtime.structured_output.bitmask import (
    allocate_bitmask,
    apply_bitmask_inplace,
    fill_bitmasks,
    mask_words_for,
    unpack_bitmask,
)
from vllm_tvm.runtime.structured_output.matcher import GrammarMatcher
from vllm_tvm.runtime.structured_output.params import (
    StructuredOutputsParams,
    structured_outputs_from_response_format,
)
from vllm_tvm.runtime.structured_output.vocabulary import GrammarVocabulary

__all__ = [
    "GrammarMatcher",
    "GrammarVocabulary",
    "StructuredOutputsParams",
    "allocate_bitmask",
    "apply_bitmask_inplace",
    "fill_bitmasks",
    "mask_words_for",
    "structured_outputs_from_response_format",
    "unpack_bitmask",
]
