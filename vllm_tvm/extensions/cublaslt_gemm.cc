// cuBLASLt GEMM for the compiled models' NT matmuls (y = x @ w^T, w kept [out, in]).
//
// Why it exists: apache-tvm 0.27 ships no cuBLAS/CUTLASS backend and its stock GPU matmul
// schedules use no tensor cores on Hopper, so prefill and batched decode ran at a few percent
// of the GPU's matrix throughput. This small tvm-ffi extension registers one global function
// that the Relax programs call through `call_dps_packed` (see compiler/cublas_dispatch.py).
//
// It is built without cuBLAS or CUDA headers: the handful of cuBLASLt entry points and enum
// values it needs are declared below from the public C API, and libcublasLt is opened at run
// time (`vllm_tvm.cublaslt.init`), so artifacts build on machines without cuBLAS and the
// serving machine supplies its own copy. No CUDA runtime is linked either: the device
// workspace is a tensor handed over at init and the stream is the one TVM launches on.
#include <dlfcn.h>
#include <tvm/ffi/container/tensor.h>
#include <tvm/ffi/error.h>
#include <tvm/ffi/extra/c_env_api.h>
#include <tvm/ffi/function.h>
#include <tvm/ffi/reflection/registry.h>
#include <tvm/ffi/string.h>

#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <tuple>

namespace {

// ---- the slice of the cuBLASLt C API used here (values from cublasLt.h / library_types.h) ----
using Status = int;
constexpr Status kSuccess = 0;
using Handle = void*;
using MatmulDesc = void*;
using MatrixLayout = void*;
using Preference = void*;
constexpr int kComputeF32 = 68;       // CUBLAS_COMPUTE_32F
constexpr int kDataF32 = 0;           // CUDA_R_32F
constexpr int kDataF16 = 2;           // CUDA_R_16F
constexpr int kDataBF16 = 14;         // CUDA_R_16BF
constexpr int kDataF8E4M3 = 28;       // CUDA_R_8F_E4M3
constexpr int kDescTransA = 3;        // CUBLASLT_MATMUL_DESC_TRANSA
constexpr int kDescTransB = 4;        // CUBLASLT_MATMUL_DESC_TRANSB
constexpr int kDescAScalePointer = 17;  // CUBLASLT_MATMUL_DESC_A_SCALE_POINTER
constexpr int kDescBScalePointer = 18;  // CUBLASLT_MATMUL_DESC_B_SCALE_POINTER
constexpr int kDescAScaleMode = 31;     // CUBLASLT_MATMUL_DESC_A_SCALE_MODE
constexpr int kDescBScaleMode = 32;     // CUBLASLT_MATMUL_DESC_B_SCALE_MODE
constexpr int32_t kScaleOuterVec32F = 3;  // CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F
constexpr int kPrefMaxWorkspace = 1;  // CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES
constexpr int32_t kOpN = 0;
constexpr int32_t kOpT = 1;

struct Algo {
  uint64_t data[8];
};
struct HeuristicResult {
  Algo algo;
  size_t workspace_size;
  Status state;
  float waves_count;
  int reserved[4];
};

struct Api {
  Status (*create)(Handle*);
  Status (*desc_create)(MatmulDesc*, int, int);
  Status (*desc_set)(MatmulDesc, int, const void*, size_t);
  Status (*layout_create)(MatrixLayout*, int, uint64_t, uint64_t, int64_t);
  Status (*pref_create)(Preference*);
  Status (*pref_set)(Preference, int, const void*, size_t);
  Status (*heuristic)(Handle, MatmulDesc, MatrixLayout, MatrixLayout, MatrixLayout, MatrixLayout,
                      Preference, int, HeuristicResult*, int*);
  Status (*matmul)(Handle, MatmulDesc, const void*, const void*, MatrixLayout, const void*,
                   MatrixLayout, const void*, const void*, MatrixLayout, void*, MatrixLayout,
                   const Algo*, void*, size_t, void*);
};

// One GEMM shape's descriptors and chosen algorithm, built on first use and kept: prefill
// lengths vary, but each length's plan is reused on every later call.
struct Plan {
  MatmulDesc desc;
  MatrixLayout a, b, c;
  Algo algo;
  size_t workspace_size;
};

// m, n, k, input dtype, output dtype, device
using PlanKey = std::tuple<int64_t, int64_t, int64_t, int, int, int>;

// Where FP8 products take their scales: one float32 per row of each operand (cuBLASLt's
// outer-vector mode), applied to the fp32 accumulator before the output is rounded.
struct Fp8Scales {
  void* weight_rows;  // [n]: the weight's scale per output feature
  void* token_rows;   // [m]: the activation's scale per token
};

struct State {
  std::mutex mutex;
  void* library = nullptr;
  Api api{};
  std::map<int, Handle> handles;              // per device id
  std::map<int, tvm::ffi::Tensor> workspaces;  // per device id
  std::map<PlanKey, Plan> plans;
};

State& state() {
  static State* instance = new State();  // never destroyed: plans outlive static teardown
  return *instance;
}

void check(Status status, const char* what) {
  if (status != kSuccess) {
    TVM_FFI_THROW(RuntimeError) << "cuBLASLt " << what << " failed with status " << status;
  }
}

template <typename Fn>
void bind(void* library, const char* symbol, Fn* out) {
  void* address = dlsym(library, symbol);
  if (address == nullptr) {
    TVM_FFI_THROW(RuntimeError) << "libcublasLt has no symbol " << symbol;
  }
  *out = reinterpret_cast<Fn>(address);
}

// Open libcublasLt at `path` and keep `workspace` (a device byte tensor) for device `device_id`.
void init(const tvm::ffi::String& path, const tvm::ffi::Tensor& workspace) {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  if (s.library == nullptr) {
    void* library = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (library == nullptr) {
      TVM_FFI_THROW(RuntimeError) << "cannot open cuBLASLt library '" << path.c_str()
                                  << "': " << dlerror();
    }
    Api api{};
    bind(library, "cublasLtCreate", &api.create);
    bind(library, "cublasLtMatmulDescCreate", &api.desc_create);
    bind(library, "cublasLtMatmulDescSetAttribute", &api.desc_set);
    bind(library, "cublasLtMatrixLayoutCreate", &api.layout_create);
    bind(library, "cublasLtMatmulPreferenceCreate", &api.pref_create);
    bind(library, "cublasLtMatmulPreferenceSetAttribute", &api.pref_set);
    bind(library, "cublasLtMatmulAlgoGetHeuristic", &api.heuristic);
    bind(library, "cublasLtMatmul", &api.matmul);
    s.library = library;
    s.api = api;
  }
  DLDevice device = workspace.device();
  if (device.device_type != kDLCUDA || workspace.ndim() != 1 || workspace.dtype().bits != 8) {
    TVM_FFI_THROW(ValueError) << "the cuBLASLt workspace must be a 1-D byte tensor on a CUDA device";
  }
  if (s.handles.count(device.device_id) == 0) {
    Handle handle = nullptr;
    check(s.api.create(&handle), "create");
    s.handles[device.device_id] = handle;
  }
  s.workspaces[device.device_id] = workspace;
}

int data_type(const DLDataType& dtype, bool allow_f32) {
  if (dtype.code == kDLBfloat && dtype.bits == 16) return kDataBF16;
  if (dtype.code == kDLFloat && dtype.bits == 16) return kDataF16;
  if (allow_f32 && dtype.code == kDLFloat && dtype.bits == 32) return kDataF32;
  TVM_FFI_THROW(TypeError) << "cuBLASLt GEMM takes float16 or bfloat16 inputs and an output of "
                              "the same type or float32";
}

void set_scales(State& s, const Plan& plan, const Fp8Scales& scales) {
  check(s.api.desc_set(plan.desc, kDescAScalePointer, &scales.weight_rows, sizeof(void*)),
        "set weight scales");
  check(s.api.desc_set(plan.desc, kDescBScalePointer, &scales.token_rows, sizeof(void*)),
        "set token scales");
}

const Plan& plan_for(State& s, Handle handle, const PlanKey& key, size_t workspace_bytes,
                     const Fp8Scales* fp8 = nullptr) {
  auto found = s.plans.find(key);
  if (found != s.plans.end()) return found->second;
  auto [m, n, k, dtype, out_dtype, device] = key;
  // Row-major y[m, n] = x[m, k] . w[n, k]^T is, read column-major, y^T (n x m) =
  // op_T(w as k x n) . (x^T as k x m): A = w transposed, B = x as is, C = y^T with ld n.
  Plan plan{};
  check(s.api.desc_create(&plan.desc, kComputeF32, kDataF32), "matmul descriptor");
  check(s.api.desc_set(plan.desc, kDescTransA, &kOpT, sizeof(kOpT)), "set transa");
  check(s.api.desc_set(plan.desc, kDescTransB, &kOpN, sizeof(kOpN)), "set transb");
  check(s.api.layout_create(&plan.a, dtype, k, n, k), "layout of w");
  check(s.api.layout_create(&plan.b, dtype, k, m, k), "layout of x");
  check(s.api.layout_create(&plan.c, out_dtype, n, m, n), "layout of y");
  if (fp8 != nullptr) {
    check(s.api.desc_set(plan.desc, kDescAScaleMode, &kScaleOuterVec32F, sizeof(int32_t)),
          "set weight scale mode (outer vector; needs cuBLASLt 12.9 or newer)");
    check(s.api.desc_set(plan.desc, kDescBScaleMode, &kScaleOuterVec32F, sizeof(int32_t)),
          "set token scale mode (outer vector; needs cuBLASLt 12.9 or newer)");
    set_scales(s, plan, *fp8);
  }
  Preference preference = nullptr;
  check(s.api.pref_create(&preference), "preference");
  uint64_t max_workspace = workspace_bytes;
  check(s.api.pref_set(preference, kPrefMaxWorkspace, &max_workspace, sizeof(max_workspace)),
        "set workspace limit");
  HeuristicResult result{};
  int found_count = 0;
  check(s.api.heuristic(handle, plan.desc, plan.a, plan.b, plan.c, plan.c, preference, 1, &result,
                        &found_count),
        "heuristic");
  if (found_count == 0) {
    TVM_FFI_THROW(RuntimeError) << "cuBLASLt has no algorithm for m=" << m << " n=" << n
                                << " k=" << k;
  }
  plan.algo = result.algo;
  plan.workspace_size = result.workspace_size;
  return s.plans.emplace(key, plan).first->second;
}

void* address(const tvm::ffi::Tensor& tensor) {
  return static_cast<char*>(tensor.data_ptr()) + tensor.byte_offset();
}

// The shapes of out[..., n] = x[..., k] . w[n, k]^T as (m, n, k); leading dims of x flatten.
std::tuple<int64_t, int64_t, int64_t> nt_shape(const tvm::ffi::Tensor& x, const tvm::ffi::Tensor& w,
                                               const tvm::ffi::Tensor& out) {
  if (!x.IsContiguous() || !w.IsContiguous() || !out.IsContiguous() || w.ndim() != 2) {
    TVM_FFI_THROW(ValueError) << "cuBLASLt GEMM takes contiguous x[..., k], w[n, k], out[..., n]";
  }
  int64_t k = x.shape()[x.ndim() - 1];
  int64_t n = w.shape()[0];
  int64_t m = x.numel() / k;
  if (w.shape()[1] != k || out.shape()[out.ndim() - 1] != n || out.numel() != m * n) {
    TVM_FFI_THROW(ValueError) << "cuBLASLt GEMM shapes do not agree (k=" << k << ", n=" << n
                              << ")";
  }
  return {m, n, k};
}

// Runs one planned product on the device of x, on TVM's stream for that device.
void run(const tvm::ffi::Tensor& x, const tvm::ffi::Tensor& w, const tvm::ffi::Tensor& out,
         int dtype, int out_dtype, const Fp8Scales* fp8) {
  State& s = state();
  auto [m, n, k] = nt_shape(x, w, out);
  int device_id = x.device().device_id;
  std::lock_guard<std::mutex> lock(s.mutex);
  auto handle = s.handles.find(device_id);
  if (handle == s.handles.end()) {
    TVM_FFI_THROW(RuntimeError) << "cuBLASLt is not initialised for cuda:" << device_id
                                << " (vllm_tvm.cublaslt.init was not called)";
  }
  const tvm::ffi::Tensor& workspace = s.workspaces.at(device_id);
  size_t workspace_bytes = static_cast<size_t>(workspace.shape()[0]);
  const Plan& plan = plan_for(s, handle->second, {m, n, k, dtype, out_dtype, device_id},
                              workspace_bytes, fp8);
  if (fp8 != nullptr) set_scales(s, plan, *fp8);
  const float alpha = 1.0f;
  const float beta = 0.0f;
  void* stream = TVMFFIEnvGetStream(kDLCUDA, device_id);
  check(s.api.matmul(handle->second, plan.desc, &alpha, address(w), plan.a, address(x), plan.b,
                     &beta, address(out), plan.c, address(out), plan.c, &plan.algo,
                     address(workspace), plan.workspace_size, stream),
        "matmul");
}

// out[..., n] = x[..., k] . w[n, k]^T accumulated in fp32; leading dims of x are flattened.
void gemm_nt(const tvm::ffi::Tensor& x, const tvm::ffi::Tensor& w, const tvm::ffi::Tensor& out) {
  int dtype = data_type(x.dtype(), false);
  int out_dtype = data_type(out.dtype(), true);
  if (data_type(w.dtype(), false) != dtype) {
    TVM_FFI_THROW(TypeError) << "cuBLASLt GEMM takes x and w of one dtype";
  }
  run(x, w, out, dtype, out_dtype, nullptr);
}

// out[m, n] = x_scale[m] * w_scale[n] * (x[m, k] . w[n, k]^T) with x and w FP8 E4M3 bytes
// (uint8 tensors holding the codes), scales float32, out float16 or bfloat16.
void gemm_fp8_nt(const tvm::ffi::Tensor& x, const tvm::ffi::Tensor& w,
                 const tvm::ffi::Tensor& x_scale, const tvm::ffi::Tensor& w_scale,
                 const tvm::ffi::Tensor& out) {
  for (const tvm::ffi::Tensor* codes : {&x, &w}) {
    if (codes->dtype().bits != 8) {
      TVM_FFI_THROW(TypeError) << "the FP8 GEMM takes 8-bit E4M3 codes for x and w";
    }
  }
  auto [m, n, k] = nt_shape(x, w, out);
  if (k % 16 != 0 || n % 16 != 0) {
    TVM_FFI_THROW(ValueError) << "the FP8 GEMM needs k and n multiples of 16 (k=" << k
                              << ", n=" << n << ")";
  }
  bool f32_scales = x_scale.dtype().code == kDLFloat && x_scale.dtype().bits == 32 &&
                    w_scale.dtype().code == kDLFloat && w_scale.dtype().bits == 32;
  if (!f32_scales || x_scale.numel() != m || w_scale.numel() != n) {
    TVM_FFI_THROW(ValueError) << "the FP8 GEMM takes float32 scales, one per token (" << m
                              << ") and one per weight row (" << n << ")";
  }
  Fp8Scales scales{address(w_scale), address(x_scale)};
  run(x, w, out, kDataF8E4M3, data_type(out.dtype(), false), &scales);
}

}  // namespace

TVM_FFI_STATIC_INIT_BLOCK() {
  tvm::ffi::reflection::GlobalDef()
      .def("vllm_tvm.cublaslt.init", init)
      .def("vllm_tvm.cublaslt.gemm_nt", gemm_nt)
      .def("vllm_tvm.cublaslt.gemm_fp8_nt", gemm_fp8_nt);
}
