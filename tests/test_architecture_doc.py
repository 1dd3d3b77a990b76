"""docs/ARCHITECTURE.md's table of who may import whom says what tests/test_layering.py's
ALLOWED table enforces, package by package."""

from __future__ import annotations

from pathlib import Path

from test_layering import ALLOWED

DOC = Path(__file__).resolve().parents[1] / "docs" / "ARCHITECTURE.md"


def documented_layers() -> dict[str, set[str]]:
    """The rows of the `| package | may import |` table."""
    lines = DOC.read_text(encoding="utf-8").splitlines()
    start = lines.index("| package | may import |") + 2
    table: dict[str, set[str]] = {}
    for line in lines[start:]:
        if not line.startswith("|"):
            break
        package, imports = (cell.strip() for cell in line.strip("|").split("|"))
        table[package] = set() if imports == "—" else {name.strip() for name in imports.split(",")}
    return table


def test_the_documented_layers_are_the_enforced_ones() -> None:
    assert documented_layers() == ALLOWED
