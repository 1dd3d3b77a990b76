"""`vllm-tvm release-archive`: an embed bundle as the tarball a C user downloads.

Why a release form: a bundle folder says nothing about itself. The archive
`vllm-tvm-<version>-linux-<arch>-<lane>.tar.gz` holds one folder of that name with the bundle
plus what a downstream packager checks before shipping it:

    VERSION             the vllm-tvm version
    manifest.json       every other file with its sha256, size and mode; the machine, lane
                        and TVM versions; the greedy token ids the bundle's CLI gave at
                        release time for a fixed prompt (the validator reruns it; a cuda
                        archive made without a GPU records none and says why)
    sbom.spdx.json      SPDX 2.3: the TVM runtime, libvllm_tvm, the model's files and (cuda)
                        NVIDIA's CUDA runtime, each with its license, a checksum per file
    licenses/           vllm-tvm's, TVM's and tvm-ffi's license texts (and the model's, given)

and beside the archive `<archive>.sha256` (sha256sum's format) and
`<archive>.provenance.json` (what built it, from what, when). release_check.py validates one.
"""

from __future__ import annotations

import json
import os
import platform
import shutil
import subprocess
import tarfile
import time
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

from vllm_tvm import __version__
from vllm_tvm.artifacts.manifest import sha256_of_file
from vllm_tvm.native_bundle.release_layout import (
    ELF_MACHINES,
    MANIFEST,
    SBOM,
    SMOKE_MAX_TOKENS,
    SMOKE_PROMPT,
    VERSION_FILE,
    cli_command,
    cuda_device_absent_reason,
    release_name,
)

PROJECT_LICENSE = "Apache-2.0"
CUDA_RUNTIME_LICENSE = "LicenseRef-NVIDIA-CUDA-EULA"
_CUDA_RUNTIME_LICENSE_TEXT = (
    "libcudart.so is NVIDIA's CUDA runtime, redistributed under the NVIDIA CUDA Toolkit End "
    "User License Agreement (https://docs.nvidia.com/cuda/eula/), whose Attachment A lists it "
    "as redistributable."
)
_REPO_LICENSE = Path(__file__).resolve().parents[2] / "LICENSE"


@dataclass(frozen=True)
class ReleaseArchive:
    """A written archive and its two sidecars."""

    archive: Path
    checksum: Path
    provenance: Path


def bundle_machine(bundle: Path) -> str:
    """The machine (`x86_64`, `aarch64`) libvllm_tvm.so is built for, from its ELF header."""
    header = (bundle / "lib" / "libvllm_tvm.so").read_bytes()[:20]
    code = int.from_bytes(header[18:20], "little")
    for machine, number in ELF_MACHINES.items():
        if number == code:
            return machine
    raise ValueError(f"libvllm_tvm.so is for ELF machine {code}, not one of {list(ELF_MACHINES)}")


def bundle_lane(bundle: Path) -> str:
    """`cuda` when the bundled model is a CUDA artifact, else `cpu`."""
    manifest = json.loads((bundle / "model" / "manifest.json").read_text())
    return "cuda" if manifest.get("target_kind") == "cuda" else "cpu"


def _license_file(distribution: str) -> Path | None:
    """The LICENSE a wheel installed (its dist-info's licenses/), for `distribution`."""
    files = metadata.distribution(distribution).files or []
    found = [f for f in files if f.name == "LICENSE"]
    return Path(str(found[0].locate())) if found else None


def _smoke(root: Path, machine: str, lane: str) -> dict[str, Any]:
    """The smoke record: SMOKE_PROMPT and the greedy ids the bundle's CLI gives for it (what
    the validator must see), or none and why when this machine cannot run a cuda model."""
    smoke: dict[str, Any] = {"prompt": SMOKE_PROMPT, "max_tokens": SMOKE_MAX_TOKENS}
    absent = cuda_device_absent_reason() if lane == "cuda" else None
    if absent is not None:
        return {**smoke, "token_ids": None, "unrecorded": f"made without a GPU: {absent}"}
    return {**smoke, "token_ids": _smoke_ids(root, machine)}


def _smoke_ids(root: Path, machine: str) -> list[int]:
    """The greedy ids of the bundle's CLI for SMOKE_PROMPT."""
    command = cli_command(root, machine)
    command += ["--prompt", SMOKE_PROMPT, "--max-tokens", str(SMOKE_MAX_TOKENS)]
    done = subprocess.run(
        [*command, "--temperature", "0", "--json"], capture_output=True, text=True, timeout=300
    )
    if done.returncode != 0:
        raise RuntimeError(f"the bundle's vllm-tvm-cli failed: {done.stderr.strip()}")
    return [int(i) for i in json.loads(done.stdout)["token_ids"]]


def _spdx_id(path: str) -> str:
    return "SPDXRef-File-" + "".join(c if c.isalnum() else "-" for c in path)


def _sbom(name: str, files: dict[str, dict[str, Any]], model_license: str) -> dict[str, Any]:
    """SPDX 2.3: one package per component, each owning its files."""
    tvm_version, ffi_version = metadata.version("apache-tvm"), metadata.version("apache-tvm-ffi")
    components = [
        ("vllm-tvm", __version__, PROJECT_LICENSE, lambda p: not p.startswith("model/")),
        ("apache-tvm-runtime", tvm_version, "Apache-2.0", lambda p: "libtvm_runtime" in p),
        ("apache-tvm-ffi", ffi_version, "Apache-2.0", lambda p: "libtvm_ffi" in p),
        ("model", "bundled", model_license, lambda p: p.startswith("model/")),
    ]
    if any("libcudart" in path for path in files):
        cudart = ("nvidia-cuda-runtime", "13", CUDA_RUNTIME_LICENSE, lambda p: "libcudart" in p)
        components.insert(3, cudart)
    owner: dict[str, str] = {}
    for path in files:  # the most specific component wins (TVM's libraries, then the model)
        owner[path] = next(c[0] for c in reversed(components) if c[3](path))
    packages, relationships = [], []
    for package, version, license_id, _ in components:
        package_id = f"SPDXRef-Package-{package}"
        packages.append(
            {
                "SPDXID": package_id,
                "name": package,
                "versionInfo": version,
                "downloadLocation": "NOASSERTION",
                "licenseConcluded": license_id,
                "licenseDeclared": license_id,
                "copyrightText": "NOASSERTION",
                "filesAnalyzed": True,
                "hasFiles": [_spdx_id(p) for p, o in owner.items() if o == package],
            }
        )
        relationships.append(
            {
                "spdxElementId": "SPDXRef-DOCUMENT",
                "relationshipType": "DESCRIBES",
                "relatedSpdxElement": package_id,
            }
        )
    license_of = {c[0]: c[2] for c in components}
    return {
        "spdxVersion": "SPDX-2.3",
        "dataLicense": "CC0-1.0",
        "SPDXID": "SPDXRef-DOCUMENT",
        "name": name,
        "documentNamespace": f"https://spdx.org/spdxdocs/{name}",
        "creationInfo": {
            "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "creators": [f"Tool: vllm-tvm-{__version__}"],
        },
        "packages": packages,
        "files": [
            {
                "SPDXID": _spdx_id(path),
                "fileName": f"./{path}",
                "checksums": [{"algorithm": "SHA256", "checksumValue": entry["sha256"]}],
                "licenseConcluded": license_of[owner[path]],
                "copyrightText": "NOASSERTION",
            }
            for path, entry in files.items()
        ],
        "relationships": relationships,
        "hasExtractedLicensingInfos": [
            {
                "licenseId": CUDA_RUNTIME_LICENSE,
                "name": "NVIDIA CUDA Toolkit End User License Agreement",
                "extractedText": _CUDA_RUNTIME_LICENSE_TEXT,
            }
        ]
        if CUDA_RUNTIME_LICENSE in license_of.values()
        else [],
    }


def _file_table(root: Path) -> dict[str, dict[str, Any]]:
    return {
        str(path.relative_to(root)): {
            "sha256": sha256_of_file(path),
            "size": path.stat().st_size,
            "mode": oct(path.stat().st_mode & 0o777),
        }
        for path in sorted(root.rglob("*"))
        if path.is_file() and path.relative_to(root) != Path(MANIFEST)
    }


def _stage(bundle: Path, root: Path, model_license: str, model_license_file: Path | None) -> None:
    shutil.copytree(bundle, root, symlinks=False)
    (root / VERSION_FILE).write_text(__version__ + "\n")
    licenses = root / "licenses"
    licenses.mkdir()
    # A checkout has LICENSE at its root; an installed wheel has it in its dist-info.
    own = _REPO_LICENSE if _REPO_LICENSE.is_file() else _license_file("vllm-tvm")
    if own is None:
        raise RuntimeError("vllm-tvm's LICENSE is neither in the checkout nor installed")
    shutil.copy2(own, licenses / "vllm-tvm.LICENSE")
    for distribution in ("apache-tvm", "apache-tvm-ffi"):
        found = _license_file(distribution)
        if found is None:
            raise RuntimeError(f"the installed {distribution} carries no LICENSE file")
        shutil.copy2(found, licenses / f"{distribution}.LICENSE")
    if (root / "lib" / "libcudart.so.13").is_file():
        (licenses / "nvidia-cuda-runtime.LICENSE").write_text(_CUDA_RUNTIME_LICENSE_TEXT + "\n")
    if model_license_file is not None:
        shutil.copy2(model_license_file, licenses / f"model.{model_license}.LICENSE")


def write_release_archive(
    bundle: Path,
    out_dir: Path,
    model_license: str = "NOASSERTION",
    model_license_file: Path | None = None,
) -> ReleaseArchive:
    """Pack `bundle` (a `vllm-tvm embed` folder) into `out_dir` with its sidecars."""
    machine, lane = bundle_machine(bundle), bundle_lane(bundle)
    name = release_name(__version__, machine, lane)
    out_dir.mkdir(parents=True, exist_ok=True)
    staging = out_dir / f".{name}.staging"
    shutil.rmtree(staging, ignore_errors=True)
    root = staging / name
    try:
        _stage(bundle, root, model_license, model_license_file)
        smoke = _smoke(root, machine, lane)
        files = _file_table(root)
        (root / SBOM).write_text(json.dumps(_sbom(name, files, model_license), indent=1))
        files = _file_table(root)
        manifest = {
            "schema_version": 1,
            "name": name,
            "version": __version__,
            "machine": machine,
            "lane": lane,
            "apache_tvm": metadata.version("apache-tvm"),
            "apache_tvm_ffi": metadata.version("apache-tvm-ffi"),
            "smoke": smoke,
            "files": files,
        }
        (root / MANIFEST).write_text(json.dumps(manifest, indent=1, sort_keys=True))
        archive = out_dir / f"{name}.tar.gz"
        with tarfile.open(archive, "w:gz") as tar:
            tar.add(root, arcname=name, filter=_normalised)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    digest = sha256_of_file(archive)
    checksum = archive.with_name(archive.name + ".sha256")
    checksum.write_text(f"{digest}  {archive.name}\n")
    provenance = archive.with_name(archive.name + ".provenance.json")
    provenance.write_text(json.dumps(_provenance(archive, digest, bundle), indent=1))
    return ReleaseArchive(archive, checksum, provenance)


def _normalised(info: tarfile.TarInfo) -> tarfile.TarInfo:
    """Owner-neutral members (root:root, no user names), as a packager expects."""
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    return info


def _provenance(archive: Path, digest: str, bundle: Path) -> dict[str, Any]:
    return {
        "archive": archive.name,
        "sha256": digest,
        "builder": {
            "vllm_tvm": __version__,
            "python": platform.python_version(),
            "machine": platform.machine(),
            "system": platform.platform(),
        },
        "source_bundle": str(bundle.resolve()),
        "model_manifest_sha256": sha256_of_file(bundle / "model" / "manifest.json"),
        "built_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "source_date_epoch": os.environ.get("SOURCE_DATE_EPOCH"),
    }
