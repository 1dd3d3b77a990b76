#!/usr/bin/env bash
# Build the container image of a lane with podman from the Debian root file system of
# scripts/build_rootfs.sh (made first when containers/rootfs-LANE.tar is absent).
#   scripts/build_container.sh cpu|cuda      -> image vllm-tvm:LANE (cpu also vllm-tvm:latest)
# scripts/validate_rootfs.py checks the tarball and boots the image (--podman IMAGE) or, where
# no container runtime runs, the tree itself (unshare + chroot).
set -euo pipefail
cd "$(dirname "$0")/.."
LANE="${1:?usage: scripts/build_container.sh cpu|cuda}"
ROOTFS="containers/rootfs-$LANE.tar"
[[ -f "$ROOTFS" ]] || bash scripts/build_rootfs.sh "$LANE" "$ROOTFS"
command -v podman >/dev/null || { apt-get update -qq && apt-get install -y -qq podman runc; }
export CONTAINERS_CONF="${CONTAINERS_CONF:-$PWD/containers/containers.conf}"
TAGS=(-t "vllm-tvm:$LANE")
[[ "$LANE" == cpu ]] && TAGS+=(-t vllm-tvm:latest)
podman build -f "containers/Containerfile.$LANE" "${TAGS[@]}" containers
