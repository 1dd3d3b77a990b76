"""Pythonic tool calls: ``[get_weather(city='Paris', days=3), search(q="x")]``.

The format of Llama 3.2/4's pythonic templates and of LFM2 (which wraps the list in
``<|tool_call_start|>...<|tool_call_end|>``; Llama 4 may use ``<|python_start|>``). OLMo 3
writes the calls one per line, without the list, in ``<function_calls>``. Unwrapped,
the list must be the whole message; wrapped, content may come first. Arguments are keyword
arguments whose values are Python literals, read with ``ast`` and never evaluated; each is
sent as soon as it is complete, as one more member of the arguments JSON object.
"""

from __future__ import annotations

import json
import re
from typing import ClassVar

from vllm_tvm.server.tool_parsers.base import (
    LeadingCallDialect,
    MalformedToolCall,
    Tools,
)
from vllm_tvm.server.tool_parsers.python_literals import parse_python_literal
from vllm_tvm.server.tool_parsers.scanning import (
    Incomplete,
    match_literal,
    skip_optional,
    skip_whitespace,
)

WRAPPERS = {"<|tool_call_start|>": "<|tool_call_end|>", "<|python_start|>": "<|python_end|>"}
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.\-]*")
_KEYWORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_OUTSIDE_STRING = re.compile(r"""[()\[\]{},'"]""")
_IN_STRING = {"'": re.compile(r"[\\']"), '"': re.compile(r'[\\"]')}


class PythonValueScanner:
    """Finds where one argument value that starts at ``start`` ends: at the ``,`` or ``)``
    outside brackets and string literals. Resumes where it stopped."""

    def __init__(self, start: int) -> None:
        self.start = start
        self._pos = start
        self._depth = 0
        self._quote: str | None = None

    def advance(self, text: str, final: bool) -> tuple[int, str]:
        """Return the index of the terminator and the terminator. Raises ``Incomplete``
        until it is seen and ``MalformedToolCall`` on a stray closing bracket."""
        pos = self._pos
        while True:
            if self._quote is not None:
                quote = self._quote
                match = _IN_STRING[quote[0]].search(text, pos)
                if match is None:
                    pos = len(text)
                    break
                index = match.start()
                if text[index] == "\\":
                    if index + 1 >= len(text):
                        pos = index
                        break
                    pos = index + 2
                elif text.startswith(quote, index):
                    self._quote = None
                    pos = index + len(quote)
                elif len(quote) == 3 and len(text) - index < 3 and not final:
                    pos = index
                    break
                else:
                    pos = index + 1
                continue
            match = _OUTSIDE_STRING.search(text, pos)
            if match is None:
                pos = len(text)
                break
            index, char = match.start(), match.group()
            if char in "'\"":
                rest = text[index : index + 3]
                if rest == char * 3:
                    self._quote, pos = rest, index + 3
                elif rest == char * len(rest) and len(rest) < 3 and not final:
                    pos = index
                    break
                else:
                    self._quote, pos = char, index + 1
                continue
            if char in "([{":
                self._depth += 1
            elif char in ")]}":
                if self._depth == 0:
                    if char != ")":
                        raise MalformedToolCall(f"unbalanced {char!r} in a call argument")
                    self._pos = index
                    return index, char
                self._depth -= 1
            elif self._depth == 0:
                self._pos = index
                return index, char
            pos = index + 1
        self._pos = pos
        raise Incomplete


class PythonicReader(LeadingCallDialect):
    """A leading call list, or content then wrapped call lists."""

    WRAPPERS: ClassVar[dict[str, str]] = WRAPPERS
    BARE_IN_WRAPPER: ClassVar[bool] = False

    def __init__(self, tools: Tools | None) -> None:
        super().__init__(tools)
        self._bare = False
        self._wrapper_end: str | None = None
        self._keywords: set[str] = set()
        self._keyword = ""
        self._value: PythonValueScanner | None = None

    def _message_opens(self, text: str, pos: int, final: bool) -> bool:
        if text[pos] == "[":
            self._pos = pos + 1
            self._state = self._call_name
        else:
            self._state = self._in_content
        return True

    def _in_content(self, text: str, final: bool) -> bool:
        index = self._read_content(text, final, tuple(self.WRAPPERS))
        if index is None:
            return False
        self._open_wrapper(text, index)
        return True

    def _open_wrapper(self, text: str, index: int) -> None:
        start = next(w for w in self.WRAPPERS if text.startswith(w, index))
        self._wrapper_end = self.WRAPPERS[start]
        self._pos = index + len(start)
        self._state = self._list_open

    def _list_open(self, text: str, final: bool) -> bool:
        pos = skip_whitespace(text, self._pos)
        if pos >= len(text):
            raise Incomplete
        self._bare = text[pos] != "["
        if self._bare and not self.BARE_IN_WRAPPER:
            raise MalformedToolCall("expected '[' to open the call list")
        self._pos = pos if self._bare else pos + 1
        self._state = self._call_name
        return True

    def _call_name(self, text: str, final: bool) -> bool:
        name, pos = _identifier(text, skip_whitespace(text, self._pos), _NAME)
        pos = skip_whitespace(text, pos)
        if pos >= len(text):
            raise Incomplete
        if text[pos] != "(":
            raise MalformedToolCall(f"expected '(' after {name!r}")
        self._start_call(name)
        self._keywords.clear()
        self._pos = pos + 1
        self._state = self._argument
        return True

    def _argument(self, text: str, final: bool) -> bool:
        pos = skip_whitespace(text, self._pos)
        if pos >= len(text):
            raise Incomplete
        if text[pos] == ")":
            self._arguments("}" if self._keywords else "{}")
            self._pos = pos + 1
            self._state = self._after_call
            return True
        keyword, pos = _identifier(text, pos, _KEYWORD)
        pos = skip_whitespace(text, pos)
        if pos >= len(text):
            raise Incomplete
        if text[pos] != "=":
            raise MalformedToolCall(f"expected a keyword argument at {keyword!r}")
        if keyword in self._keywords:
            raise MalformedToolCall(f"keyword argument {keyword!r} repeated")
        self._keyword = keyword
        self._value = PythonValueScanner(pos + 1)
        self._state = self._argument_value
        return True

    def _argument_value(self, text: str, final: bool) -> bool:
        assert self._value is not None
        end, terminator = self._value.advance(text, final)
        try:
            value = parse_python_literal(text[self._value.start : end])
            value_json = json.dumps(value, ensure_ascii=False, allow_nan=False)
        except ValueError as error:
            raise MalformedToolCall(f"argument {self._keyword!r}: {error}") from None
        member = json.dumps(self._keyword, ensure_ascii=False) + ": " + value_json
        self._arguments(("{" if not self._keywords else ", ") + member)
        self._keywords.add(self._keyword)
        self._pos = end + 1 if terminator == "," else end
        self._state = self._argument
        return True

    def _after_call(self, text: str, final: bool) -> bool:
        pos = skip_whitespace(text, self._pos)
        if self._bare:
            return self._after_bare_call(text, pos, final)
        if pos >= len(text):
            raise Incomplete
        self.committed = self._pos
        if text[pos] == ",":
            self._pos = pos + 1
            self._state = self._call_name
        elif text[pos] == "]":
            self._pos = self.committed = pos + 1
            self._state = self._list_closed if self._wrapper_end else self._trailing
        else:
            raise MalformedToolCall("expected ',' or ']' after a call")
        return True

    def _after_bare_call(self, text: str, pos: int, final: bool) -> bool:
        """OLMo 3's calls, one per line with no list around them, end at the wrapper's end
        (or the end of the generation)."""
        assert self._wrapper_end is not None
        self.committed = self._pos
        if pos >= len(text):
            if not final:
                raise Incomplete
            self._state = self._drop_rest
        elif match_literal(text, pos, self._wrapper_end):
            self._pos = self.committed = pos + len(self._wrapper_end)
            self._state = self._between_lists
        else:
            self._pos = pos + 1 if text[pos] == "," else pos
            self._state = self._call_name
        return True

    def _list_closed(self, text: str, final: bool) -> bool:
        assert self._wrapper_end is not None
        pos = skip_whitespace(text, self._pos)
        self._pos = self.committed = skip_optional(text, pos, self._wrapper_end, final)
        self._state = self._between_lists
        return True

    def _between_lists(self, text: str, final: bool) -> bool:
        index = self._skip_to(text, tuple(self.WRAPPERS))
        if index is None:
            return False
        self._open_wrapper(text, index)
        return True

    def _trailing(self, text: str, final: bool) -> bool:
        pos = skip_whitespace(text, self._pos)
        if pos < len(text):
            raise MalformedToolCall("text after an unwrapped call list")
        self._pos = self.committed = pos
        return False


def _identifier(text: str, pos: int, pattern: re.Pattern[str]) -> tuple[str, int]:
    """The identifier at ``pos`` and the index after it; ``Incomplete`` if it may go on."""
    if pos >= len(text):
        raise Incomplete
    match = pattern.match(text, pos)
    if match is None:
        raise MalformedToolCall(f"expected a name at {text[pos : pos + 20]!r}")
    if match.end() >= len(text):
        raise Incomplete
    return match.group(), match.end()


class Olmo3Reader(PythonicReader):
    """``olmo3``: OLMo 3's calls, one per line, in ``<function_calls>...</function_calls>``
    (a bracketed list is read too)."""

    WRAPPERS: ClassVar[dict[str, str]] = {"<function_calls>": "</function_calls>"}
    BARE_IN_WRAPPER = True
