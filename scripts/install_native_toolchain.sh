#!/usr/bin/env bash
# Install what `vllm-tvm embed` needs to build libvllm_tvm: a C/C++ compiler and CMake
# (Debian packages). Skips what is already on PATH.
set -euo pipefail
missing=()
command -v cmake >/dev/null || missing+=(cmake)
command -v c++ >/dev/null || missing+=(g++)
command -v cc >/dev/null || missing+=(gcc)
if ((${#missing[@]})); then
  apt-get update -q
  apt-get install -y -q --no-install-recommends "${missing[@]}" make
fi
