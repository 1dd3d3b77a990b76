"""Mistral tool calls, in both of the forms Mistral's tokenizers have used.

- v3 (Mistral 7B v0.3, Nemo, Small 3.0/3.1): ``[TOOL_CALLS]`` then a JSON array of
  ``{"name": ..., "arguments": {...}}`` objects (Nemo's template adds an ``"id"`` key).
- v11 and later (Small 3.2, Magistral, Devstral, Ministral 3): one
  ``[TOOL_CALLS]name[ARGS]{...}`` per call, Small 3.2 also writing ``[CALL_ID]id`` before
  ``[ARGS]``.

The form is told apart right after ``[TOOL_CALLS]``: a ``[`` or ``{`` starts v3 JSON, anything
else is a v11 function name. Call ids are 9 alphanumerics, the only shape Mistral's chat
templates accept back.
"""

from __future__ import annotations

import re
import secrets
import string

from vllm_tvm.server.tool_parsers.base import MalformedToolCall, State, ToolParser, Tools
from vllm_tvm.server.tool_parsers.json_call import JsonObjectDialect
from vllm_tvm.server.tool_parsers.scanning import (
    Incomplete,
    find_first,
    partial_marker_length,
    skip_whitespace,
)

TOOL_CALLS = "[TOOL_CALLS]"
ARGS = "[ARGS]"
CALL_ID = "[CALL_ID]"
_NAME = re.compile(r"[A-Za-z0-9_.\-]+")
_ID_ALPHABET = string.ascii_letters + string.digits


class MistralReader(JsonObjectDialect):
    """Content, then ``[TOOL_CALLS]`` blocks in either form; other text after them is dropped."""

    def __init__(self, tools: Tools | None) -> None:
        super().__init__(tools)
        self._in_list = False

    def _initial_state(self) -> State:
        return self._in_content

    def _in_content(self, text: str, final: bool) -> bool:
        return self._content_until(text, final, TOOL_CALLS, self._after_marker)

    def _after_marker(self, text: str, final: bool) -> bool:
        pos = skip_whitespace(text, self._pos)
        if pos >= len(text):
            raise Incomplete
        self._in_list = text[pos] == "["
        if self._in_list:
            self._pos = pos + 1
            self._state = self._v3_object
        elif text[pos] == "{":
            self._pos = pos
            self._state = self._v3_object
        else:
            self._pos = pos
            self._state = self._v11_name
        return True

    def _v3_object(self, text: str, final: bool) -> bool:
        error = f"expected a call object after {TOOL_CALLS}"
        then = self._after_v3_object if self._in_list else self._between_calls
        return self._read_call_object(text, strict=False, error=error, then=then)

    def _after_v3_object(self, text: str, final: bool) -> bool:
        pos = skip_whitespace(text, self._pos)
        if pos >= len(text):
            if final:
                self._state = self._between_calls
                return True
            raise Incomplete
        if text[pos] == ",":
            self._pos = pos + 1
            self._state = self._v3_object
        elif text[pos] == "]":
            self._pos = self.committed = pos + 1
            self._state = self._between_calls
        else:
            raise MalformedToolCall("expected ',' or ']' in the call list")
        return True

    def _v11_name(self, text: str, final: bool) -> bool:
        found = find_first(text, self._pos, (ARGS, CALL_ID))
        if found is None:
            end = len(text) - partial_marker_length(text, self._pos, (ARGS, CALL_ID))
        else:
            end = found[0]
        name = text[self._pos : end].strip()
        if name and not _NAME.fullmatch(name):
            raise MalformedToolCall(f"invalid function name {name!r}")
        if found is None:
            raise Incomplete
        if not name:
            raise MalformedToolCall(f"no function name before {found[1]}")
        self._start_call(name)
        self._pos = found[0] + len(found[1])
        self._state = self._v11_call_id if found[1] == CALL_ID else self._v11_arguments
        return True

    def _v11_call_id(self, text: str, final: bool) -> bool:
        found = find_first(text, self._pos, (ARGS,))
        end = found[0] if found else len(text) - partial_marker_length(text, self._pos, (ARGS,))
        call_id = text[self._pos : end].strip()
        if call_id and not call_id.isalnum():
            raise MalformedToolCall(f"invalid call id {call_id!r}")
        if found is None:
            raise Incomplete
        self._pos = found[0] + len(ARGS)
        self._state = self._v11_arguments
        return True

    def _v11_arguments(self, text: str, final: bool) -> bool:
        error = f"expected a JSON object after {ARGS}"
        return self._read_arguments_object(text, error=error, then=self._between_calls)

    def _between_calls(self, text: str, final: bool) -> bool:
        return self._skip_until(text, TOOL_CALLS, self._after_marker)


def make_mistral_call_id() -> str:
    """A Mistral tool-call id: 9 random letters and digits."""
    return "".join(secrets.choice(_ID_ALPHABET) for _ in range(9))


class MistralToolParser(ToolParser):
    """``mistral``: ``[TOOL_CALLS]`` in the v3 (JSON list) and v11 (``name[ARGS]{...}``)
    forms."""

    name = "mistral"
    reader_type = MistralReader

    def new_call_id(self) -> str:
        return make_mistral_call_id()
