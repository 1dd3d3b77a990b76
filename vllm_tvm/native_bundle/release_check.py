"""`vllm-tvm validate-release`: judge a release archive from nothing but the archive.

Why: an archive is checked where it is downloaded, by someone who has neither the bundle nor
this checkout. So every check here reads the archive, its two sidecars and a fresh extraction,
and reports every deviation it finds (none means the archive is good) and, by name, every
check it could not run here:

- sidecars: `.sha256` matches the archive, `.provenance.json` names it and the same digest;
- extraction: one top folder named as the archive, regular files and folders only, nothing
  outside it;
- allowlist: exactly the files `manifest.json` lists (in the folders a bundle has), each with
  its sha256, size and mode; VERSION, the manifest and the name agree;
- SBOM: SPDX 2.3, a SHA256 per listed file equal to the manifest's, a license per package;
- lane: a cuda archive carries TVM's CUDA runtime and libcudart.so.13, and no archive carries
  the NVIDIA driver's libcuda.so.1;
- ELF (via binutils' readelf): each library and program is for the archive's machine, needs
  only bundled libraries and the C/C++ runtime (and, in a cuda archive, the driver's
  libcuda.so.1), and has a RUNPATH inside the archive ($ORIGIN-relative) or none;
- smoke: bin/vllm-tvm-cli --help and --version succeed (the version is the archive's), and
  its greedy ids for the manifest's prompt are the manifest's. A cuda archive's model needs
  an NVIDIA GPU: without one that run is reported as skipped, with the reason.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import tarfile
import tempfile
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from vllm_tvm.artifacts.manifest import sha256_of_file
from vllm_tvm.native_bundle.release_layout import (
    CUDA_DRIVER_LIBRARY,
    ELF_MACHINES,
    LANE_LIBRARIES,
    LANES,
    MANIFEST,
    SBOM,
    VERSION_FILE,
    cli_command,
    cuda_device_absent_reason,
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


@dataclass
class ReleaseReport:
    """The verdict on an archive: every deviation (none: good) and every check not run here,
    each named with the reason."""

    problems: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)


def validate_archive(archive: Path) -> ReleaseReport:
    """Every deviation of `archive` (a .tar.gz beside its sidecars) and the checks skipped."""
    if not archive.name.endswith(_ARCHIVE_SUFFIX):
        return ReleaseReport([f"{archive.name}: not a {_ARCHIVE_SUFFIX} release archive"])
    report = ReleaseReport(_sidecar_problems(archive))
    with tempfile.TemporaryDirectory() as tmp:
        name = archive.name.removesuffix(_ARCHIVE_SUFFIX)
        extracted = _extract(archive, Path(tmp), name, report.problems)
        if extracted is not None:
            validate_tree(extracted, report)
    return report


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


def validate_tree(root: Path, report: ReleaseReport) -> None:
    """Add to `report` every deviation of an extracted archive folder `root` (named as the
    archive) and the checks skipped."""
    manifest_path = root / MANIFEST
    if not manifest_path.is_file():
        report.problems.append(f"missing {MANIFEST}")
        return
    manifest = json.loads(manifest_path.read_text())
    problems = _identity_problems(root, manifest)
    problems += _allowlist_problems(root, manifest["files"])
    problems += _lane_problems(manifest)
    problems += _sbom_problems(root, manifest["files"])
    if not problems:  # run nothing from an archive that is not what it says it is
        problems += elf_problems(root, manifest)
        problems += _smoke_problems(root, manifest, report.skipped)
    report.problems += problems


def _lane_problems(manifest: dict[str, Any]) -> list[str]:
    problems = [
        f"a {manifest['lane']} archive must carry {path}"
        for path in LANE_LIBRARIES.get(manifest["lane"], ())
        if path not in manifest["files"]
    ]
    for path in manifest["files"]:
        if PurePosixPath(path).name.startswith("libcuda.so"):
            problems.append(
                f"{path} is the NVIDIA driver's library, which an archive must not carry "
                "(it comes with the driver installed on the machine)"
            )
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


def elf_problems(root: Path, manifest: dict[str, Any]) -> list[str]:
    """The ELF files of `manifest` under `root` that are for another machine, need a library
    that is neither bundled nor the system's (the driver's, for a cuda archive), or have a
    RUNPATH outside the archive."""
    readelf = shutil.which("readelf")
    if readelf is None:
        return ["readelf (binutils) is needed to check the archive's ELF files"]
    problems = []
    binaries = [root / p for p in manifest["files"] if _is_elf(root / p)]
    bundled = {path.name for path in binaries}
    from_driver = {CUDA_DRIVER_LIBRARY} if manifest["lane"] == "cuda" else set()
    for binary in binaries:
        name = binary.relative_to(root)
        header = binary.read_bytes()[:20]
        if int.from_bytes(header[18:20], "little") != ELF_MACHINES[manifest["machine"]]:
            problems.append(f"{name} is not built for {manifest['machine']}")
        dynamic = subprocess.run(
            [readelf, "-d", str(binary)], capture_output=True, text=True, check=True
        ).stdout
        for needed in _NEEDED.findall(dynamic):
            if needed in from_driver:
                continue
            if needed not in bundled and not SYSTEM_LIBRARIES.fullmatch(needed):
                problems.append(f"{name} needs {needed}, which is neither bundled nor system")
        for runpath in _RUNPATH.findall(dynamic):
            for entry in runpath.split(":"):
                if entry and not entry.startswith("$ORIGIN"):
                    problems.append(f"{name} has a RUNPATH outside the archive: {entry}")
    return problems


def _smoke_problems(root: Path, manifest: dict[str, Any], skipped: list[str]) -> list[str]:
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
    absent = cuda_device_absent_reason() if manifest["lane"] == "cuda" else None
    if absent is not None:
        skipped.append(f"greedy-ids smoke: the cuda lane's model needs an NVIDIA GPU; {absent}")
        return problems
    argv = [*command, "--prompt", smoke["prompt"], "--max-tokens", str(smoke["max_tokens"])]
    done = subprocess.run(
        [*argv, "--temperature", "0", "--json"], capture_output=True, text=True, timeout=300
    )
    if done.returncode != 0:
        return [*problems, f"vllm-tvm-cli failed on the smoke prompt: {done.stderr.strip()}"]
    ids = json.loads(done.stdout)["token_ids"]
    if smoke["token_ids"] is None:  # made where no GPU ran it: only the run itself is checked
        skipped.append(f"greedy-ids comparison: the archive records none ({smoke['unrecorded']})")
        if not ids:
            problems.append("vllm-tvm-cli gave no token for the smoke prompt")
    elif ids != smoke["token_ids"]:
        problems.append(f"greedy ids {ids} != the manifest's {smoke['token_ids']}")
    return problems
