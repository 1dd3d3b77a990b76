"""`vllm-tvm validate-release`: judge a release archive from nothing but the archive.

Why: an archive is checked where it is downloaded, by someone who has neither the bundle nor
this checkout. So every check here reads the archive, its two sidecars and a fresh extraction,
and reports every deviation it finds (an empty list means the archive is good):

- sidecars: `.sha256` matches the archive, `.provenance.json` names it and the same digest;
- extraction: one top folder named as the archive, regular files and folders only, nothing
  outside it;
- allowlist: exactly the files `manifest.json` lists (in the folders a bundle has), each with
  its sha256, size and mode; VERSION, the manifest and the name agree;
- SBOM: SPDX 2.3, a SHA256 per listed file equal to the manifest's, a license per package;
- ELF (via binutils' readelf): each library and program is for the archive's machine, needs
  only bundled libraries and the C/C++ runtime, and has a RUNPATH inside the archive
  ($ORIGIN-relative) or none;
- smoke: bin/vllm-tvm-cli --help and --version succeed (the version is the archive's), and
  its greedy ids for the manifest's prompt are the manifest's.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import tarfile
import tempfile
from pathlib import Path, PurePosixPath
from typing import Any

from vllm_tvm.artifacts.manifest import sha256_of_file
from vllm_tvm.native_bundle.release_layout import (
    ELF_MACHINES,
    LANES,
    MANIFEST,
    SBOM,
    VERSION_FILE,
    cli_command,
    release_name,
)

ALLOWED_TOP = {VERSION_FILE, MANIFEST, SBOM, "CMakeLists.txt"}
ALLOWED_FOLDERS = {"licenses", "include", "lib", "model", "bin", "examples"}
SYSTEM_LIBRARIES = re.compile(
    r"(libc|libm|libdl|librt|libpthread|libstdc\+\+|libgcc_s)\.so\.\d+|ld-linux[-\w.]*\.so\.\d+"
)
"""What a bundle may need from the system: the C and C++ runtimes and the dynamic loader."""
_ARCHIVE_SUFFIX = ".tar.gz"
_NEEDED = re.compile(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]")
_RUNPATH = re.compile(r"\((?:RUNPATH|RPATH)\)\s+Library r(?:un)?path: \[([^\]]*)\]")


def validate_archive(archive: Path) -> list[str]:
    """Every deviation of `archive` (a .tar.gz beside its sidecars); empty when good."""
    if not archive.name.endswith(_ARCHIVE_SUFFIX):
        return [f"{archive.name}: not a {_ARCHIVE_SUFFIX} release archive"]
    problems = _sidecar_problems(archive)
    with tempfile.TemporaryDirectory() as tmp:
        name = archive.name.removesuffix(_ARCHIVE_SUFFIX)
        extracted = _extract(archive, Path(tmp), name, problems)
        if extracted is not None:
            problems += validate_tree(extracted)
    return problems


def _sidecar_problems(archive: Path) -> list[str]:
    problems = []
    digest = sha256_of_file(archive)
    checksum = archive.with_name(archive.name + ".sha256")
    if not checksum.is_file():
        problems.append(f"missing checksum sidecar {checksum.name}")
    elif checksum.read_text().split() != [digest, archive.name]:
        problems.append(f"{checksum.name} does not match the archive (sha256 {digest})")
    provenance = archive.with_name(archive.name + ".provenance.json")
    if not provenance.is_file():
        problems.append(f"missing provenance sidecar {provenance.name}")
    else:
        record = json.loads(provenance.read_text())
        if record.get("archive") != archive.name or record.get("sha256") != digest:
            problems.append(f"{provenance.name} names another archive or digest")
    return problems


def _extract(archive: Path, into: Path, name: str, problems: list[str]) -> Path | None:
    """Extract after checking every member: links, devices and paths outside `name`/ are
    refused (and nothing is extracted then)."""
    refused = []
    with tarfile.open(archive, "r:gz") as tar:
        for member in tar.getmembers():
            parts = PurePosixPath(member.name).parts
            if not parts or parts[0] != name or ".." in parts or member.name.startswith("/"):
                refused.append(f"member outside {name}/: {member.name}")
            elif not (member.isfile() or member.isdir()):
                refused.append(f"member is not a regular file or folder: {member.name}")
        if not refused:
            tar.extractall(into, filter="data")
    problems += refused
    return None if refused else into / name


def validate_tree(root: Path) -> list[str]:
    """Every deviation of an extracted archive folder `root` (named as the archive)."""
    manifest_path = root / MANIFEST
    if not manifest_path.is_file():
        return [f"missing {MANIFEST}"]
    manifest = json.loads(manifest_path.read_text())
    problems = _identity_problems(root, manifest)
    problems += _allowlist_problems(root, manifest["files"])
    problems += _sbom_problems(root, manifest["files"])
    if not problems:  # run nothing from an archive that is not what it says it is
        problems += _elf_problems(root, manifest)
        problems += _smoke_problems(root, manifest)
    return problems


def _identity_problems(root: Path, manifest: dict[str, Any]) -> list[str]:
    problems = []
    version, machine, lane = manifest["version"], manifest["machine"], manifest["lane"]
    if lane not in LANES or machine not in ELF_MACHINES:
        problems.append(f"unknown machine {machine!r} or lane {lane!r}")
    expected = release_name(version, machine, lane)
    if root.name != expected or manifest["name"] != expected:
        problems.append(
            f"folder {root.name!r} and manifest name {manifest['name']!r} != {expected}"
        )
    version_file = root / VERSION_FILE
    if not version_file.is_file() or version_file.read_text().strip() != version:
        problems.append(f"{VERSION_FILE} does not say {version}")
    return problems


def _allowlist_problems(root: Path, files: dict[str, dict[str, Any]]) -> list[str]:
    problems = []
    present = {str(p.relative_to(root)) for p in root.rglob("*") if p.is_file()} - {MANIFEST}
    for extra in sorted(present - set(files)):
        problems.append(f"file not in the manifest: {extra}")
    for path, entry in sorted(files.items()):
        top = PurePosixPath(path).parts[0]
        if path not in ALLOWED_TOP and top not in ALLOWED_FOLDERS:
            problems.append(f"file outside the allowed layout: {path}")
        full = root / path
        if not full.is_file():
            problems.append(f"missing file: {path}")
            continue
        if sha256_of_file(full) != entry["sha256"] or full.stat().st_size != entry["size"]:
            problems.append(f"content differs from the manifest: {path}")
        if oct(full.stat().st_mode & 0o777) != entry["mode"]:
            problems.append(f"mode {oct(full.stat().st_mode & 0o777)} != {entry['mode']}: {path}")
    return problems


def _sbom_problems(root: Path, files: dict[str, dict[str, Any]]) -> list[str]:
    path = root / SBOM
    if not path.is_file():
        return [f"missing {SBOM}"]
    sbom = json.loads(path.read_text())
    problems = [] if sbom.get("spdxVersion") == "SPDX-2.3" else [f"{SBOM} is not SPDX-2.3"]
    listed = {
        entry["fileName"].removeprefix("./"): entry["checksums"][0]["checksumValue"]
        for entry in sbom.get("files", [])
    }
    for name, entry in files.items():
        if name != SBOM and listed.get(name) != entry["sha256"]:
            problems.append(f"{SBOM} lacks {name} or gives it another sha256")
    for package in sbom.get("packages", []):
        if not package.get("licenseDeclared"):
            problems.append(f"{SBOM} package {package.get('name')} declares no license")
    return problems


def _is_elf(path: Path) -> bool:
    with path.open("rb") as stream:
        return stream.read(4) == b"\x7fELF"


def _elf_problems(root: Path, manifest: dict[str, Any]) -> list[str]:
    readelf = shutil.which("readelf")
    if readelf is None:
        return ["readelf (binutils) is needed to check the archive's ELF files"]
    problems = []
    binaries = [root / p for p in manifest["files"] if _is_elf(root / p)]
    bundled = {path.name for path in binaries}
    for binary in binaries:
        name = binary.relative_to(root)
        header = binary.read_bytes()[:20]
        if int.from_bytes(header[18:20], "little") != ELF_MACHINES[manifest["machine"]]:
            problems.append(f"{name} is not built for {manifest['machine']}")
        dynamic = subprocess.run(
            [readelf, "-d", str(binary)], capture_output=True, text=True, check=True
        ).stdout
        for needed in _NEEDED.findall(dynamic):
            if needed not in bundled and not SYSTEM_LIBRARIES.fullmatch(needed):
                problems.append(f"{name} needs {needed}, which is neither bundled nor system")
        for runpath in _RUNPATH.findall(dynamic):
            for entry in runpath.split(":"):
                if entry and not entry.startswith("$ORIGIN"):
                    problems.append(f"{name} has a RUNPATH outside the archive: {entry}")
    return problems


def _smoke_problems(root: Path, manifest: dict[str, Any]) -> list[str]:
    try:
        command = cli_command(root, manifest["machine"])
    except RuntimeError as err:
        return [f"cannot run the archive's CLI: {err}"]
    problems = []
    for flag, must_say in (("--help", "usage: vllm-tvm-cli"), ("--version", manifest["version"])):
        done = subprocess.run([*command, flag], capture_output=True, text=True, timeout=60)
        if done.returncode != 0 or must_say not in done.stdout:
            problems.append(f"vllm-tvm-cli {flag} failed or does not say {must_say!r}")
    smoke = manifest["smoke"]
    argv = [*command, "--prompt", smoke["prompt"], "--max-tokens", str(smoke["max_tokens"])]
    done = subprocess.run(
        [*argv, "--temperature", "0", "--json"], capture_output=True, text=True, timeout=300
    )
    if done.returncode != 0:
        return [*problems, f"vllm-tvm-cli failed on the smoke prompt: {done.stderr.strip()}"]
    ids = json.loads(done.stdout)["token_ids"]
    if ids != smoke["token_ids"]:
        problems.append(f"greedy ids {ids} != the manifest's {smoke['token_ids']}")
    return problems
