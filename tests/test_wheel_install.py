"""The wheel and sdist users install: built from this tree by its build backend, installed into
a fresh virtual environment, and run from there.

Specification (README "Install from a wheel"): `pip install dist/vllm_tvm-*.whl` gives a
`vllm-tvm` command whose `generate` works; the sdist carries the native sources `vllm-tvm
embed` builds from; the license is an SPDX expression with its file. The venv sees the
project venv's dependencies through a `.pth` line (so torch is not installed again) but not
the checkout: the command runs from a directory outside it and must import `vllm_tvm` from
the new venv. Greedy tokens are compared with transformers on the same tiny checkpoint.
"""

from __future__ import annotations

import json
import os
import shutil
import site
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest
import torch
from tiny_models import load_oracle

REPO_ROOT = Path(__file__).resolve().parent.parent
_NOT_SOURCES = shutil.ignore_patterns(
    ".git", ".venv", "build", "dist", "__pycache__", "*.egg-info", ".cache", ".device", ".whl"
)
NEW_TOKENS = 8
PROMPT = "Once upon a time"


@pytest.fixture(scope="module")
def distributions(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The wheel and the sdist, built once by the PEP 517 hooks `python -m build` calls."""
    source = tmp_path_factory.mktemp("wheel_src") / "vllm-tvm"
    shutil.copytree(REPO_ROOT, source, ignore=_NOT_SOURCES)
    out = source / "dist"
    # Read the directory first: the backend rewrites sys.argv for its setup() run.
    hooks = (
        "import setuptools.build_meta as backend, sys; out = sys.argv[1]; "
        "backend.build_wheel(out); backend.build_sdist(out)"
    )
    done = subprocess.run(
        [sys.executable, "-c", hooks, str(out)],
        cwd=source,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "License classifiers are deprecated" not in done.stderr
    assert "project.license` as a TOML table is deprecated" not in done.stderr
    wheel, sdist = next(out.glob("vllm_tvm-*.whl")), next(out.glob("vllm_tvm-*.tar.gz"))
    return {"wheel": wheel, "sdist": sdist}


@pytest.fixture(scope="module")
def wheel_venv(tmp_path_factory: pytest.TempPathFactory, distributions) -> Path:
    """A fresh venv with the wheel installed; dependencies come from the project venv."""
    venv = tmp_path_factory.mktemp("wheel_venv") / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    python = venv / "bin" / "python"
    new_site = Path(
        subprocess.run(
            [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            check=True,
            capture_output=True,
            text=True,
        ).stdout.strip()
    )
    (new_site / "project_dependencies.pth").write_text("\n".join(site.getsitepackages()) + "\n")
    install = [str(python), "-m", "pip", "install", "--quiet", "--no-index", "--no-deps"]
    # --ignore-installed: the project venv's editable vllm-tvm is visible and must stay.
    install += ["--ignore-installed", str(distributions["wheel"])]
    done = subprocess.run(install, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return venv


def _in_venv(venv: Path, argv: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    return subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=600)


def test_the_license_is_an_spdx_expression_with_its_file(distributions) -> None:
    with zipfile.ZipFile(distributions["wheel"]) as wheel:
        names = wheel.namelist()
        metadata = wheel.read(next(n for n in names if n.endswith(".dist-info/METADATA")))
    assert b"\nLicense-Expression: Apache-2.0\n" in metadata
    assert b"\nLicense-File: LICENSE\n" in metadata
    assert any(n.endswith(".dist-info/licenses/LICENSE") for n in names)
    assert "vllm_tvm/extensions/cublaslt_gemm.cc" in names


def test_the_sdist_carries_the_native_sources(distributions) -> None:
    with tarfile.open(distributions["sdist"]) as sdist:
        names = {name.split("/", 1)[1] for name in sdist.getnames() if "/" in name}
    expected = {"LICENSE", "include/vllm_tvm.h", "native/CMakeLists.txt"}
    expected |= {str(p.relative_to(REPO_ROOT)) for p in (REPO_ROOT / "native").rglob("*.c*")}
    expected |= {str(p.relative_to(REPO_ROOT)) for p in (REPO_ROOT / "vllm_tvm").rglob("*.cc")}
    assert expected <= names, sorted(expected - names)


def test_the_venv_imports_vllm_tvm_from_the_wheel(wheel_venv: Path, tmp_path: Path) -> None:
    probe = "import json, vllm_tvm, importlib.metadata as m; "
    probe += "print(json.dumps([vllm_tvm.__file__, m.distribution('vllm-tvm').requires]))"
    done = _in_venv(wheel_venv, [str(wheel_venv / "bin" / "python"), "-c", probe], tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    module_file, requires = json.loads(done.stdout)
    assert Path(module_file).resolve().is_relative_to(wheel_venv.resolve())
    # Every dependency the wheel declares (extras aside) is importable metadata there.
    names = [r.split(";")[0].split("=")[0].split(">")[0].strip() for r in requires]
    declared = [n for n, r in zip(names, requires, strict=True) if "extra ==" not in r]
    check = "import importlib.metadata as m, sys; [m.version(n) for n in sys.argv[1:]]"
    checked = _in_venv(
        wheel_venv, [str(wheel_venv / "bin" / "python"), "-c", check, *declared], tmp_path
    )
    assert checked.returncode == 0, checked.stderr[-2000:]


def test_generate_from_the_wheel_matches_transformers(
    wheel_venv: Path, tiny_model_dir, tmp_path: Path
) -> None:
    model_dir = tiny_model_dir("llama")
    argv = [str(wheel_venv / "bin" / "vllm-tvm"), "generate", "--model", str(model_dir)]
    argv += ["--prompt", PROMPT, "--max-tokens", str(NEW_TOKENS), "--device", "cpu", "--json"]
    done = _in_venv(wheel_venv, argv, tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    oracle = load_oracle(model_dir)
    oracle.generation_config.eos_token_id = None
    oracle.generation_config.pad_token_id = 0
    prompt_ids = result["prompt_token_ids"]
    with torch.no_grad():
        out = oracle.generate(
            torch.tensor([prompt_ids]), max_new_tokens=len(result["token_ids"]), do_sample=False
        )
    assert result["token_ids"] == out[0, len(prompt_ids) :].tolist()
    assert len(result["token_ids"]) >= 1
