"""The container lanes' root file system and its validator (scripts/build_rootfs.sh,
scripts/validate_rootfs.py, containers/Containerfile.*).

Specification (README "Containers"): a lane's tree is Debian's (os-release, dpkg lists
python3), names its lane, has vllm-tvm's venv and no build leftovers; the validator names
each thing missing. The full build (mmdebstrap from Debian's mirror, minutes and ~1.1 GB) and
boot (/health, /version, exit 0 on SIGTERM; chrooted, and under podman where it is
installed) run when VLLM_TVM_ROOTFS_TEST=1.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parent.parent
_SPEC = importlib.util.spec_from_file_location(
    "validate_rootfs", REPO_ROOT / "scripts" / "validate_rootfs.py"
)
assert _SPEC is not None and _SPEC.loader is not None
validate_rootfs = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(validate_rootfs)


def _tree(root: Path, lane: str = "cpu") -> Path:
    """The files tree_problems reads, as build_rootfs.sh leaves them."""
    (root / "etc").mkdir(parents=True)
    (root / "etc" / "os-release").write_text('PRETTY_NAME="Debian GNU/Linux 12"\nID=debian\n')
    (root / "etc" / "vllm-tvm-lane").write_text(f"{lane}\n")
    (root / "var" / "lib" / "dpkg").mkdir(parents=True)
    (root / "var" / "lib" / "dpkg" / "status").write_text("Package: python3\nStatus: ok\n")
    (root / "opt" / "vllm-tvm" / "bin").mkdir(parents=True)
    (root / "opt" / "vllm-tvm" / "bin" / "vllm-tvm").write_text("#!/bin/sh\n")
    return root


def test_a_complete_tree_has_no_problems(tmp_path: Path) -> None:
    assert validate_rootfs.tree_problems(_tree(tmp_path), "cpu") == []


@pytest.mark.parametrize(
    ("damage", "problem"),
    [
        (lambda r: (r / "etc" / "os-release").write_text("ID=alpine\n"), "ID=debian"),
        (lambda r: (r / "var" / "lib" / "dpkg" / "status").write_text(""), "python3"),
        (lambda r: (r / "opt" / "vllm-tvm" / "bin" / "vllm-tvm").unlink(), "bin/vllm-tvm"),
        (lambda r: (r / "tmp" / "wheels").mkdir(parents=True), "leftovers"),
    ],
    ids=["not-debian", "no-python3", "no-venv", "leftovers"],
)
def test_a_damaged_tree_is_refused_by_name(tmp_path: Path, damage, problem) -> None:
    root = _tree(tmp_path)
    damage(root)
    problems = validate_rootfs.tree_problems(root, "cpu")
    assert len(problems) == 1 and problem in problems[0], problems


def test_a_tree_of_the_other_lane_is_refused(tmp_path: Path) -> None:
    assert validate_rootfs.tree_problems(_tree(tmp_path, "cuda"), "cpu") == [
        "etc/vllm-tvm-lane does not say cpu"
    ]


@pytest.mark.parametrize("lane", ["cpu", "cuda"])
def test_each_lanes_containerfile_adds_its_tree_and_serves_on_8000(lane: str) -> None:
    text = (REPO_ROOT / "containers" / f"Containerfile.{lane}").read_text()
    assert "FROM scratch\n" in text
    assert f"ADD rootfs-{lane}.tar /\n" in text
    entrypoint = '["vllm-tvm", "serve", "--host", "0.0.0.0", "--port", "8000"]'
    assert f"ENTRYPOINT {entrypoint}" in text
    assert validate_rootfs.ENTRYPOINT == [
        "/opt/vllm-tvm/bin/vllm-tvm",
        "serve",
        "--host",
        "0.0.0.0",
    ]


def test_the_build_scripts_parse_and_refuse_an_unknown_lane(tmp_path: Path) -> None:
    for script in ("build_rootfs.sh", "build_container.sh"):
        syntax = subprocess.run(["bash", "-n", str(REPO_ROOT / "scripts" / script)])
        assert syntax.returncode == 0, script
    done = subprocess.run(
        ["bash", str(REPO_ROOT / "scripts" / "build_rootfs.sh"), "gpu", str(tmp_path / "x.tar")],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 2 and "unknown lane 'gpu'" in done.stderr
    assert not (tmp_path / "x.tar").exists()


@pytest.mark.skipif(shutil.which("podman") is None, reason="needs podman")
@pytest.mark.parametrize("lane", ["cpu", "cuda"])
def test_podman_builds_each_lanes_image_over_its_tree(tmp_path: Path, lane: str) -> None:
    """The Containerfile as podman reads it, over a stand-in tree (the full tree is the
    opt-in test's): the image serves on 8000 with the entrypoint and stops on SIGTERM."""
    context = tmp_path / "context"
    context.mkdir()
    tree = _tree(tmp_path / "tree", lane)
    subprocess.run(
        ["tar", "-C", str(tree), "-cf", str(context / f"rootfs-{lane}.tar"), "."], check=True
    )
    settings = {**os.environ, "CONTAINERS_CONF": str(REPO_ROOT / "containers" / "containers.conf")}
    image = f"localhost/vllm-tvm-containerfile-test:{lane}-{tmp_path.name}"
    containerfile = REPO_ROOT / "containers" / f"Containerfile.{lane}"
    build = ["podman", "build", "-q", "-f", str(containerfile), "-t", image, str(context)]
    subprocess.run(build, check=True, env=settings, capture_output=True, timeout=300)
    try:
        inspect = ["podman", "image", "inspect", image, "--format", "{{json .Config}}"]
        done = subprocess.run(inspect, check=True, env=settings, capture_output=True, text=True)
        config = json.loads(done.stdout)
    finally:
        subprocess.run(["podman", "rmi", "-f", image], env=settings, capture_output=True)
    assert config["Entrypoint"] == ["vllm-tvm", "serve", "--host", "0.0.0.0", "--port", "8000"]
    assert list(config["ExposedPorts"]) == ["8000/tcp"]
    assert config["StopSignal"] == "SIGTERM"
    assert config["Env"][0].startswith("PATH=/opt/vllm-tvm/bin:")
    assert config["Labels"]["org.opencontainers.image.title"] == f"vllm-tvm ({lane})"


@pytest.mark.slow
@pytest.mark.skipif(
    os.environ.get("VLLM_TVM_ROOTFS_TEST") != "1" or os.geteuid() != 0,
    reason="builds a Debian tree from the mirror (minutes, ~1.1 GB): VLLM_TVM_ROOTFS_TEST=1, root",
)
@pytest.mark.parametrize("lane", ["cpu", "cuda"])
def test_each_lane_builds_and_boots(tmp_path: Path, tiny_model_dir, lane: str) -> None:
    """The cuda lane boots here on the CPU (no GPU on this machine kind): its tree, venv with
    NVIDIA's runtime wheels and entrypoint are what is checked, not a GPU run."""
    tarball = tmp_path / f"rootfs-{lane}.tar"
    build = ["bash", str(REPO_ROOT / "scripts" / "build_rootfs.sh"), lane, str(tarball)]
    subprocess.run(build, check=True, env={**os.environ, "PYTHON": sys.executable}, timeout=1800)
    check = [sys.executable, str(REPO_ROOT / "scripts" / "validate_rootfs.py"), str(tarball)]
    check += ["--lane", lane, "--boot", str(tiny_model_dir("llama"))]
    done = subprocess.run(check, capture_output=True, text=True, timeout=1200)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "booted chrooted" in done.stdout
    if shutil.which("podman") is not None:
        image = f"localhost/vllm-tvm-test:{tmp_path.name}"
        settings = {
            **os.environ,
            "CONTAINERS_CONF": str(REPO_ROOT / "containers" / "containers.conf"),
        }
        containerfile = REPO_ROOT / "containers" / f"Containerfile.{lane}"
        build = ["podman", "build", "-f", str(containerfile), "-t", image, str(tmp_path)]
        subprocess.run(build, check=True, env=settings, timeout=1200)
        done = subprocess.run(
            [*check, "--podman", image], capture_output=True, text=True, timeout=1200
        )
        subprocess.run(["podman", "rmi", image], check=False, env=settings)
        assert done.returncode == 0, done.stderr[-3000:]
        assert "booted by podman" in done.stdout
    shutil.rmtree(tmp_path, ignore_errors=True)
