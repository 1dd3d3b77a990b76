"""Run one TIR kernel compiled for aarch64 under qemu-user, without an aarch64 TVM runtime.

Why: the integer dot products for Arm (`sdot`) cannot run on this x86-64 machine, and
loading them through TVM's runtime would need a cross-built runtime and a model. A kernel
alone is one object file whose entry point, `__tvm_ffi_main`, takes its buffers as
DLTensor pointers (tvm-ffi's C ABI); a small C program, statically linked with it by
Debian's aarch64-linux-gnu-gcc, fills the runtime's three hooks (a serial parallel launch
over two tasks, so that a kernel's split of the work runs as on two cores; workspace
allocation), reads the buffers from a file, calls the kernel and writes them back.
qemu-aarch64 runs it (scripts/install_native_toolchain.sh --aarch64 installs both tools).
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
import tvm
import tvm_ffi
from tvm.target import Target

TOOLS = ("aarch64-linux-gnu-gcc", "qemu-aarch64")
needs_qemu = pytest.mark.skipif(
    not all(shutil.which(tool) for tool in TOOLS),
    reason=f"needs {' and '.join(TOOLS)} (scripts/install_native_toolchain.sh --aarch64)",
)

DOTPROD_TARGET = Target(
    {
        "kind": "llvm",
        "mtriple": "aarch64-linux-gnu",
        "mcpu": "generic",
        "mattr": ["+neon", "+dotprod"],
    }
)
"""An aarch64 CPU with the dotprod extension (Armv8.2-A and later, e.g. Neoverse N1)."""

_DTYPE_CODES = {"i": 0, "u": 1, "f": 2}
"""DLPack's type codes for numpy's integer, unsigned and float kinds."""

_RUNNER = r"""
#include <dlpack/dlpack.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <tvm/ffi/c_api.h>

typedef struct { void* sync_handle; int32_t num_task; } ParallelEnv;
typedef int (*ParallelLambda)(int task_id, ParallelEnv* env, void* data);
extern void* __TVMBackendParallelLaunch;
extern void* __TVMBackendAllocWorkspace;
extern void* __TVMBackendFreeWorkspace;
int __tvm_ffi_main(void* self, const TVMFFIAny* args, int32_t num_args, TVMFFIAny* result);

static int launch(ParallelLambda lambda, void* data, int num_task) {
  ParallelEnv env = {NULL, 2};
  for (int task = 0; task < env.num_task; ++task) {
    if (lambda(task, &env, data) != 0) return -1;
  }
  return 0;
}
static void* workspace(int device_type, int device_id, uint64_t bytes, int code, int bits) {
  return aligned_alloc(64, (bytes + 63) / 64 * 64);
}
static int release(int device_type, int device_id, void* pointer) {
  free(pointer);
  return 0;
}
void TVMFFIErrorSetRaisedFromCStrParts(const char* kind, const char** parts, int32_t count) {
  fprintf(stderr, "%s:", kind);
  for (int32_t i = 0; i < count; ++i) fputs(parts[i], stderr);
  fputc('\n', stderr);
}

int main(int argc, char** argv) {
  __TVMBackendParallelLaunch = (void*)launch;
  __TVMBackendAllocWorkspace = (void*)workspace;
  __TVMBackendFreeWorkspace = (void*)release;
  FILE* spec = fopen(argv[1], "r");
  FILE* data = fopen(argv[2], "rb");
  int count;
  if (fscanf(spec, "%d", &count) != 1) return 2;
  DLTensor* tensors = calloc(count, sizeof(DLTensor));
  TVMFFIAny* args = calloc(count, sizeof(TVMFFIAny));
  size_t* sizes = calloc(count, sizeof(size_t));
  for (int i = 0; i < count; ++i) {
    int code, bits, ndim;
    if (fscanf(spec, "%d %d %d", &code, &bits, &ndim) != 3) return 2;
    int64_t* shape = calloc(ndim, sizeof(int64_t));
    size_t size = bits / 8;
    for (int d = 0; d < ndim; ++d) {
      long long extent;
      if (fscanf(spec, "%lld", &extent) != 1) return 2;
      shape[d] = extent;
      size *= (size_t)extent;
    }
    sizes[i] = size;
    tensors[i].data = aligned_alloc(64, (size + 63) / 64 * 64);
    if (fread(tensors[i].data, 1, size, data) != size) return 3;
    tensors[i].device.device_type = kDLCPU;
    tensors[i].ndim = ndim;
    tensors[i].dtype.code = (uint8_t)code;
    tensors[i].dtype.bits = (uint8_t)bits;
    tensors[i].dtype.lanes = 1;
    tensors[i].shape = shape;
    args[i].type_index = kTVMFFIDLTensorPtr;
    args[i].v_ptr = &tensors[i];
  }
  fclose(data);
  TVMFFIAny result;
  memset(&result, 0, sizeof(result));
  if (__tvm_ffi_main(NULL, args, count, &result) != 0) return 4;
  FILE* out = fopen(argv[2], "wb");
  for (int i = 0; i < count; ++i) fwrite(tensors[i].data, 1, sizes[i], out);
  fclose(out);
  return 0;
}
"""


def run_under_qemu(
    func: tvm.tirx.PrimFunc,
    arrays: list[np.ndarray],
    workdir: Path,
    target: Target = DOTPROD_TARGET,
) -> tuple[list[np.ndarray], str]:
    """`func` compiled for `target`, called under qemu-aarch64 on `arrays`: the arrays after
    the call, and the kernel's assembly."""
    library = tvm.compile(tvm.IRModule({"main": func}), target=target)
    kernel = workdir / "kernel.o"
    library.mod.write_to_file(str(kernel))
    source = workdir / "runner.c"
    source.write_text(_RUNNER)
    runner = workdir / "runner"
    include = Path(tvm_ffi.__file__).parent / "include"
    compile_command = [TOOLS[0], "-O1", "-static", "-I", str(include), str(source), str(kernel)]
    subprocess.run([*compile_command, "-lm", "-o", str(runner)], check=True)
    spec_lines = [str(len(arrays))]
    for array in arrays:
        code = _DTYPE_CODES[array.dtype.kind]
        spec_lines.append(
            " ".join(map(str, [code, array.dtype.itemsize * 8, array.ndim, *array.shape]))
        )
    (workdir / "spec.txt").write_text("\n".join(spec_lines) + "\n")
    data = workdir / "data.bin"
    data.write_bytes(b"".join(np.ascontiguousarray(a).tobytes() for a in arrays))
    subprocess.run([TOOLS[1], str(runner), str(workdir / "spec.txt"), str(data)], check=True)
    raw, results, start = data.read_bytes(), [], 0
    for array in arrays:
        results.append(np.frombuffer(raw, array.dtype, array.size, start).reshape(array.shape))
        start += array.nbytes
    return results, library.mod.inspect_source("asm")
