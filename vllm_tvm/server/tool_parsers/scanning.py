"""Text scanning shared by the tool-call dialects (and the reasoning splitter), written for
text that arrives in pieces.

Every dialect reads a buffer that only grows, so each helper answers "what is known so far":
where a marker starts, how much of the tail could still turn into a marker (and so must not be
streamed yet), and where a JSON object or array that is still being generated will end. The
JSON scanner resumes where it stopped, so a long argument object costs linear time however
finely the text is split.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any

_WHITESPACE = re.compile(r"\s*")
_JSON_STRUCTURE = re.compile(r'[{}\[\]"]')
_JSON_STRING_STOP = re.compile(r'["\\]')
_JSON_STRING = re.compile(r'"(?:[^"\\]|\\.)*"', re.DOTALL)
_JSON_SCALAR = re.compile(r"-?[0-9][0-9.eE+\-]*|true|false|null")


class Incomplete(Exception):
    """The text so far ends inside the value being read; more text may complete it."""


def skip_whitespace(text: str, pos: int) -> int:
    """The first index at or after ``pos`` that is not whitespace (``len(text)`` if none)."""
    match = _WHITESPACE.match(text, pos)
    return match.end() if match else pos


def find_first(text: str, start: int, markers: Sequence[str]) -> tuple[int, str] | None:
    """The earliest occurrence at or after ``start`` of any of ``markers``, with the marker."""
    best: tuple[int, str] | None = None
    for marker in markers:
        index = text.find(marker, start)
        if index >= 0 and (best is None or index < best[0]):
            best = (index, marker)
    return best


def partial_marker_length(text: str, start: int, markers: Sequence[str]) -> int:
    """Length of the longest tail of ``text[start:]`` that is a proper prefix of a marker."""
    longest = 0
    for marker in markers:
        for size in range(min(len(marker) - 1, len(text) - start), longest, -1):
            if text.endswith(marker[:size]):
                longest = size
                break
    return longest


def match_literal(text: str, pos: int, literal: str) -> bool:
    """Whether ``literal`` is at ``pos``. Raises ``Incomplete`` when the text ends inside a
    prefix of it, so that only more text can tell."""
    tail = text[pos : pos + len(literal)]
    if tail == literal:
        return True
    if len(tail) < len(literal) and literal.startswith(tail):
        raise Incomplete
    return False


def skip_optional(text: str, pos: int, literal: str, final: bool) -> int:
    """The index after ``literal`` when it stands at ``pos``, else ``pos``. Raises
    ``Incomplete`` when the text ends inside a prefix of it, unless ``final`` (then the
    literal is not there)."""
    try:
        if match_literal(text, pos, literal):
            return pos + len(literal)
    except Incomplete:
        if not final:
            raise
    return pos


class JsonContainerScanner:
    """Finds the end of a JSON object or array that starts at ``start``, as text arrives.

    Only the nesting is tracked (brackets outside strings, string escapes); whether the
    text is valid JSON is decided by ``json.loads`` once the container is closed.
    """

    def __init__(self, start: int) -> None:
        self.start = start
        self.end: int | None = None
        self._pos = start
        self._depth = 0
        self._in_string = False

    @property
    def scanned(self) -> int:
        """The index up to which the text has been scanned (all of it lies inside the
        container while it is open)."""
        return self._pos

    def advance(self, text: str) -> int | None:
        """Scan what has arrived; return the index just past the closing bracket, if seen."""
        pos = self._pos
        while self.end is None:
            if self._in_string:
                match = _JSON_STRING_STOP.search(text, pos)
                if match is None:
                    pos = len(text)
                    break
                if match.group() == "\\":
                    if match.end() >= len(text):
                        pos = match.start()
                        break
                    pos = match.end() + 1
                    continue
                self._in_string = False
                pos = match.end()
                continue
            match = _JSON_STRUCTURE.search(text, pos)
            if match is None:
                pos = len(text)
                break
            char, pos = match.group(), match.end()
            if char == '"':
                self._in_string = True
            elif char in "{[":
                self._depth += 1
            else:
                self._depth -= 1
                if self._depth == 0:
                    self.end = pos
        self._pos = pos
        return self.end


def read_json_string(text: str, pos: int) -> tuple[str, int]:
    """Decode the JSON string literal at ``pos``; return it and the index after it.

    Raises ``Incomplete`` if the literal has not closed yet and ``ValueError`` if the text at
    ``pos`` is not a string literal.
    """
    if pos >= len(text):
        raise Incomplete
    if text[pos] != '"':
        raise ValueError(f"expected a JSON string at {text[pos : pos + 20]!r}")
    match = _JSON_STRING.match(text, pos)
    if match is None:
        raise Incomplete
    return json.loads(match.group()), match.end()


def read_json_value(text: str, pos: int, final: bool) -> tuple[Any, int]:
    """Decode the JSON value at ``pos``; return it and the index after it.

    Raises ``Incomplete`` when the value may still be growing (a number at the end of the
    text counts as growing unless ``final``) and ``ValueError`` when it is not JSON.
    """
    if pos >= len(text):
        raise Incomplete
    char = text[pos]
    if char == '"':
        return read_json_string(text, pos)
    if char in "{[":
        end = JsonContainerScanner(pos).advance(text)
        if end is None:
            raise Incomplete
        return json.loads(text[pos:end]), end
    match = _JSON_SCALAR.match(text, pos)
    if match is None:
        if not final and any(word.startswith(text[pos:]) for word in ("true", "false", "null")):
            raise Incomplete
        raise ValueError(f"expected a JSON value at {text[pos : pos + 20]!r}")
    if match.end() == len(text) and not final:
        raise Incomplete
    return json.loads(match.group()), match.end()
