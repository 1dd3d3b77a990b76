"""benchmarks/peers/fatbin_prune.py: dead SASS is zeroed losslessly, everything else kept.

The library is a synthetic ELF64 holding one `.nv_fatbin` section laid out as CUDA's fatbin
containers are (container header, then per-entry headers with kind, size and sm number).
"""

from __future__ import annotations

import struct
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks" / "peers"))

from fatbin_prune import fatbin_entries, prune, restore

PTX, SASS = 1, 2
ENTRIES = [
    (PTX, 80, b"P" * 32),
    (SASS, 80, b"A" * 48),
    (SASS, 90, b"B" * 40),
    (SASS, 120, b"C" * 16),
]


def fatbin(entries: list[tuple[int, int, bytes]]) -> bytes:
    body = b""
    for kind, sm, payload in entries:
        header = struct.pack("<HHIQII", kind, 1, 64, len(payload), 0, 0)
        header += struct.pack("<HHI", 0, 0, sm)
        body += header.ljust(64, b"\0") + payload
    return struct.pack("<IHHQ", 0xBA55ED50, 1, 16, len(body)) + body


def elf_with_section(name: bytes, content: bytes) -> bytes:
    names = b"\0.shstrtab\0" + name + b"\0"
    data_offset = 64
    names_offset = data_offset + len(content)
    shoff = (names_offset + len(names) + 7) // 8 * 8
    ident = b"\x7fELF" + bytes([2, 1, 1]) + bytes(9)
    header = ident + struct.pack("<HHIQQQIHHHHHH", 3, 62, 1, 0, 0, shoff, 0, 64, 0, 0, 64, 3, 1)

    def section(name_index: int, offset: int, size: int) -> bytes:
        return struct.pack("<IIQQQQIIQQ", name_index, 1, 0, 0, offset, size, 0, 0, 1, 0)

    sections = bytes(64) + section(1, names_offset, len(names))
    sections += section(len(b"\0.shstrtab\0"), data_offset, len(content))
    body = header + content + names
    return body.ljust(shoff, b"\0") + sections


@pytest.fixture
def library(tmp_path: Path) -> Path:
    path = tmp_path / "lib.so"
    path.write_bytes(elf_with_section(b".nv_fatbin", fatbin(ENTRIES)))
    return path


def test_entries_are_read_with_kind_sm_and_payload(library: Path) -> None:
    data = library.read_bytes()
    entries = fatbin_entries(data)
    assert [(e.kind, e.sm) for e in entries] == [(k, sm) for k, sm, _ in ENTRIES]
    for entry, (_, _, payload) in zip(entries, ENTRIES, strict=True):
        start = entry.payload_offset
        assert data[start : start + entry.payload_size] == payload


def test_prune_zeroes_only_sass_of_other_majors(library: Path, tmp_path: Path) -> None:
    pruned, patch = tmp_path / "pruned.so", tmp_path / "patch"
    info = prune(library, pruned, patch, keep_major=9)
    data = pruned.read_bytes()
    assert info["zeroed_payloads"] == 2 and info["removed_bytes"] == 48 + 16
    assert len(data) == library.stat().st_size
    assert b"P" * 32 in data and b"B" * 40 in data
    assert b"A" * 48 not in data and b"C" * 16 not in data


def test_restore_gives_back_the_original_bytes(library: Path, tmp_path: Path) -> None:
    pruned, patch, out = tmp_path / "pruned.so", tmp_path / "patch", tmp_path / "out.so"
    prune(library, pruned, patch)
    restore(pruned, patch, out)
    assert out.read_bytes() == library.read_bytes()


def test_restore_refuses_a_library_the_patch_was_not_made_from(
    library: Path, tmp_path: Path
) -> None:
    pruned, patch = tmp_path / "pruned.so", tmp_path / "patch"
    prune(library, pruned, patch)
    pruned.write_bytes(pruned.read_bytes() + b"x")
    with pytest.raises(ValueError, match="does not match"):
        restore(pruned, patch, tmp_path / "out.so")


def test_a_file_without_fatbin_section_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "plain.so"
    path.write_bytes(elf_with_section(b".text", b"\x90" * 16))
    with pytest.raises(ValueError, match=r"no section .\.nv_fatbin."):
        fatbin_entries(path.read_bytes())
