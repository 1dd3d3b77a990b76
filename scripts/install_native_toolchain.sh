#!/usr/bin/env bash
# Install what `vllm-tvm embed` needs (Debian packages), skipping what is already on PATH:
#   scripts/install_native_toolchain.sh           cmake and a C/C++ compiler (host bundles)
#   scripts/install_native_toolchain.sh --aarch64 + the aarch64-linux-gnu cross compiler and
#                                                 qemu-user (aarch64 bundles and their test)
set -euo pipefail
missing=()
command -v cmake >/dev/null || missing+=(cmake)
command -v c++ >/dev/null || missing+=(g++)
command -v cc >/dev/null || missing+=(gcc)
command -v make >/dev/null || missing+=(make)
if [[ "${1:-}" == "--aarch64" ]]; then
  command -v aarch64-linux-gnu-g++ >/dev/null || missing+=(g++-aarch64-linux-gnu)
  command -v qemu-aarch64 >/dev/null || missing+=(qemu-user)
fi
if ((${#missing[@]})); then
  apt-get update -q
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}"
fi
