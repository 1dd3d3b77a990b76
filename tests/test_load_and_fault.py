"""The load-and-fault script's own judgement (benchmarks/load_and_fault.py): which streams
count as unfinished, the worst gap, and that every hostile body is one a server must
answer with a 4xx (the run itself needs the default model and minutes; BENCHMARKS.md)."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
from load_and_fault import StreamResult, hostile_bodies, summarize


def test_a_served_stream_without_its_final_event_or_done_is_unfinished() -> None:
    complete = StreamResult(200, [1.0, 1.5, 3.0], "length", True)
    cut = StreamResult(200, [1.0, 1.2], None, False)
    no_done = StreamResult(200, [1.0], "abort", False)
    dropped = StreamResult(200, [1.0], None, False, dropped=True)
    refused = StreamResult(429)
    summary = summarize([complete, cut, no_done, dropped, refused])
    assert summary["unfinished"] == 2
    assert summary["dropped_by_client"] == 1
    assert summary["worst_inter_token_gap_s"] == 1.5
    assert summary["statuses"] == {"200": 4, "429": 1}


def test_the_hostile_bodies_include_invalid_text_and_an_oversized_body() -> None:
    bodies = dict(hostile_bodies(1000))
    assert len(bodies["body over the limit"]) > 1000
    assert b"\\ud800" in bodies["lone surrogate"]
    assert b"\xed\xa0\x80" in bodies["non-UTF-8 bytes"]
