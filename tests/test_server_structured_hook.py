"""The engine's structured-output hook (`GrammarConstraints`) on its own, without a model.

Specification: before each sampling the hook masks the logits row of every constrained
sequence to the tokens its grammar allows next, catching up on the tokens the sequence
sampled since; unconstrained rows are untouched; ids past the tokenizer (a padded
embedding) are never allowed; each of a request's `n` sequences follows the grammar on its
own; a released request is no longer constrained. The oracle for "allowed" is the
tokenizer's own vocabulary: a token is allowed at the start of a choice list iff its text
is a non-empty prefix of one of the choices.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pytest

from vllm_tvm.runtime.structured_output import StructuredOutputsParams
from vllm_tvm.runtime.structured_output.logits_hook import GrammarConstraints
from vllm_tvm.runtime.tokenization import load_tokenizer

PADDING = 40
EOS = 1


@dataclass
class FakeSequence:
    request_id: str
    index: int = 0
    output_token_ids: list[int] = field(default_factory=list)


@pytest.fixture(scope="module")
def tokenizer(tiny_model_dir):
    return load_tokenizer(tiny_model_dir("llama"))


@pytest.fixture
def hook(tokenizer):
    return GrammarConstraints(tokenizer, tokenizer.vocab_size + PADDING, [EOS])


def allowed_after(hook, seqs):
    logits = np.zeros((len(seqs), hook.vocabulary.vocab_size), dtype=np.float32)
    hook(seqs, logits)
    return [set(np.flatnonzero(row > -np.inf).tolist()) for row in logits]


def prefix_tokens(tokenizer, choices):
    """Ids whose text is a non-empty prefix of a choice (the oracle)."""
    allowed = set()
    for token_id in range(tokenizer.vocab_size):
        text = tokenizer.decode([token_id], skip_special_tokens=False)
        if text and any(choice.startswith(text) for choice in choices):
            allowed.add(token_id)
    return allowed


def test_first_mask_allows_exactly_the_prefix_tokens(hook, tokenizer):
    choices = ["quick fox", "lazy dog"]
    hook.register("r", StructuredOutputsParams(choice=choices))
    [allowed] = allowed_after(hook, [FakeSequence("r")])
    assert allowed == prefix_tokens(tokenizer, choices)


def test_padding_ids_are_never_allowed(hook, tokenizer):
    hook.register("r", StructuredOutputsParams(regex="[a-z ]+"))
    [allowed] = allowed_after(hook, [FakeSequence("r")])
    assert allowed and max(allowed) < tokenizer.vocab_size


def test_unconstrained_rows_are_untouched(hook):
    hook.register("r", StructuredOutputsParams(choice=["yes"]))
    free, constrained = allowed_after(hook, [FakeSequence("other"), FakeSequence("r")])
    assert len(free) == hook.vocabulary.vocab_size
    assert len(constrained) < len(free)


def test_the_mask_follows_sampled_tokens_to_eos(hook, tokenizer):
    hook.register("r", StructuredOutputsParams(choice=["quick fox"]))
    seq = FakeSequence("r", output_token_ids=tokenizer.encode("quick fox", False))
    [allowed] = allowed_after(hook, [seq])
    assert allowed == {EOS}


def test_each_of_n_sequences_has_its_own_grammar_state(hook, tokenizer):
    hook.register("r", StructuredOutputsParams(choice=["quick fox", "lazy dog"]))
    ahead = FakeSequence("r", 0, tokenizer.encode("quick fox", False))
    fresh = FakeSequence("r", 1)
    done, start = allowed_after(hook, [ahead, fresh])
    assert done == {EOS}
    assert start == prefix_tokens(tokenizer, ["quick fox", "lazy dog"])


def test_a_refused_token_masks_the_whole_row(hook, tokenizer):
    hook.register("r", StructuredOutputsParams(choice=["yes"]))
    [allowed] = allowed_after(
        hook, [FakeSequence("r", output_token_ids=tokenizer.encode("no", False))]
    )
    assert allowed == set()


def test_released_requests_are_unconstrained(hook):
    hook.register("r", StructuredOutputsParams(choice=["yes"]))
    hook.release("r")
    [allowed] = allowed_after(hook, [FakeSequence("r")])
    assert len(allowed) == hook.vocabulary.vocab_size and len(hook) == 0


def test_invalid_constraint_is_a_value_error(hook):
    with pytest.raises(ValueError, match="regex"):
        hook.register("r", StructuredOutputsParams(regex="(unclosed"))


def test_a_request_id_is_registered_once(hook):
    hook.register("r", StructuredOutputsParams(choice=["yes"]))
    with pytest.raises(ValueError, match="already"):
        hook.register("r", StructuredOutputsParams(choice=["no"]))
