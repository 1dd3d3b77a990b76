"""MuseGlimmer's ATEM tool calls, read out of its channel framing.

MuseGlimmer frames every message with special tokens: ``<|start|>assistant to=RECIPIENT
<|message|>BODY<|eom|>`` (the first message of a turn lacks ``<|start|>assistant``, which the
prompt ends with). A tool call is a message to the tool whose body is an
``<atem:function_calls>`` block of ``<atem:invoke>`` calls; the answer is a message to
``user``. The calls are read with the XML-style reader (``MUSE_GLIMMER``); the framing is not
content: message headers and end tokens are dropped from it, leaving the bodies. Reasoning
(the ``to=self`` message) is the reasoning parser's to take out first; without one it stays
content.
"""

from __future__ import annotations

import re

from vllm_tvm.server.tool_parsers.base import State
from vllm_tvm.server.tool_parsers.scanning import Incomplete, partial_marker_length
from vllm_tvm.server.tool_parsers.xml_calls import XmlCallReader
from vllm_tvm.server.tool_parsers.xml_dialects import MUSE_GLIMMER

START = "<|start|>"
MESSAGE = "<|message|>"
ENDS = ("<|eom|>", "<|eot|>")
RECIPIENT = " to="
_HEADER = re.compile(r"[^<>\n]*")


class MuseGlimmerReader(XmlCallReader):
    """``muse_glimmer``: ATEM calls, with the message framing kept out of the content."""

    FORMAT = MUSE_GLIMMER

    def _initial_state(self) -> State:
        return self._in_message

    def _in_message(self, text: str, final: bool) -> bool:
        assert self.FORMAT.block_open is not None
        markers = (self.FORMAT.block_open, START, RECIPIENT, *ENDS)
        index = self._read_content(text, final, markers)
        if index is None:
            return False
        if text.startswith(self.FORMAT.block_open, index):
            self._open_at(text, index)
            return True
        marker = next(m for m in markers if text.startswith(m, index))
        if marker in ENDS:
            self.committed = index + len(marker)
            return True
        start = index + len(marker)
        header_end = text.find(MESSAGE, start)
        stop = header_end
        if header_end < 0:
            stop = len(text) - partial_marker_length(text, start, (MESSAGE,))
        header = text[start:stop]
        if not _HEADER.fullmatch(header):  # not a header: " to=" in the text itself
            self._content(text[index : index + len(marker)])
            self.committed = index + len(marker)
            return True
        if header_end < 0:
            if final:
                self._content(text[index:])
                self.committed = len(text)
                return False
            raise Incomplete
        self.committed = header_end + len(MESSAGE)
        return True
