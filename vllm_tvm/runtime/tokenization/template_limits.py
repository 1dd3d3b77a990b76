"""Bounds on rendering a chat template: a wall-time cap, an output-size cap and size checks
on the operators that can build huge values in one step.

Why it exists: a server that renders a template sent with a request runs code it did not
write. Jinja's sandbox keeps that code away from Python's internals (and caps `range()` at
100,000 items) but not away from the CPU or memory: three nested `range(100000)` loops run
for days and `'x' * 10**10` allocates 10 GB. A thread cannot be killed, so the bounds are
enforced inside the render itself: every line the template's compiled code runs checks a
deadline, the rendered pieces are counted as they are produced, and `*` / `**` refuse to
build a value larger than the output cap before building it. The checkpoint's own template
renders under the same bounds (they are far above what any real template needs).
"""

from __future__ import annotations

import math
import sys
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from types import FrameType
from typing import Any

from jinja2.runtime import Context
from jinja2.sandbox import ImmutableSandboxedEnvironment

MAX_RENDER_SECONDS = 5.0
"""The longest a template may render."""

MAX_OUTPUT_CHARS = 64 * 1024 * 1024
"""The longest text a template may produce (twice the default request body limit)."""

MAX_POWER_BITS = 65536
"""The largest integer (in bits) `**` may produce inside a template."""

_TEMPLATE_FILENAME = "<template>"  # the file name Jinja compiles template source under


class RenderLimitExceeded(Exception):
    """Rendering a template went past one of this module's bounds."""


class BoundedSandbox(ImmutableSandboxedEnvironment):
    """Jinja's immutable sandbox whose `*` and `**` refuse results over the bounds."""

    intercepted_binops = frozenset({"*", "**"})

    def call_binop(self, context: Context, operator: str, left: Any, right: Any) -> Any:
        if operator == "*":
            _check_repeat(left, right)
            _check_repeat(right, left)
        elif operator == "**":
            _check_power(left, right)
        return super().call_binop(context, operator, left, right)


def _check_repeat(sequence: Any, count: Any) -> None:
    if isinstance(sequence, (str, list, tuple)) and isinstance(count, int):
        if len(sequence) * count > MAX_OUTPUT_CHARS:
            raise RenderLimitExceeded(
                f"a template expression repeats a sequence of {len(sequence)} items {count} "
                f"times, past the limit of {MAX_OUTPUT_CHARS} items"
            )


def _check_power(base: Any, exponent: Any) -> None:
    if isinstance(base, int) and isinstance(exponent, int) and abs(base) > 1 and exponent > 0:
        if exponent * math.log2(abs(base)) > MAX_POWER_BITS:
            raise RenderLimitExceeded(
                f"a template expression raises {base} to the power {exponent}, an integer "
                f"past the limit of {MAX_POWER_BITS} bits"
            )


def bounded_join(pieces: Iterable[str]) -> str:
    """The rendered `pieces` joined, refused once they pass `MAX_OUTPUT_CHARS`."""
    kept = []
    total = 0
    for piece in pieces:
        total += len(piece)
        if total > MAX_OUTPUT_CHARS:
            raise RenderLimitExceeded(
                f"the chat template's output passed the limit of {MAX_OUTPUT_CHARS} characters"
            )
        kept.append(piece)
    return "".join(kept)


@contextmanager
def render_deadline(seconds: float | None = None) -> Iterator[None]:
    """Within the block, template code running past `seconds` (None: `MAX_RENDER_SECONDS`)
    raises RenderLimitExceeded.

    Implemented with a trace function on this thread that watches only frames of compiled
    template code (so loops with empty bodies are caught too); the thread's previous trace
    function is restored on exit.
    """
    limit = MAX_RENDER_SECONDS if seconds is None else seconds
    deadline = time.monotonic() + limit

    def check_line(frame: FrameType, event: str, arg: Any) -> Any:
        if time.monotonic() > deadline:
            raise RenderLimitExceeded(f"the chat template rendered for more than {limit:g} s")
        return check_line

    def watch_templates(frame: FrameType, event: str, arg: Any) -> Any:
        return check_line if frame.f_code.co_filename == _TEMPLATE_FILENAME else None

    previous = sys.gettrace()
    sys.settrace(watch_templates)
    try:
        yield
    finally:
        sys.settrace(previous)
