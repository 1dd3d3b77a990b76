"""`vllm-tvm release-archive` / `validate-release` on the tiny Llama's embed bundle.

Specification (README "Release archives"): the archive is
vllm-tvm-<version>-linux-<arch>-<lane>.tar.gz with VERSION, manifest.json, an SPDX 2.3 SBOM and
licenses, beside a `.sha256` that `sha256sum -c` accepts and a provenance record; its recorded
greedy ids are transformers' on the same weights; the validator accepts the archive as made
and names each deviation of a tampered or incomplete one.
"""

from __future__ import annotations

import hashlib
import json
import platform
import shutil
import subprocess
import tarfile
from pathlib import Path

import pytest
import torch
from release_forgery import forge as _forge
from tiny_models import load_oracle

from vllm_tvm import SamplingParams, __version__
from vllm_tvm.cli.main import main as cli_main
from vllm_tvm.native_bundle.release_archive import ReleaseArchive, write_release_archive
from vllm_tvm.native_bundle.release_check import validate_archive

NAME = f"vllm-tvm-{__version__}-linux-{platform.machine()}-cpu"


@pytest.fixture(scope="module")
def release(embed_bundle: Path, tmp_path_factory: pytest.TempPathFactory) -> ReleaseArchive:
    return write_release_archive(embed_bundle, tmp_path_factory.mktemp("release"))


@pytest.fixture(scope="module")
def extracted(release: ReleaseArchive, tmp_path_factory: pytest.TempPathFactory) -> Path:
    into = tmp_path_factory.mktemp("extracted")
    with tarfile.open(release.archive) as tar:
        tar.extractall(into, filter="data")
    return into / NAME


def test_the_archive_is_named_for_its_version_machine_and_lane(release: ReleaseArchive) -> None:
    assert release.archive.name == f"{NAME}.tar.gz"
    done = subprocess.run(
        ["sha256sum", "-c", release.checksum.name], cwd=release.archive.parent, check=False
    )
    assert done.returncode == 0
    provenance = json.loads(release.provenance.read_text())
    assert provenance["archive"] == release.archive.name


def test_the_archive_as_made_validates(release: ReleaseArchive, capsys) -> None:
    report = validate_archive(release.archive)
    assert (report.problems, report.skipped) == ([], [])
    assert cli_main(["validate-release", str(release.archive)]) == 0
    assert capsys.readouterr().out.strip() == f"{release.archive.name}: ok"


def test_version_sbom_and_licenses_describe_the_contents(extracted: Path) -> None:
    assert (extracted / "VERSION").read_text() == f"{__version__}\n"
    manifest = json.loads((extracted / "manifest.json").read_text())
    sbom = json.loads((extracted / "sbom.spdx.json").read_text())
    assert sbom["spdxVersion"] == "SPDX-2.3"
    packages = {p["name"]: p for p in sbom["packages"]}
    assert set(packages) == {"vllm-tvm", "apache-tvm-runtime", "apache-tvm-ffi", "model"}
    assert packages["apache-tvm-runtime"]["licenseDeclared"] == "Apache-2.0"
    by_name = {f["fileName"]: f for f in sbom["files"]}
    library = by_name["./lib/libtvm_runtime.so"]
    assert library["SPDXID"] in packages["apache-tvm-runtime"]["hasFiles"]
    digest = hashlib.sha256((extracted / "lib" / "libtvm_runtime.so").read_bytes()).hexdigest()
    assert library["checksums"] == [{"algorithm": "SHA256", "checksumValue": digest}]
    assert by_name["./model/params.bin"]["SPDXID"] in packages["model"]["hasFiles"]
    licenses = sorted(p.name for p in (extracted / "licenses").iterdir())
    assert licenses == ["apache-tvm-ffi.LICENSE", "apache-tvm.LICENSE", "vllm-tvm.LICENSE"]
    assert "Apache License" in (extracted / "licenses" / "apache-tvm.LICENSE").read_text()
    assert set(manifest["files"]) == {p.removeprefix("./") for p in by_name} | {"sbom.spdx.json"}


def test_the_recorded_greedy_ids_are_transformers(extracted: Path, make_llm, tiny_model_dir):
    smoke = json.loads((extracted / "manifest.json").read_text())["smoke"]
    params = SamplingParams(temperature=0, max_tokens=smoke["max_tokens"])
    prompt_ids = make_llm("llama").generate([smoke["prompt"]], params)[0].prompt_token_ids
    oracle = load_oracle(tiny_model_dir("llama"))
    oracle.generation_config.pad_token_id = 0
    with torch.no_grad():
        out = oracle.generate(
            torch.tensor([prompt_ids]), max_new_tokens=smoke["max_tokens"], do_sample=False
        )
    expected = out[0, len(prompt_ids) :].tolist()
    assert smoke["token_ids"] == expected[: len(smoke["token_ids"])]
    assert len(smoke["token_ids"]) >= 1


def _flip_a_weight(root: Path) -> None:
    params = root / "model" / "params.bin"
    data = bytearray(params.read_bytes())
    data[100] ^= 0xFF
    params.write_bytes(bytes(data))


def _claim_other_ids(root: Path) -> None:
    manifest = json.loads((root / "manifest.json").read_text())
    manifest["smoke"]["token_ids"] = [i + 1 for i in manifest["smoke"]["token_ids"]]
    (root / "manifest.json").write_text(json.dumps(manifest))


def _add_a_library(root: Path) -> None:
    (root / "lib" / "extra.so").write_bytes(b"x")


def _change_the_version(root: Path) -> None:
    (root / "VERSION").write_text("9.9.9\n")


def _drop_the_cli_exec_bit(root: Path) -> None:
    (root / "bin" / "vllm-tvm-cli").chmod(0o644)


@pytest.mark.parametrize(
    ("change", "problem"),
    [
        (_flip_a_weight, "content differs from the manifest: model/params.bin"),
        (_add_a_library, "not in the manifest: lib/extra.so"),
        (_change_the_version, "content differs from the manifest: VERSION"),
        (_drop_the_cli_exec_bit, "mode 0o644 != 0o755: bin/vllm-tvm-cli"),
        (_claim_other_ids, "!= the manifest's"),
    ],
    ids=["weight", "extra-file", "version", "mode", "greedy-ids"],
)  # fmt: skip
def test_a_tampered_archive_is_refused(release, tmp_path, change, problem) -> None:
    problems = validate_archive(_forge(release, tmp_path, change)).problems
    assert any(problem in p for p in problems), problems
    assert cli_main(["validate-release", str(tmp_path / release.archive.name)]) == 1


@pytest.mark.parametrize(
    ("missing", "problem"),
    [
        ("licenses/apache-tvm.LICENSE", "missing file: licenses/apache-tvm.LICENSE"),
        ("sbom.spdx.json", "missing sbom.spdx.json"),
        ("lib/libtvm_ffi.so", "missing file: lib/libtvm_ffi.so"),
    ],
)
def test_an_incomplete_archive_is_refused(release, tmp_path, missing, problem) -> None:
    problems = validate_archive(
        _forge(release, tmp_path, lambda root: (root / missing).unlink())
    ).problems
    assert any(problem in p for p in problems), problems


def test_missing_or_stale_sidecars_are_refused(release, tmp_path) -> None:
    archive = _forge(release, tmp_path, lambda root: None, sidecars=False)
    assert validate_archive(archive).problems[:2] == [
        f"missing checksum sidecar {archive.name}.sha256",
        f"missing provenance sidecar {archive.name}.provenance.json",
    ]
    shutil.copy(release.checksum, f"{archive}.sha256")  # the digest of another archive
    assert any(".sha256 does not match" in p for p in validate_archive(archive).problems)


def test_a_member_outside_the_top_folder_is_not_extracted(release, tmp_path) -> None:
    archive = tmp_path / release.archive.name
    evil = tmp_path / "evil"
    evil.write_text("x")
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(evil, arcname="../evil")
    problems = validate_archive(archive).problems
    assert "member outside" in " ".join(problems)
