#!/usr/bin/env bash
# Build llama-bench and llama-batched-bench from the trimmed llama.cpp (pack_peers.py) —
# on the GPU box for CUDA sm_90a (the flags of shared/design/PEERS-H200.md), or here for the
# CPU (a tiny check that the trimmed tree configures, builds and loads our GGUF).
#
# Meant to run in the background while other peers are measured:
#   RESERVE_CPUS=4 setsid nohup nice -n 19 bash benchmarks/peers/build_llamacpp.sh cuda \
#       /tmp/peers/llamacpp > /tmp/peers/build.out 2>&1 < /dev/null &
# RESERVE_CPUS=N keeps the compilers off logical CPUs 0..N-1 and their SMT siblings, so a
# benchmark's host threads find free cores (Linux puts them on idle CPUs first).
# Idempotent: exits at once when both binaries exist. Writes DONE, or FAILED with the exit
# code, next to build.log, so a later call can wait for it (run_llamacpp.py does).
#
# usage: [RESERVE_CPUS=N] build_llamacpp.sh cuda|cpu WORKDIR [JOBS]
#   WORKDIR gets src/ (untarred .peers/llamacpp/llama.cpp.tar.xz), build/, build.log, DONE
set -euo pipefail

mode=${1:?usage: build_llamacpp.sh cuda|cpu WORKDIR [JOBS]}
work=${2:?usage: build_llamacpp.sh cuda|cpu WORKDIR [JOBS]}
here=$(cd "$(dirname "$0")/../.." && pwd)
archive=$here/.peers/llamacpp/llama.cpp.tar.xz

mkdir -p "$work"
log=$work/build.log
if [[ -x $work/build/bin/llama-bench && -x $work/build/bin/llama-batched-bench ]]; then
  echo "llama.cpp already built in $work/build/bin"
  exit 0
fi
rm -f "$work/DONE" "$work/FAILED"
trap 'rc=$?; if [[ $rc -ne 0 ]]; then echo "exit $rc (see $log)" > "$work/FAILED"; fi' EXIT

case $mode in
  cuda)
    export PATH=/usr/local/cuda/bin:$PATH
    flags=(-DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90a -DGGML_CUDA_NCCL=OFF)
    ;;
  cpu)
    flags=(-DGGML_CUDA=OFF)
    ;;
  *)
    echo "unknown mode '$mode'; expected cuda or cpu" >&2
    exit 2
    ;;
esac

# The CPUs the compilers may use: all this process may run on, less the reserved ones.
cpus=$(python3 - "${RESERVE_CPUS:-0}" <<'EOF'
import os
import sys

online = sorted(os.sched_getaffinity(0))
reserved: set[int] = set()
for cpu in online[: int(sys.argv[1])]:
    try:
        with open(f"/sys/devices/system/cpu/cpu{cpu}/topology/thread_siblings_list") as f:
            siblings = f.read().strip()
    except OSError:
        siblings = str(cpu)
    for part in siblings.split(","):
        first, _, last = part.partition("-")
        reserved.update(range(int(first), int(last or first) + 1))
left = [cpu for cpu in online if cpu not in reserved] or online
print(",".join(map(str, left)))
EOF
)
jobs=${3:-$(tr ',' '\n' <<< "$cpus" | wc -l)}
pin=()
if [[ ${RESERVE_CPUS:-0} -gt 0 ]] && command -v taskset > /dev/null; then
  pin=(taskset -c "$cpus")
fi

if [[ ! -d $work/src/llama.cpp ]]; then
  if [[ ! -f $archive ]]; then
    echo "missing $archive: carry .peers/llamacpp (made by benchmarks/peers/pack_peers.py)" >&2
    exit 3
  fi
  mkdir -p "$work/src"
  python3 -m tarfile -e "$archive" "$work/src"  # no dependence on an xz binary
fi

start=$(date +%s)
{
  echo "mode $mode, $jobs jobs on CPUs $cpus"
  cmake -S "$work/src/llama.cpp" -B "$work/build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    "${flags[@]}" -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
    -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_APP=OFF -DLLAMA_OPENSSL=OFF
  "${pin[@]}" cmake --build "$work/build" -j "$jobs" --target llama-bench llama-batched-bench
} > "$log" 2>&1
echo "built in $(( $(date +%s) - start )) s" | tee -a "$log" > "$work/DONE"
