"""Reading one ``{"name": ..., "arguments": {...}}`` object as it is generated.

Hermes, Llama 3 JSON and Mistral's v3 format all wrap a call in this object (Llama names the
arguments ``parameters``). The arguments object is streamed as the model writes it: its raw
text, character for character, is the arguments JSON, so the fragments sent while it grows
concatenate to exactly the text ``extract`` returns. Arguments given as a JSON string holding
an object (some fine-tunes do that) are sent once the string closes. Dialects that write the
arguments object alone after the name (Mistral v11, DeepSeek) stream it the same way.
``JsonObjectDialect`` gives their readers the states that read either kind of object.
"""

from __future__ import annotations

import json
from collections.abc import Callable

from vllm_tvm.server.tool_parsers.base import DialectReader, MalformedToolCall, State, Tools
from vllm_tvm.server.tool_parsers.scanning import (
    Incomplete,
    JsonContainerScanner,
    read_json_string,
    read_json_value,
    skip_whitespace,
)

NAME_KEY = "name"
ARGUMENT_KEYS = ("arguments", "parameters")


class JsonCallReader:
    """Reads the call object whose ``{`` is at ``start``; ``end`` is set once its ``}`` is
    read.

    With ``strict`` the object must have arguments and no other keys, and the call is
    announced only once its arguments begin, so that ordinary JSON content is not mistaken for
    a call. Events go to ``start_call`` and ``arguments``; arguments text read before the name
    is known waits for it.
    """

    def __init__(
        self,
        start: int,
        *,
        strict: bool,
        start_call: Callable[[str], None],
        arguments: Callable[[str], None],
    ) -> None:
        self.end: int | None = None
        self._strict = strict
        self._start_call = start_call
        self._emit_arguments = arguments
        self._pos = start + 1
        self._expect_key = True
        self._name: str | None = None
        self._announced = False
        self._args: RawJsonArguments | None = None
        self._args_open = False
        self._string_args: str | None = None
        self._pending: list[str] = []

    def advance(self, text: str, final: bool) -> int:
        """Read what has arrived; return the index after the closing ``}``. Raises
        ``Incomplete`` while the object is open and ``MalformedToolCall`` if it is not a
        call."""
        while self.end is None:
            try:
                if self._args is not None and self._args_open:
                    self._pos = self._args.advance(text)
                    self._args_open = False
                else:
                    self._read_member(text, final)
            except Incomplete:
                self._announce()
                raise
            self._announce()
        return self.end

    def _read_member(self, text: str, final: bool) -> None:
        pos = skip_whitespace(text, self._pos)
        if pos >= len(text):
            raise Incomplete
        if not self._expect_key:
            if text[pos] == ",":
                self._pos, self._expect_key = pos + 1, True
                return
            if text[pos] != "}":
                raise MalformedToolCall(f"expected ',' or '}}' in a call at {text[pos:][:20]!r}")
            if self._name is None:
                raise MalformedToolCall("a call object without a name")
            if self._strict and self._args is None and self._string_args is None:
                raise MalformedToolCall("a call object without arguments")
            self.end = pos + 1
            return
        try:
            key, pos = read_json_string(text, pos)
        except ValueError as error:
            raise MalformedToolCall(str(error)) from None
        pos = skip_whitespace(text, pos)
        if pos >= len(text):
            raise Incomplete
        if text[pos] != ":":
            raise MalformedToolCall(f"expected ':' after key {key!r}")
        pos = skip_whitespace(text, pos + 1)
        if pos >= len(text):
            raise Incomplete
        if key in ARGUMENT_KEYS and text[pos] == "{":
            self._check_unique(key)
            self._args = RawJsonArguments(pos, self._buffer_arguments)
            self._args_open = True
            self._pos, self._expect_key = pos, False
            return
        try:
            value, end = read_json_value(text, pos, final)
        except ValueError as error:
            raise MalformedToolCall(str(error)) from None
        if key == NAME_KEY:
            if not isinstance(value, str) or not value or self._name is not None:
                raise MalformedToolCall(f"invalid function name {value!r}")
            self._name = value
        elif key in ARGUMENT_KEYS:
            self._check_unique(key)
            self._string_args = _object_text(value)
        elif self._strict:
            raise MalformedToolCall(f"unexpected key {key!r} in a call object")
        self._pos, self._expect_key = end, False

    def _check_unique(self, key: str) -> None:
        if self._args is not None or self._string_args is not None:
            raise MalformedToolCall(f"a second arguments key {key!r} in one call")

    def _buffer_arguments(self, text: str) -> None:
        if self._announced:
            self._emit_arguments(text)
        else:
            self._pending.append(text)

    def _announce(self) -> None:
        """Send the call's name, and the arguments read so far, once allowed."""
        if self._name is None:
            return
        if not self._announced:
            if self._strict and self._args is None and self.end is None:
                return
            self._start_call(self._name)
            self._announced = True
            self._emit_arguments("".join(self._pending))
            self._pending.clear()
        if self.end is not None and self._args is None:
            self._emit_arguments(self._string_args if self._string_args is not None else "{}")


def _object_text(value: object) -> str:
    """Arguments given as a JSON string: the string must itself hold a JSON object."""
    if isinstance(value, str):
        try:
            if isinstance(json.loads(value), dict):
                return value
        except ValueError:
            pass
    raise MalformedToolCall(f"call arguments are not a JSON object: {value!r}")


class RawJsonArguments:
    """Streams the raw text of the arguments object whose ``{`` is at ``start`` to ``emit``,
    for dialects that write the arguments object on its own after the call's name."""

    def __init__(self, start: int, emit: Callable[[str], None]) -> None:
        self._scanner = JsonContainerScanner(start)
        self._sent = start
        self._emit = emit

    def advance(self, text: str) -> int:
        """Send what has arrived; return the index after the closing ``}``. Raises
        ``Incomplete`` while the object is open and ``MalformedToolCall`` if it is not one."""
        end = self._scanner.advance(text)
        upto = end if end is not None else self._scanner.scanned
        self._emit(text[self._sent : upto])
        self._sent = upto
        if end is None:
            raise Incomplete
        try:
            value = json.loads(text[self._scanner.start : end])
        except ValueError as error:
            raise MalformedToolCall(f"call arguments are not JSON: {error}") from None
        if not isinstance(value, dict):
            raise MalformedToolCall("call arguments are not a JSON object")
        return end


class JsonObjectDialect(DialectReader):
    """A dialect reader with the states that read one JSON object at ``_pos`` (after
    whitespace): a whole call object (``_read_call_object``) or an arguments object written
    after the call's name (``_read_arguments_object``). Reading goes on in the state ``then``
    just after the object's ``}``."""

    def __init__(self, tools: Tools | None) -> None:
        super().__init__(tools)
        self._object: Callable[[str, bool], int] | None = None
        self._then: State | None = None

    def _read_call_object(self, text: str, *, strict: bool, error: str, then: State) -> bool:
        """Start reading a call object (see ``JsonCallReader`` for ``strict``); ``error``
        says what was expected when the text there is not a ``{``."""
        call = JsonCallReader(
            self._object_start(text, error),
            strict=strict,
            start_call=self._start_call,
            arguments=self._arguments,
        )
        return self._read_object(call.advance, then)

    def _read_arguments_object(self, text: str, *, error: str, then: State) -> bool:
        """Start reading the current call's arguments object; ``error`` says what was
        expected when the text there is not a ``{``."""
        arguments = RawJsonArguments(self._object_start(text, error), self._arguments)
        return self._read_object(lambda text, final: arguments.advance(text), then)

    def _object_start(self, text: str, error: str) -> int:
        pos = skip_whitespace(text, self._pos)
        if pos >= len(text):
            raise Incomplete
        if text[pos] != "{":
            raise MalformedToolCall(error)
        return pos

    def _read_object(self, advance: Callable[[str, bool], int], then: State) -> bool:
        self._object, self._then = advance, then
        self._state = self._in_object
        return True

    def _in_object(self, text: str, final: bool) -> bool:
        assert self._object is not None and self._then is not None
        self._pos = self.committed = self._object(text, final)
        self._state = self._then
        return True
