"""Forged release archives for the validator's tests: an archive changed inside and repacked,
and, for the rules that only an internally consistent archive reaches (lane and ELF checks),
changes recorded in its manifest and SBOM as a careless packager would record them."""

from __future__ import annotations

import hashlib
import json
import tarfile
from collections.abc import Callable
from pathlib import Path

from vllm_tvm.native_bundle.release_archive import ReleaseArchive


def forge(
    release: ReleaseArchive, tmp_path: Path, change: Callable[[Path], None], sidecars: bool = True
) -> Path:
    """A copy of the archive with `change` applied to its extracted folder, repacked, and
    (when `sidecars`) with fresh sidecars, so that only the inner change is a deviation."""
    name = release.archive.name.removesuffix(".tar.gz")
    work = tmp_path / "work"
    with tarfile.open(release.archive) as tar:
        tar.extractall(work, filter="data")
    change(work / name)
    archive = tmp_path / release.archive.name
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(work / name, arcname=name)
    if sidecars:
        digest = hashlib.sha256(archive.read_bytes()).hexdigest()
        Path(f"{archive}.sha256").write_text(f"{digest}  {archive.name}\n")
        provenance = {"archive": archive.name, "sha256": digest}
        Path(f"{archive}.provenance.json").write_text(json.dumps(provenance))
    return archive


def _entry(path: Path) -> dict[str, object]:
    data = path.read_bytes()
    mode = oct(path.stat().st_mode & 0o777)
    return {"sha256": hashlib.sha256(data).hexdigest(), "size": len(data), "mode": mode}


def record_files(root: Path, added: dict[str, bytes], removed: tuple[str, ...] = ()) -> None:
    """Add the files `added` (path: content) and delete `removed` under `root`, and write
    the manifest and SBOM entries that make the archive consistent again."""
    manifest = json.loads((root / "manifest.json").read_text())
    sbom = json.loads((root / "sbom.spdx.json").read_text())
    for path in removed:
        (root / path).unlink()
        del manifest["files"][path]
        sbom["files"] = [f for f in sbom["files"] if f["fileName"] != f"./{path}"]
    for path, content in added.items():
        (root / path).write_bytes(content)
        manifest["files"][path] = _entry(root / path)
        checksum = [{"algorithm": "SHA256", "checksumValue": manifest["files"][path]["sha256"]}]
        sbom["files"].append({"fileName": f"./{path}", "checksums": checksum})
    (root / "sbom.spdx.json").write_text(json.dumps(sbom))
    manifest["files"]["sbom.spdx.json"] = _entry(root / "sbom.spdx.json")
    (root / "manifest.json").write_text(json.dumps(manifest))
