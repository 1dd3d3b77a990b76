"""Llama 3.x JSON tool calls: ``{"name": ..., "parameters": {...}}``.

Llama 3.1/3.2/3.3 answer a custom-tool request with the bare JSON object as the whole
message, sometimes after ``<|python_tag|>``; several calls are separated by ``;``. Since the
message is bare JSON, a reply that merely is JSON must stay content: an object counts as a
call only if it has exactly a string ``name`` and an object of ``parameters`` (or
``arguments``), and only text that starts with ``{`` or ``<|python_tag|>`` is read as calls.
"""

from __future__ import annotations

from vllm_tvm.server.tool_parsers.base import LeadingCallDialect
from vllm_tvm.server.tool_parsers.json_call import JsonObjectDialect
from vllm_tvm.server.tool_parsers.scanning import skip_optional, skip_whitespace

PYTHON_TAG = "<|python_tag|>"
SEPARATOR = ";"


class Llama3JsonReader(JsonObjectDialect, LeadingCallDialect):
    """A leading JSON call (or content up to ``<|python_tag|>``), then ``;``-separated calls;
    text after the last call is dropped."""

    def _message_opens(self, text: str, pos: int, final: bool) -> bool:
        if text[pos] == "{":
            self._pos = pos
            self._state = self._call_object
            return True
        after_tag = skip_optional(text, pos, PYTHON_TAG, final)
        tagged = after_tag > pos
        self._state = self._after_tag if tagged else self._in_content
        self._pos = after_tag if tagged else 0
        return True

    def _in_content(self, text: str, final: bool) -> bool:
        return self._content_until(text, final, PYTHON_TAG, self._after_tag)

    def _after_tag(self, text: str, final: bool) -> bool:
        self._pos = skip_whitespace(text, self._pos)
        self._state = self._call_object
        return True

    def _call_object(self, text: str, final: bool) -> bool:
        error = "expected a JSON call object"
        return self._read_call_object(text, strict=True, error=error, then=self._after_call)

    def _after_call(self, text: str, final: bool) -> bool:
        pos = skip_whitespace(text, self._pos)
        if pos >= len(text):
            return False
        if text[pos] == SEPARATOR:
            self._pos = skip_whitespace(text, pos + 1)
            self._state = self._next_call
            return True
        after_tag = skip_optional(text, pos, PYTHON_TAG, final)
        if after_tag > pos:
            self._pos = after_tag
            self._state = self._after_tag
        else:
            self._state = self._drop_rest
        return True

    def _next_call(self, text: str, final: bool) -> bool:
        pos = skip_whitespace(text, self._pos)
        if pos >= len(text) and final:
            self._state = self._drop_rest
            return True
        self._pos = skip_optional(text, pos, PYTHON_TAG, final)
        self._state = self._call_object
        return True
