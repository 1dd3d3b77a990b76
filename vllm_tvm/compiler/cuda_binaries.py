"""What device code an exported CUDA library embeds: cubins per SM, PTX, or leftover source.

Why this exists: a CUDA build is only as good as what lands in the library, and TVM keeps CUDA
*source* there without complaint when it could not compile (see cuda_build.py). Every CUDA
export is therefore checked by reading the library: single-SM builds must carry that SM's
cubin, fat builds a cubin for each SM they name plus the PTX that newer GPUs JIT-compile.
TVM stores its fatbinary inside its own module blob, where ``cuobjdump`` does not look, so
each fatbinary is located by its magic number and then listed by ``cuobjdump`` (when found,
see ``find_cuobjdump``) or by our header parser; the two are tested to agree.
"""

from __future__ import annotations

import os
import re
import shutil
import struct
import subprocess
import tempfile
from pathlib import Path
from typing import Literal

# A fatbinary container starts with this little-endian magic, then u16 version (1), u16 header
# size and u64 size of the entries. Each entry: u16 kind (1 PTX, 2 ELF cubin), u16, u32 header
# size, u64 payload size, ..., u32 SM number at offset 0x1c. An ELF cubin records the ptxas
# command line, which names the exact architecture ("-arch sm_90a").
_FATBIN_MAGIC = struct.pack("<I", 0xBA55ED50)
_FATBIN_KIND_PTX = 1
_FATBIN_KIND_ELF = 2
_ARCH_IN_CUBIN = re.compile(rb"-arch (sm_\d+[af]?)\b")
_LISTED = {
    "elf": re.compile(r"\.(sm_\d+[af]?)\.cubin"),
    "ptx": re.compile(r"\.(sm_\d+[af]?)\.ptx"),
}

Tool = Literal["auto", "cuobjdump", "parser"]


def _fatbins(data: bytes) -> list[bytes]:
    blobs = []
    pos = data.find(_FATBIN_MAGIC)
    while pos >= 0:
        if pos + 16 <= len(data):
            version, header_size, body_size = struct.unpack_from("<HHQ", data, pos + 4)
            end = pos + header_size + body_size
            if version == 1 and header_size >= 16 and end <= len(data):
                blobs.append(data[pos:end])
                pos = data.find(_FATBIN_MAGIC, end)
                continue
        pos = data.find(_FATBIN_MAGIC, pos + 4)
    return blobs


def _entries_parsed(fatbin: bytes, section: str) -> list[str]:
    """The SMs of the fatbin's cubins (``section="elf"``) or PTX (``"ptx"``), in order."""
    wanted = _FATBIN_KIND_ELF if section == "elf" else _FATBIN_KIND_PTX
    _, header_size, body_size = struct.unpack_from("<HHQ", fatbin, 4)
    archs = []
    offset, end = header_size, header_size + body_size
    while offset + 0x20 <= end:
        kind, _, entry_header, payload_size = struct.unpack_from("<HHIQ", fatbin, offset)
        if entry_header == 0:
            break
        payload = fatbin[offset + entry_header : offset + entry_header + payload_size]
        if kind == wanted:
            named = _ARCH_IN_CUBIN.search(payload) if kind == _FATBIN_KIND_ELF else None
            sm = struct.unpack_from("<I", fatbin, offset + 0x1C)[0]
            archs.append(named.group(1).decode() if named else f"sm_{sm}")
        offset += entry_header + payload_size
    return archs


def find_cuobjdump() -> str | None:
    """Path of ``cuobjdump``: PATH, ``$CUDA_HOME/bin``, ``/usr/local/cuda/bin``, or the
    ``nvidia-cuda-cuobjdump`` wheel; None when absent."""
    found = shutil.which("cuobjdump")
    if found:
        return found
    candidates = [Path(os.environ.get("CUDA_HOME", "/usr/local/cuda")) / "bin" / "cuobjdump"]
    try:
        import nvidia

        candidates += [Path(p) / "cu13" / "bin" / "cuobjdump" for p in nvidia.__path__]
    except ImportError:
        pass
    return next((str(c) for c in candidates if c.is_file() and os.access(c, os.X_OK)), None)


def _entries_cuobjdump(fatbin: bytes, section: str, cuobjdump: str) -> list[str]:
    with tempfile.TemporaryDirectory() as tmp:
        blob = Path(tmp) / "embedded.fatbin"
        blob.write_bytes(fatbin)
        out = subprocess.run(
            [cuobjdump, f"--list-{section}", str(blob)], check=True, capture_output=True, text=True
        ).stdout
    return _LISTED[section].findall(out)


def _embedded(path: str | Path, section: str, tool: Tool) -> list[str]:
    data = Path(path).read_bytes()
    cuobjdump = find_cuobjdump() if tool != "parser" else None
    if tool == "cuobjdump" and cuobjdump is None:
        raise RuntimeError("cuobjdump not found (PATH, $CUDA_HOME/bin, nvidia-cuda-cuobjdump)")
    archs = []
    for fatbin in _fatbins(data):
        if cuobjdump is not None:
            archs += _entries_cuobjdump(fatbin, section, cuobjdump)
        else:
            archs += _entries_parsed(fatbin, section)
    return archs


def embedded_cuda_archs(path: str | Path, tool: Tool = "auto") -> list[str]:
    """Architectures of the cubins (SASS, not PTX) embedded in a library, e.g. ``["sm_90a"]``."""
    return _embedded(path, "elf", tool)


def embedded_ptx_archs(path: str | Path, tool: Tool = "auto") -> list[str]:
    """Compute capabilities of the PTX embedded in a library, as SMs (``["sm_80"]``)."""
    return _embedded(path, "ptx", tool)


def library_embeds_cuda_binary(path: str | Path, arch: str | None = None) -> bool:
    """True when the library embeds a cubin (for ``arch``, e.g. ``"sm_90a"``, when given)."""
    archs = embedded_cuda_archs(path)
    return bool(archs) if arch is None else arch in archs


def library_keeps_cuda_source(path: str | Path) -> bool:
    """True when the library still carries CUDA C source (compiled only at load time)."""
    return b"__global__" in Path(path).read_bytes()
