"""Python literals as JSON values, read with ``ast`` and never evaluated.

Pythonic tool calls write arguments as Python literals (``'x'``, ``True``, ``None``,
``[1, 2]``, ``{'k': -1.5}``), and Qwen3-Coder's chat template renders non-JSON scalars with
Python's ``str`` (``True``, ``None``). Model output is untrusted, so nothing is evaluated:
the expression is parsed and only literal nodes are accepted. JSON's ``true``/``false``/
``null`` spellings are accepted too, because models trained on JSON write them inside
Python-looking calls.
"""

from __future__ import annotations

import ast
import math
from typing import Any

_JSON_NAMES: dict[str, Any] = {"true": True, "false": False, "null": None}


def parse_python_literal(source: str) -> Any:
    """The JSON-compatible value of the Python literal expression ``source``.

    Raises ``ValueError`` for anything that is not a literal of str, int, float, bool, None,
    list, tuple or dict (with string keys), including calls, names and operators.
    """
    try:
        tree = ast.parse(source.strip(), mode="eval")
        return _convert(tree.body)
    except (SyntaxError, RecursionError, MemoryError) as error:
        raise ValueError(f"not a Python literal: {source[:40]!r}") from error


def _convert(node: ast.expr) -> Any:
    if isinstance(node, ast.Constant):
        return _scalar(node.value)
    if isinstance(node, ast.List | ast.Tuple):
        return [_convert(item) for item in node.elts]
    if isinstance(node, ast.Dict):
        result: dict[str, Any] = {}
        for key_node, value_node in zip(node.keys, node.values, strict=True):
            key = _convert(key_node) if key_node is not None else None
            if not isinstance(key, str):
                raise ValueError(f"dictionary key {key!r} is not a string")
            result[key] = _convert(value_node)
        return result
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub | ast.UAdd):
        operand = _convert(node.operand)
        if isinstance(operand, bool) or not isinstance(operand, int | float):
            raise ValueError("a sign on something that is not a number")
        return -operand if isinstance(node.op, ast.USub) else operand
    if isinstance(node, ast.Name) and node.id in _JSON_NAMES:
        return _JSON_NAMES[node.id]
    raise ValueError(f"{type(node).__name__} is not a literal")


def _scalar(value: Any) -> Any:
    if value is None or isinstance(value, str | bool | int):
        return value
    if isinstance(value, float) and math.isfinite(value):
        return value
    raise ValueError(f"{value!r} has no JSON form")
