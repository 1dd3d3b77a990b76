"""Gemma's tool calls: ``call:NAME{key:value,...}`` with its own string quotes.

Gemma 4 writes ``<|tool_call>call:get_weather{city:<|"|>Paris<|"|>,days:3}<tool_call|>``
(its chat template renders past calls so) and may drop the wrapper, leaving the bare
``call:NAME{...}``; FunctionGemma writes ``<start_function_call>call:NAME{...}
<end_function_call>`` and quotes strings with ``<escape>``. The arguments are not JSON: keys
are bare, strings sit between the quote token, and everything else (numbers, ``true``,
``false``, ``null``, lists, nested objects) is spelled as in JSON, except that Gemma 4's
template writes a null as ``None``. A call is sent once its
closing brace has come, converted to a JSON object.
"""

from __future__ import annotations

import json
import re
from typing import Any, ClassVar

from vllm_tvm.server.tool_parsers.base import DialectReader, MalformedToolCall, State, Tools
from vllm_tvm.server.tool_parsers.scanning import Incomplete, skip_optional, skip_whitespace

CALL = "call:"
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.\-]*")


class GemmaCallReader(DialectReader):
    """Content, then ``call:NAME{...}`` calls, each in ``WRAP`` (or bare when ``BARE``)."""

    WRAP: ClassVar[tuple[str, str]] = ("<|tool_call>", "<tool_call|>")
    QUOTE: ClassVar[str] = '<|"|>'
    BARE: ClassVar[bool] = True

    def __init__(self, tools: Tools | None) -> None:
        super().__init__(tools)
        self._wrapped = False
        self._name = ""
        self._body_start = 0
        self._scan = 0
        self._depth = 0
        self._in_string = False

    @property
    def _starts(self) -> tuple[str, ...]:
        return (self.WRAP[0], CALL) if self.BARE else (self.WRAP[0],)

    def _initial_state(self) -> State:
        return self._in_content

    def _in_content(self, text: str, final: bool) -> bool:
        index = self._read_content(text, final, self._starts)
        if index is None:
            return False
        self._open_at(text, index)
        return True

    def _open_at(self, text: str, index: int) -> None:
        self._wrapped = text.startswith(self.WRAP[0], index)
        self._pos = index + len(self.WRAP[0]) if self._wrapped else index
        self._state = self._call_head

    def _call_head(self, text: str, final: bool) -> bool:
        pos = skip_whitespace(text, self._pos)
        if len(text) - pos < len(CALL) and CALL.startswith(text[pos:]):
            raise Incomplete
        if not text.startswith(CALL, pos):
            raise MalformedToolCall(f"expected {CALL} in a tool call")
        match = _NAME.match(text, pos + len(CALL))
        end = match.end() if match else pos + len(CALL)
        if end >= len(text):
            raise Incomplete
        if match is None or text[end] != "{":
            raise MalformedToolCall("expected call:NAME{")
        self._name = match.group()
        self._body_start = self._scan = end
        self._depth = 0
        self._in_string = False
        self._state = self._call_body
        return True

    def _call_body(self, text: str, final: bool) -> bool:
        end = self._body_end(text)
        arguments = GemmaValueParser(text[self._body_start : end], self.QUOTE).parse()
        if not isinstance(arguments, dict):
            raise MalformedToolCall("call arguments are not an object")
        self._start_call(self._name)
        self._arguments(json.dumps(arguments, ensure_ascii=False))
        self._pos = end
        self._state = self._call_closed
        return True

    def _call_closed(self, text: str, final: bool) -> bool:
        pos = skip_whitespace(text, self._pos)
        if self._wrapped:
            pos = skip_optional(text, pos, self.WRAP[1], final)
        self._pos = self.committed = pos
        self._state = self._between_calls
        return True

    def _body_end(self, text: str) -> int:
        """The index after the body's closing brace; ``Incomplete`` until it has come.
        Resumes where the previous call stopped."""
        pos, quote = self._scan, self.QUOTE
        while pos < len(text):
            if self._in_string:
                found = text.find(quote, pos)
                if found < 0:
                    pos = max(pos, len(text) - len(quote) + 1)
                    break
                self._in_string, pos = False, found + len(quote)
            elif text.startswith(quote, pos):
                self._in_string, pos = True, pos + len(quote)
            elif quote.startswith(text[pos:]):
                break
            else:
                char = text[pos]
                pos += 1
                if char in "{[":
                    self._depth += 1
                elif char in "}]":
                    self._depth -= 1
                    if self._depth == 0:
                        return pos
        self._scan = pos
        raise Incomplete

    def _between_calls(self, text: str, final: bool) -> bool:
        index = self._skip_to(text, self._starts)
        if index is None:
            return False
        self._open_at(text, index)
        return True


class FunctionGemmaReader(GemmaCallReader):
    """``functiongemma``: ``<start_function_call>`` calls, strings in ``<escape>``."""

    WRAP = ("<start_function_call>", "<end_function_call>")
    QUOTE = "<escape>"
    BARE = False


_SCALAR_END = re.compile(r"[,}\]]")
# Gemma 4's template writes a None argument as Python's ``None``.
_WORDS: dict[str, Any] = {"true": True, "false": False, "null": None, "None": None}


class GemmaValueParser:
    """Reads one complete Gemma value (an object, as a call's arguments are)."""

    def __init__(self, text: str, quote: str) -> None:
        self._text = text
        self._quote = quote
        self._pos = 0

    def parse(self) -> Any:
        value = self._value()
        if skip_whitespace(self._text, self._pos) != len(self._text):
            raise MalformedToolCall("text after the call arguments")
        return value

    def _value(self) -> Any:
        text, self._pos = self._text, skip_whitespace(self._text, self._pos)
        if text.startswith(self._quote, self._pos):
            return self._string()
        if text.startswith("{", self._pos):
            return self._object()
        if text.startswith("[", self._pos):
            return self._list()
        match = _SCALAR_END.search(text, self._pos)
        end = match.start() if match else len(text)
        word, self._pos = text[self._pos : end].strip(), end
        if word in _WORDS:
            return _WORDS[word]
        try:
            number = json.loads(word)
        except ValueError:
            raise MalformedToolCall(f"not a value: {word[:40]!r}") from None
        if isinstance(number, bool) or not isinstance(number, int | float):
            raise MalformedToolCall(f"not a value: {word[:40]!r}")
        return number

    def _string(self) -> str:
        start = self._pos + len(self._quote)
        end = self._text.find(self._quote, start)
        if end < 0:
            raise MalformedToolCall("an unterminated string")
        self._pos = end + len(self._quote)
        return self._text[start:end]

    def _object(self) -> dict[str, Any]:
        result: dict[str, Any] = {}
        self._pos += 1
        while not self._closes("}"):
            if self._text.startswith(self._quote, self._pos):
                key = self._string()
            else:
                colon = self._text.find(":", self._pos)
                if colon < 0:
                    raise MalformedToolCall("expected key:value")
                key, self._pos = self._text[self._pos : colon].strip(), colon
            self._pos = skip_whitespace(self._text, self._pos)
            if not key or not self._text.startswith(":", self._pos):
                raise MalformedToolCall("expected key:value")
            self._pos += 1
            result[key] = self._value()
        return result

    def _list(self) -> list[Any]:
        result: list[Any] = []
        self._pos += 1
        while not self._closes("]"):
            result.append(self._value())
        return result

    def _closes(self, bracket: str) -> bool:
        """Past a ``,`` between members; True (and past it) at the closing ``bracket``."""
        self._pos = skip_whitespace(self._text, self._pos)
        if self._text.startswith(",", self._pos):
            self._pos = skip_whitespace(self._text, self._pos + 1)
        if self._pos >= len(self._text):
            raise MalformedToolCall(f"expected {bracket!r}")
        if self._text[self._pos] == bracket:
            self._pos += 1
            return True
        return False
