"""N-gram prompt lookup proposes what followed the latest earlier occurrence of the longest
matching suffix, within its length range and the token limit."""

from __future__ import annotations

from vllm_tvm.runtime.speculative.ngram import NgramProposer


def test_the_longest_suffix_wins_over_a_later_shorter_match() -> None:
    tokens = [1, 2, 3, 9, 9, 7, 3, 8, 8, 1, 2, 3]
    # suffix [1, 2, 3] occurred at 0 (followed by 9, 9); [3] alone last occurred at 6.
    assert NgramProposer(1, 3).propose(tokens, 2) == [9, 9]


def test_the_most_recent_occurrence_is_followed() -> None:
    tokens = [4, 5, 1, 4, 5, 2, 4, 5]
    assert NgramProposer(2, 2).propose(tokens, 3) == [2, 4, 5]


def test_drafts_stop_at_the_limit_and_at_the_end_of_the_sequence() -> None:
    tokens = [1, 2, 3, 4, 1, 2]
    assert NgramProposer(2, 2).propose(tokens, 1) == [3]
    assert NgramProposer(2, 2).propose(tokens, 10) == [3, 4, 1, 2]
    assert NgramProposer(1, 1).propose([5, 5], 4) == [5]


def test_no_match_in_range_proposes_nothing() -> None:
    assert NgramProposer(3, 4).propose([1, 2, 3, 1, 2], 4) == []  # only a 2-gram repeats
    assert NgramProposer(1, 2).propose([1, 2, 3], 4) == []
    assert NgramProposer(2, 2).propose([7, 7, 7], 0) == []
    assert NgramProposer(2, 2).propose([7, 7], 3) == []  # too short to repeat a 2-gram
