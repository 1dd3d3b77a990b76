"""Validate a container lane's root file system (scripts/build_rootfs.sh) from its tarball alone.

    python scripts/validate_rootfs.py ROOTFS.tar --lane cpu [--boot MODEL [--podman IMAGE]]

Checks, each failure printed as one line (exit 1 if any):
- the tree is Debian's (etc/os-release, dpkg's database lists python3), of the named lane
  (etc/vllm-tvm-lane), with vllm-tvm's venv at /opt/vllm-tvm, and no build leftovers
  (/tmp/wheels);
- `vllm-tvm --version` inside it (chroot) prints the version of the installed wheel;
- with --boot MODEL: the entrypoint the Containerfiles name (`vllm-tvm serve --host 0.0.0.0
  --port 8000`, here on a free port, serving MODEL) answers /health with 200 and /version
  with that version, and exits 0 within 60 s of SIGTERM. It runs as the image under podman
  (--podman IMAGE, the image scripts/build_container.sh built from this tarball) or, where
  no container runtime runs, chrooted into the extracted tree in its own mount namespace.
Needs root (chroot, mounts), tar and util-linux's unshare.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

VENV = "opt/vllm-tvm"
PODMAN_SETTINGS = Path(__file__).resolve().parent.parent / "containers" / "containers.conf"
ENTRYPOINT = ["/opt/vllm-tvm/bin/vllm-tvm", "serve", "--host", "0.0.0.0"]
"""What containers/Containerfile.* run (their --port 8000 is replaced by a free port)."""
START_TIMEOUT_S = 600
STOP_TIMEOUT_S = 60


def tree_problems(root: Path, lane: str) -> list[str]:
    problems = []
    os_release = root / "etc" / "os-release"
    if not os_release.is_file() or "ID=debian" not in os_release.read_text().split("\n"):
        problems.append("etc/os-release does not say ID=debian")
    status = root / "var" / "lib" / "dpkg" / "status"
    if not status.is_file() or "Package: python3\n" not in status.read_text():
        problems.append("dpkg's database does not list python3")
    lane_file = root / "etc" / "vllm-tvm-lane"
    if not lane_file.is_file() or lane_file.read_text().strip() != lane:
        problems.append(f"etc/vllm-tvm-lane does not say {lane}")
    if not (root / VENV / "bin" / "vllm-tvm").is_file():
        problems.append(f"no {VENV}/bin/vllm-tvm")
    if (root / "tmp" / "wheels").exists():
        problems.append("build leftovers in tmp/wheels")
    return problems


def _in_tree(root: Path, argv: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["chroot", str(root), *argv], capture_output=True, text=True, timeout=300, check=False
    )


def installed_version(root: Path) -> str | None:
    probe = "import importlib.metadata as m; print(m.version('vllm-tvm'))"
    done = _in_tree(root, [f"/{VENV}/bin/python", "-c", probe])
    return done.stdout.strip() if done.returncode == 0 else None


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _get(url: str) -> tuple[int, bytes]:
    with urllib.request.urlopen(url, timeout=5) as response:
        return response.status, response.read()


def chroot_command(root: Path, model: Path, port: int) -> list[str]:
    """The entrypoint chrooted into the extracted tree, in its own mount namespace; `exec`
    all the way down, so the process signalled is the server itself."""
    shutil.copytree(model, root / "models" / "model")
    mounts = f"mount -t proc proc {root}/proc && mount --rbind /dev {root}/dev"
    script = f'{mounts} && exec chroot {root} "$@"'
    serve = [*ENTRYPOINT, "--port", str(port), "--model", "/models/model", "--device", "cpu"]
    return ["unshare", "--mount", "--propagation", "private", "sh", "-c", script, "sh", *serve]


def podman_command(image: str, model: Path, port: int) -> list[str]:
    """The image's own entrypoint under podman in the foreground (it forwards SIGTERM);
    the later --port wins over the entrypoint's 8000, on the host's network."""
    mount = f"{model.resolve()}:/models/model:ro"
    run = ["podman", "run", "--rm", "--network", "host", "-v", mount, image]
    return [*run, "--port", str(port), "--model", "/models/model", "--device", "cpu"]


def boot_problems(command: list[str], port: int, version: str) -> list[str]:
    """Start `command` (a server on `port`), probe /health and /version, SIGTERM it."""
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    problems = []
    try:
        base = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline and process.poll() is None:
            try:
                if _get(f"{base}/health")[0] == 200:
                    break
            except OSError:
                pass
            time.sleep(1)
        else:
            problems.append(f"/health never answered 200 (exit status {process.poll()})")
        if not problems:
            status, body = _get(f"{base}/version")
            if status != 200 or json.loads(body).get("version") != version:
                problems.append(f"/version answered {status} {body!r}, not version {version}")
            process.send_signal(signal.SIGTERM)
            code = process.wait(timeout=STOP_TIMEOUT_S)
            if code != 0:
                problems.append(f"after SIGTERM the server exited with status {code}")
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        log = process.stdout.read().decode(errors="replace") if process.stdout else ""
        if problems or "Traceback" in log:
            problems.append("server log tail: " + log[-2000:].replace("\n", " | "))
    return problems


def validate(tarball: Path, lane: str, model: Path | None, podman: str | None) -> list[str]:
    """Check the tarball's tree; boot it (under podman when `podman` names its image, else
    chrooted) when `model` is given."""
    with tempfile.TemporaryDirectory(prefix="rootfs-") as tmp:
        root = Path(tmp)
        subprocess.run(["tar", "-xf", str(tarball), "-C", str(root)], check=True)
        problems = tree_problems(root, lane)
        version = installed_version(root)
        done = _in_tree(root, [f"/{VENV}/bin/vllm-tvm", "--version"])
        if version is None or done.returncode != 0 or done.stdout.strip() != version:
            problems.append(f"vllm-tvm --version in the tree failed: {done.stderr[-500:]}")
        if model is not None and not problems:
            port = _free_port()
            command = (
                podman_command(podman, model, port) if podman else chroot_command(root, model, port)
            )
            problems += boot_problems(command, port, str(version))
        return problems


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("tarball", type=Path)
    parser.add_argument("--lane", required=True, choices=("cpu", "cuda"))
    parser.add_argument("--boot", type=Path, default=None, metavar="MODEL",
                        help="serve MODEL with the entrypoint and probe it")  # fmt: skip
    parser.add_argument("--podman", default=None, metavar="IMAGE",
                        help="boot this image (built from the tarball) under podman")  # fmt: skip
    args = parser.parse_args()
    os.environ.setdefault("CONTAINERS_CONF", str(PODMAN_SETTINGS))
    problems = validate(args.tarball, args.lane, args.boot, args.podman)
    for problem in problems:
        print(f"validate_rootfs: {problem}", file=sys.stderr)
    if not problems:
        how = "" if args.boot is None else f", booted {'by podman' if args.podman else 'chrooted'}"
        print(f"{args.tarball.name}: ok (lane {args.lane}{how})")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
