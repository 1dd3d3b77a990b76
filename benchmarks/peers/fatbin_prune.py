"""Shrink a CUDA shared library for one GPU generation, losslessly, by moving out dead cubins.

Why: vLLM's `_C_stable_libtorch.abi3.so` is 88 MiB, of which 59 MiB is `.nv_fatbin`: the
same kernels as machine code (SASS) for sm_75 … sm_120, plus PTX. It must travel to the GPU
box inside a 64 MiB-per-call budget. A Hopper GPU can only run SASS built for sm_9x (machine
code is compatible within one major architecture only) and falls back to PTX when a kernel
has no such SASS, so the other SASS payloads are dead weight there.

`prune` zeroes those payloads in place (same file size, same offsets, entry headers intact,
so the driver still walks the container and simply never picks them) and writes the removed
bytes to a patch file; `restore` puts them back and checks the original's sha256. The zeroed
library compresses to less than half; the patch can travel in an earlier call, so the GPU box
runs the byte-exact original whenever both arrived, and the pruned one otherwise.

Fatbin layout (read from the files themselves; sizes are cross-checked against the section):
container header = magic 0xBA55ED50 (u32), version (u16), header size (u16), payload size
(u64); then entries, each with kind (u16: 1 PTX, 2 ELF/SASS) at 0, header size (u32) at 4,
padded payload size (u64) at 8, and the sm number (u32, e.g. 90) at 28.

usage: python3 fatbin_prune.py prune SRC.so PRUNED.so PATCH [--keep-major 9]
       python3 fatbin_prune.py restore PRUNED.so PATCH OUT.so
       python3 fatbin_prune.py list LIB.so
"""

from __future__ import annotations

import argparse
import hashlib
import json
import struct
import sys
from dataclasses import dataclass
from pathlib import Path

FATBIN_MAGIC = 0xBA55ED50
KIND_PTX = 1
KIND_SASS = 2
PATCH_MAGIC = b"PEERS-FATBIN-PATCH-1\n"


@dataclass(frozen=True)
class FatbinEntry:
    """One payload of a fatbin container: PTX or SASS for one sm number."""

    kind: int
    sm: int
    payload_offset: int
    payload_size: int


def _section(data: bytes, wanted: str) -> tuple[int, int]:
    """File offset and size of the ELF64 section named `wanted`."""
    if data[:4] != b"\x7fELF" or data[4] != 2:
        raise ValueError("not an ELF64 file; expected a CUDA shared library (.so)")
    (shoff,) = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, 0x3A)
    headers = [struct.unpack_from("<IIQQQQ", data, shoff + i * shentsize) for i in range(shnum)]
    names_offset = headers[shstrndx][4]
    found = []
    for name_index, _type, _flags, _addr, offset, size in headers:
        start = names_offset + name_index
        name = data[start : data.index(b"\0", start)].decode()
        found.append(name)
        if name == wanted:
            return offset, size
    raise ValueError(f"ELF has no section {wanted!r}; sections: {', '.join(filter(None, found))}")


def fatbin_entries(data: bytes) -> list[FatbinEntry]:
    """All entries of all fatbin containers in the `.nv_fatbin` section of an ELF image."""
    start, size = _section(data, ".nv_fatbin")
    end = start + size
    entries: list[FatbinEntry] = []
    pos = start
    while pos + 16 <= end:
        magic, _version, header_size, body_size = struct.unpack_from("<IHHQ", data, pos)
        if magic != FATBIN_MAGIC:
            pos += 8  # containers are 8-byte aligned; the gaps are zero padding
            continue
        entry = pos + header_size
        body_end = entry + body_size
        if body_end > end:
            raise ValueError(f"fatbin container at {pos:#x} runs past the section end {end:#x}")
        while entry < body_end:
            kind, _ver, entry_header, padded = struct.unpack_from("<HHIQ", data, entry)
            (sm,) = struct.unpack_from("<I", data, entry + 28)
            if kind not in (KIND_PTX, KIND_SASS) or entry_header < 32:
                raise ValueError(f"unexpected fatbin entry kind {kind} at {entry:#x}")
            entries.append(FatbinEntry(kind, sm, entry + entry_header, padded))
            entry += entry_header + padded
        pos = body_end
    return entries


def _sha256(data: bytes | bytearray) -> str:
    return hashlib.sha256(data).hexdigest()


def prune(src: Path, pruned: Path, patch: Path, keep_major: int = 9) -> dict:
    """Zero every SASS payload whose sm major is not `keep_major`; save them to `patch`."""
    original = src.read_bytes()
    data = bytearray(original)
    spans: list[list[int]] = []
    removed = bytearray()
    for entry in fatbin_entries(original):
        if entry.kind == KIND_SASS and entry.sm // 10 != keep_major:
            stop = entry.payload_offset + entry.payload_size
            removed += original[entry.payload_offset : stop]
            data[entry.payload_offset : stop] = bytes(entry.payload_size)
            spans.append([entry.payload_offset, entry.payload_size])
    header = {
        "original_sha256": _sha256(original),
        "pruned_sha256": _sha256(data),
        "keep_major": keep_major,
        "spans": spans,
    }
    pruned.write_bytes(data)
    blob = json.dumps(header).encode()
    patch.write_bytes(PATCH_MAGIC + struct.pack("<Q", len(blob)) + blob + removed)
    return {**header, "removed_bytes": len(removed), "zeroed_payloads": len(spans)}


def restore(pruned: Path, patch: Path, out: Path) -> str:
    """Write the original library from a pruned one and its patch; returns its sha256."""
    raw = patch.read_bytes()
    if not raw.startswith(PATCH_MAGIC):
        raise ValueError(f"{patch} is not a fatbin patch (expected header {PATCH_MAGIC!r})")
    (length,) = struct.unpack_from("<Q", raw, len(PATCH_MAGIC))
    body = len(PATCH_MAGIC) + 8
    header = json.loads(raw[body : body + length])
    payload = memoryview(raw)[body + length :]
    data = bytearray(pruned.read_bytes())
    if _sha256(data) != header["pruned_sha256"]:
        raise ValueError(
            f"{pruned} sha256 {_sha256(data)} does not match the patch's pruned library "
            f"{header['pruned_sha256']}"
        )
    pos = 0
    for offset, size in header["spans"]:
        data[offset : offset + size] = payload[pos : pos + size]
        pos += size
    if pos != len(payload) or _sha256(data) != header["original_sha256"]:
        raise ValueError(f"restored library does not match sha256 {header['original_sha256']}")
    out.write_bytes(data)
    return header["original_sha256"]


def main(argv: list[str] | None = None) -> int:
    """Command line: prune / restore / list."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("prune")
    p.add_argument("src", type=Path)
    p.add_argument("pruned", type=Path)
    p.add_argument("patch", type=Path)
    p.add_argument("--keep-major", type=int, default=9)
    r = sub.add_parser("restore")
    r.add_argument("pruned", type=Path)
    r.add_argument("patch", type=Path)
    r.add_argument("out", type=Path)
    ls = sub.add_parser("list")
    ls.add_argument("lib", type=Path)
    args = parser.parse_args(argv)
    if args.cmd == "prune":
        info = prune(args.src, args.pruned, args.patch, args.keep_major)
        mib = info["removed_bytes"] / 2**20
        print(f"zeroed {info['zeroed_payloads']} SASS payloads, {mib:.1f} MiB")
    elif args.cmd == "restore":
        print("restored", restore(args.pruned, args.patch, args.out))
    else:
        totals: dict[tuple[str, int], list[int]] = {}
        for e in fatbin_entries(args.lib.read_bytes()):
            key = ("ptx" if e.kind == KIND_PTX else "sass", e.sm)
            totals.setdefault(key, [0, 0])
            totals[key][0] += 1
            totals[key][1] += e.payload_size
        for (kind, sm), (count, size) in sorted(totals.items()):
            print(f"{kind:4} sm_{sm:<4} {count:4} entries {size / 2**20:8.2f} MiB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
