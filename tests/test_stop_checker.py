"""StopChecker: vLLM's stop rules (EOS, stop ids, stop strings, min/max tokens, context
window) and the streaming guarantee that no text is shown and later taken back."""

from __future__ import annotations

import random

import pytest
from detokenizer_fixtures import llama_style_bpe

from vllm_tvm.runtime.requests.stop_checker import StepResult, StopChecker
from vllm_tvm.runtime.tokenization.detokenizer import IncrementalDetokenizer

EOS, EOT, NL = 2, 7, 9


class ScriptedDecoder:
    """A decoder whose ids have fixed texts: id -> text, plus what `flush` still holds."""

    def __init__(self, texts: dict[int, str], pending: str = "") -> None:
        self.texts = texts
        self.pending = pending
        self.fed: list[int] = []

    def add(self, token_id: int) -> str:
        self.fed.append(token_id)
        return self.texts.get(token_id, "")

    def flush(self) -> str:
        pending, self.pending = self.pending, ""
        return pending


def letters(text: str) -> tuple[list[int], ScriptedDecoder]:
    """One id per character (ids from 100 up), and a decoder that spells them."""
    ids = [100 + i for i in range(len(text))]
    return ids, ScriptedDecoder({100 + i: c for i, c in enumerate(text)})


def checker(**overrides: object) -> StopChecker:
    values: dict[object, object] = {"prompt_len": 3, "max_model_len": 1000, "eos_token_ids": [EOS]}
    values.update(overrides)
    return StopChecker(**values)  # type: ignore[arg-type]


def run(stops: StopChecker, ids: list[int], decoder: ScriptedDecoder) -> list[StepResult]:
    """Feed ids until the checker finishes; the per-step results."""
    results = []
    for token_id in ids:
        results.append(stops.step(token_id, decoder))
        if results[-1].finished:
            break
    return results


def streamed(results: list[StepResult]) -> str:
    return "".join(r.text for r in results)


def test_primary_eos_stops_with_no_stop_reason_and_no_text() -> None:
    decoder = ScriptedDecoder({10: "a", 11: "b", EOS: "</s>"})
    results = run(checker(), [10, 11, EOS, 10], decoder)
    assert results[-1] == StepResult("", True, "stop", None)
    assert len(results) == 3
    assert streamed(results) == "ab"
    assert EOS not in decoder.fed


def test_extra_eos_ids_stop_and_report_their_id_like_vllm_stop_token_ids() -> None:
    results = run(checker(eos_token_ids=[EOS, EOT]), [10, EOT], ScriptedDecoder({10: "a"}))
    assert (results[-1].finish_reason, results[-1].stop_reason) == ("stop", EOT)


def test_primary_eos_listed_as_a_stop_id_still_reports_none() -> None:
    results = run(checker(stop_token_ids=[EOS]), [EOS], ScriptedDecoder({}))
    assert (results[-1].finish_reason, results[-1].stop_reason) == ("stop", None)


def test_ignore_eos_generates_through_every_eos_id() -> None:
    stops = checker(eos_token_ids=[EOS, EOT], ignore_eos=True, max_tokens=4)
    results = run(stops, [EOS, EOT, EOS, EOT], ScriptedDecoder({}))
    assert [r.finished for r in results] == [False, False, False, True]
    assert results[-1].finish_reason == "length"


def test_ignore_eos_keeps_explicit_stop_token_ids() -> None:
    stops = checker(ignore_eos=True, stop_token_ids=[NL])
    results = run(stops, [EOS, NL], ScriptedDecoder({}))
    assert (results[-1].finish_reason, results[-1].stop_reason) == ("stop", NL)


def test_stop_token_id_text_is_left_out_by_default() -> None:
    decoder = ScriptedDecoder({10: "a", NL: "\n"})
    results = run(checker(stop_token_ids=[NL]), [10, NL], decoder)
    assert results[-1] == StepResult("", True, "stop", NL)
    assert streamed(results) == "a"


def test_stop_token_id_text_is_kept_with_include_stop_str_in_output() -> None:
    decoder = ScriptedDecoder({10: "a", NL: "\n"})
    stops = checker(stop_token_ids=[NL], include_stop_str_in_output=True)
    results = run(stops, [10, NL], decoder)
    assert streamed(results) == "a\n"
    assert stops.output_text == "a\n"


def test_stop_string_split_across_tokens_cuts_the_output_before_it() -> None:
    decoder = ScriptedDecoder({1: "Hel", 3: "lo ST", 4: "OP more", 5: "x"})
    stops = checker(stop=["STOP"])
    results = run(stops, [1, 3, 4, 5], decoder)
    assert results[-1].finished
    assert (results[-1].finish_reason, results[-1].stop_reason) == ("stop", "STOP")
    assert streamed(results) == "Hello "
    assert stops.output_text == "Hello "


def test_stop_string_is_kept_with_include_stop_str_in_output() -> None:
    decoder = ScriptedDecoder({1: "Hel", 3: "lo ST", 4: "OP more"})
    stops = checker(stop="STOP", include_stop_str_in_output=True)
    results = run(stops, [1, 3, 4], decoder)
    assert streamed(results) == "Hello STOP"
    assert results[-1].stop_reason == "STOP"


def test_text_that_may_start_a_stop_string_is_held_back_until_ruled_out() -> None:
    decoder = ScriptedDecoder({10: "ab", 11: "S", 12: "T", 13: "x"})
    results = run(checker(stop=["STOP"]), [10, 11, 12, 13], decoder)
    assert [r.text for r in results] == ["ab", "", "", "STx"]


def test_nothing_is_held_back_when_stop_strings_are_included_in_output() -> None:
    decoder = ScriptedDecoder({10: "ab", 11: "S"})
    results = run(checker(stop=["STOP"], include_stop_str_in_output=True), [10, 11], decoder)
    assert [r.text for r in results] == ["ab", "S"]


def test_of_several_stop_strings_the_one_completed_first_wins() -> None:
    results = run(checker(stop=["abcd", "bc"]), [10], ScriptedDecoder({10: "xabcd"}))
    assert results[-1].stop_reason == "bc"
    assert streamed(results) == "xa"


def test_random_streams_never_show_text_that_is_later_cut() -> None:
    rng = random.Random(7)
    alphabet = "ab c"
    for _ in range(500):
        stop = sorted({"".join(rng.choices(alphabet, k=rng.randint(1, 4))) for _ in range(2)})
        pieces = ["".join(rng.choices(alphabet, k=rng.randint(0, 3))) for _ in range(12)]
        decoder = ScriptedDecoder({10 + i: p for i, p in enumerate(pieces)})
        include = rng.random() < 0.5
        stops = checker(stop=stop, include_stop_str_in_output=include, max_tokens=12)
        results = run(stops, [10 + i for i in range(12)], decoder)
        # Oracle: the whole text cut at the stop string that ends first (ties: list order).
        text = "".join(pieces)
        found = [(text.find(s) + len(s), k, s) for k, s in enumerate(stop) if s in text]
        expected = text
        if found:
            end, _, s = min(found)
            expected = text[:end] if include else text[: end - len(s)]
        shown = ""
        for r in results:
            shown += r.text
            assert expected.startswith(shown), (stop, pieces)
        assert shown == expected == stops.output_text, (stop, pieces)
        assert results[-1].stop_reason == (min(found)[2] if found else None)


def test_eos_before_min_tokens_does_not_stop() -> None:
    results = run(checker(min_tokens=3), [EOS, EOS, EOS], ScriptedDecoder({}))
    assert [r.finished for r in results] == [False, False, True]


def test_stop_id_before_min_tokens_does_not_stop_and_its_text_is_kept() -> None:
    decoder = ScriptedDecoder({NL: "\n", 10: "a"})
    stops = checker(min_tokens=2, stop_token_ids=[NL])
    results = run(stops, [NL, 10, NL], decoder)
    assert [r.finished for r in results] == [False, False, True]
    assert stops.output_text == "\na"


def test_stop_string_completed_within_min_tokens_is_ignored() -> None:
    ids, decoder = letters("STOPxy")
    stops = checker(min_tokens=4, stop=["STOP"], max_tokens=6)
    results = run(stops, ids, decoder)
    assert results[-1].finish_reason == "length"
    assert stops.output_text == "STOPxy"


def test_stop_string_ending_after_min_tokens_counts_even_if_it_started_before() -> None:
    ids, decoder = letters("xSTOPy")
    stops = checker(min_tokens=3, stop=["STOP"])
    results = run(stops, ids, decoder)
    assert (results[-1].finish_reason, results[-1].stop_reason) == ("stop", "STOP")
    assert len(results) == 5
    assert stops.output_text == "x"


def test_max_tokens_finishes_with_length() -> None:
    ids, decoder = letters("abcdef")
    results = run(checker(max_tokens=4), ids, decoder)
    assert len(results) == 4
    assert (results[-1].finish_reason, results[-1].stop_reason) == ("length", None)
    assert streamed(results) == "abcd"


@pytest.mark.parametrize("unset", [None, 0, -1])
def test_unset_max_tokens_means_up_to_the_context_window(unset: int | None) -> None:
    stops = checker(prompt_len=6, max_model_len=10, max_tokens=unset)
    assert stops.max_output_tokens == 4
    ids, decoder = letters("abcdef")
    assert len(run(stops, ids, decoder)) == 4


def test_context_window_caps_a_larger_max_tokens() -> None:
    stops = checker(prompt_len=6, max_model_len=10, max_tokens=100)
    ids, decoder = letters("abcdef")
    results = run(stops, ids, decoder)
    assert (len(results), results[-1].finish_reason) == (4, "length")


def test_eos_on_the_last_allowed_token_reports_stop_not_length() -> None:
    results = run(checker(max_tokens=2), [10, EOS], ScriptedDecoder({10: "a"}))
    assert (results[-1].finish_reason, results[-1].stop_reason) == ("stop", None)


def test_stop_string_on_the_last_allowed_token_reports_stop() -> None:
    decoder = ScriptedDecoder({10: "a", 11: "!!"})
    results = run(checker(max_tokens=2, stop=["!"]), [10, 11], decoder)
    assert (results[-1].finish_reason, results[-1].stop_reason) == ("stop", "!")
    assert streamed(results) == "a"


def test_finishing_releases_text_the_decoder_still_held() -> None:
    decoder = ScriptedDecoder({10: "a"}, pending="\ufffd")
    results = run(checker(max_tokens=1), [10], decoder)
    assert results[-1].text == "a\ufffd"


def test_min_tokens_suppresses_every_stop_and_eos_id_until_reached() -> None:
    stops = checker(min_tokens=2, eos_token_ids=[EOS, EOT], stop_token_ids=[NL], ignore_eos=True)
    assert stops.suppressed_token_ids() == {EOS, EOT, NL}
    stops.step(10, ScriptedDecoder({}))
    assert stops.suppressed_token_ids() == {EOS, EOT, NL}
    stops.step(10, ScriptedDecoder({}))
    assert stops.suppressed_token_ids() == frozenset()


def test_step_after_finish_is_an_error() -> None:
    stops = checker()
    stops.step(EOS, ScriptedDecoder({}))
    with pytest.raises(RuntimeError, match="already finished"):
        stops.step(10, ScriptedDecoder({}))


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"stop": ["ok", ""]}, "invalid stop string ''"),
        ({"min_tokens": 5, "max_tokens": 2}, "min_tokens=5 must be <= max_tokens=2"),
        ({"min_tokens": -1}, "min_tokens must be >= 0, got -1"),
        ({"prompt_len": 1000}, "prompt of 1000 tokens .* max_model_len=1000"),
        ({"stop_token_ids": [3, "4"]}, r"stop_token_ids must be non-negative ints, got \['4'\]"),
    ],
)
def test_invalid_settings_are_rejected_with_the_bad_value(
    overrides: dict[str, object], message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        checker(**overrides)


def test_with_a_real_detokenizer_the_output_is_the_decode_cut_at_the_stop_string() -> None:
    tok = llama_style_bpe()
    text = "The quick brown fox jumps over the lazy dog."
    ids = tok.encode(text, add_special_tokens=False)
    stops = checker(stop=["over the"], eos_token_ids=tok.eos_token_ids)
    results = run(stops, ids, IncrementalDetokenizer(tok))
    assert results[-1].stop_reason == "over the"
    assert streamed(results) == stops.output_text == text[: text.index("over the")]
