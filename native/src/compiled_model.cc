#include "compiled_model.h"

#include <dlfcn.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <cstdlib>
#include <functional>
#include <memory>
#include <new>

#include "error.h"

namespace vllm_tvm_embed {
namespace {

using tvm::ffi::Tensor;

// Tokens per KV page: TVM's paged-attention kernels are generated for 16 (see the Python
// runtime's COMPILED_PAGE_SIZE).
constexpr int64_t kPageSize = 16;
constexpr int kPooledAllocator = 2;

tvm::ffi::Function Global(const char* name) {
  auto function = tvm::ffi::Function::GetGlobal(name);
  if (!function) throw EmbedError(VLLM_TVM_ERR_RUNTIME, std::string("TVM runtime lacks ") + name);
  return *function;
}

tvm::ffi::Function VmFunction(tvm::ffi::Module& vm, const ModelBundle& bundle, const char* name) {
  if (!bundle.HasFunction(name)) {
    throw EmbedError(VLLM_TVM_ERR_UNSUPPORTED,
                     std::string("artifact lacks the compiled function '") + name +
                         "'; recompile it with this version of vllm-tvm");
  }
  auto function = vm->GetFunction(name);
  if (!function) throw EmbedError(VLLM_TVM_ERR_BUNDLE, std::string("model.so lacks ") + name);
  return *function;
}

DLDataType ParseDtype(const std::string& name) {
  if (name == "float32") return DLDataType{kDLFloat, 32, 1};
  if (name == "float16") return DLDataType{kDLFloat, 16, 1};
  if (name == "bfloat16") return DLDataType{kDLBfloat, 16, 1};
  if (name == "int32") return DLDataType{kDLInt, 32, 1};
  if (name == "int8") return DLDataType{kDLInt, 8, 1};
  if (name == "uint8") return DLDataType{kDLUInt, 8, 1};
  if (name == "uint32") return DLDataType{kDLUInt, 32, 1};
  throw EmbedError(VLLM_TVM_ERR_UNSUPPORTED, "parameter dtype '" + name + "' is not supported");
}

// Host memory for tensors, aligned as TVM's CPU kernels expect.
struct AlignedHostAlloc {
  static constexpr size_t kAlignment = 64;
  void AllocData(DLTensor* tensor) {
    size_t bytes = std::max<size_t>(tvm::ffi::GetDataSize(*tensor), 1);
    bytes = (bytes + kAlignment - 1) / kAlignment * kAlignment;
    tensor->data = std::aligned_alloc(kAlignment, bytes);
    if (tensor->data == nullptr) throw std::bad_alloc();
  }
  void FreeData(DLTensor* tensor) { std::free(tensor->data); }
};

Tensor EmptyHostTensor(const std::vector<int64_t>& shape, DLDataType dtype) {
  return Tensor::FromNDAlloc(AlignedHostAlloc(), tvm::ffi::Shape(shape), dtype,
                             DLDevice{kDLCPU, 0});
}

template <typename T>
Tensor HostTensor(const std::vector<T>& values, DLDataType dtype) {
  Tensor tensor = EmptyHostTensor({static_cast<int64_t>(values.size())}, dtype);
  std::memcpy(tensor.data_ptr(), values.data(), values.size() * sizeof(T));
  return tensor;
}

// A contiguous view of `tensor` with another shape of the same number of elements.
Tensor Reshaped(const Tensor& tensor, const std::vector<int64_t>& shape) {
  std::vector<int64_t> strides(shape.size(), 1);
  for (size_t i = shape.size(); i-- > 1;) strides[i - 1] = strides[i] * shape[i];
  return tensor.as_strided(tvm::ffi::Shape(shape), tvm::ffi::Shape(strides));
}

// Where the artifact runs: the CPU for an llvm target, CUDA device 0 for a cuda one.
DLDevice DeviceFor(const ModelBundle& bundle) {
  if (bundle.target.rfind("llvm", 0) == 0) return DLDevice{kDLCPU, 0};
  if (bundle.target.rfind("cuda", 0) == 0) return DLDevice{kDLCUDA, 0};
  throw EmbedError(VLLM_TVM_ERR_UNSUPPORTED, "artifact target '" + bundle.target +
                                                 "' is neither a CPU (llvm) nor a cuda target");
}

// TVM's CUDA device API, libtvm_runtime_cuda.so beside this library (found through its
// $ORIGIN RUNPATH). Loaded only for a CUDA artifact, so that a CUDA bundle's CLI answers
// --help and --version, and reports a missing driver by name, on a machine without one: it
// needs the bundled libcudart.so.13 and the NVIDIA driver's libcuda.so.1.
void LoadCudaRuntime() {
  if (dlopen("libtvm_runtime_cuda.so", RTLD_NOW | RTLD_GLOBAL) == nullptr) {
    const char* reason = dlerror();
    throw EmbedError(VLLM_TVM_ERR_RUNTIME,
                     std::string("cannot load TVM's CUDA runtime (libtvm_runtime_cuda.so; a CUDA "
                                 "bundle needs the NVIDIA driver's libcuda.so.1): ") +
                         (reason ? reason : "unknown error"));
  }
}

}  // namespace

// A copy of the host tensor `host` on `device` (`host` itself on the CPU).
Tensor CompiledModel::OnDevice(const Tensor& host) const {
  if (device_.device_type == kDLCPU) return host;
  static const tvm::ffi::Function alloc = Global("runtime.TVMTensorAllocWithScope");
  static const tvm::ffi::Function copy_from_bytes = Global("runtime.TVMTensorCopyFromBytes");
  std::vector<int64_t> shape(host.shape().begin(), host.shape().end());
  Tensor on_device =
      alloc(tvm::ffi::Shape(shape), host.dtype(), device_, tvm::ffi::Any(nullptr)).cast<Tensor>();
  copy_from_bytes(on_device, const_cast<void*>(host.data_ptr()),
                  static_cast<int64_t>(tvm::ffi::GetDataSize(host.numel(), host.dtype())));
  return on_device;
}

namespace {

tvm::ffi::Array<Tensor> LoadParams(const ModelBundle& bundle,
                                   const std::function<Tensor(const Tensor&)>& to_device) {
  std::unique_ptr<FILE, int (*)(FILE*)> file(std::fopen(bundle.params_path.c_str(), "rb"),
                                             &std::fclose);
  if (!file) throw EmbedError(VLLM_TVM_ERR_BUNDLE, "cannot open " + bundle.params_path);
  tvm::ffi::Array<Tensor> params;
  for (const ParamSlice& slice : bundle.params) {
    DLDataType dtype = ParseDtype(slice.dtype);
    uint64_t elements = 1;
    for (int64_t dim : slice.shape) elements *= static_cast<uint64_t>(dim);
    if (elements * ((dtype.bits + 7) / 8) != slice.nbytes) {
      throw EmbedError(VLLM_TVM_ERR_BUNDLE, "parameter " + slice.name + " has a size that "
                                                "does not match its shape and dtype");
    }
    Tensor tensor = EmptyHostTensor(slice.shape, dtype);
    if (std::fseek(file.get(), static_cast<long>(slice.offset), SEEK_SET) != 0 ||
        std::fread(tensor.data_ptr(), 1, slice.nbytes, file.get()) != slice.nbytes) {
      throw EmbedError(VLLM_TVM_ERR_BUNDLE, "parameter " + slice.name + " lies past the end of " +
                                                bundle.params_path);
    }
    params.push_back(to_device(tensor));
  }
  return params;
}

// The Relax VM of model.so, initialised for `device` (and the CPU as its host).
tvm::ffi::Module LoadVirtualMachine(const ModelBundle& bundle, DLDevice device) {
  if (device.device_type == kDLCUDA) LoadCudaRuntime();
  tvm::ffi::Module library = tvm::ffi::Module::LoadFromFile(bundle.library_path);
  auto load_executable = library->GetFunction("vm_load_executable");
  if (!load_executable) throw EmbedError(VLLM_TVM_ERR_BUNDLE, "model.so is not a Relax VM library");
  tvm::ffi::Module vm = (*load_executable)().cast<tvm::ffi::Module>();
  auto initialize = vm->GetFunction("vm_initialization");
  if (!initialize) throw EmbedError(VLLM_TVM_ERR_RUNTIME, "the Relax VM has no vm_initialization");
  if (device.device_type == kDLCPU) {
    (*initialize)(static_cast<int>(kDLCPU), 0, kPooledAllocator);
  } else {
    (*initialize)(static_cast<int>(device.device_type), device.device_id, kPooledAllocator,
                  static_cast<int>(kDLCPU), 0, kPooledAllocator);
  }

  return vm;
}

}  // namespace

CompiledModel::CompiledModel(const ModelBundle& bundle, int64_t max_num_seqs,
                             int64_t max_model_len)
    : device_(DeviceFor(bundle)),
      vm_(LoadVirtualMachine(bundle, device_)),
      vocab_size_(bundle.vocab_size),
      hidden_size_(bundle.hidden_size),
      prefill_chunk_size_(std::min(bundle.prefill_chunk_size, max_model_len)) {
  embed_ = VmFunction(vm_, bundle, "embed");
  prefill_ = VmFunction(vm_, bundle, "prefill");
  decode_ = VmFunction(vm_, bundle, "decode");
  decode_single_ = bundle.HasFunction("decode_single") ? VmFunction(vm_, bundle, "decode_single")
                                                       : decode_;
  sample_ = VmFunction(vm_, bundle, "sample");
  kv_add_ = Global("vm.builtin.kv_state_add_sequence");
  kv_remove_ = Global("vm.builtin.kv_state_remove_sequence");
  kv_begin_ = Global("vm.builtin.kv_state_begin_forward");
  kv_end_ = Global("vm.builtin.kv_state_end_forward");

  params_ = LoadParams(bundle, [this](const Tensor& host) { return OnDevice(host); });
  tvm::ffi::Function create_kv_cache = VmFunction(vm_, bundle, "create_kv_cache");
  using tvm::ffi::Shape;
  kv_cache_ = create_kv_cache(Shape({max_num_seqs}), Shape({max_num_seqs * max_model_len}),
                              Shape({prefill_chunk_size_}), Shape({kPageSize}), Shape({0}));
}

void CompiledModel::AddSequence(int64_t seq_id) { kv_add_(kv_cache_, seq_id); }

void CompiledModel::RemoveSequence(int64_t seq_id) { kv_remove_(kv_cache_, seq_id); }

Tensor CompiledModel::Embed(const std::vector<int32_t>& tokens,
                            const std::vector<int64_t>& shape) {
  Tensor ids = OnDevice(HostTensor(tokens, DLDataType{kDLInt, 32, 1}));
  return Reshaped(embed_(ids, params_).cast<Tensor>(), shape);
}

Tensor CompiledModel::Logits(const tvm::ffi::Any& result, int64_t rows) const {
  auto outputs = result.cast<tvm::ffi::Array<tvm::ffi::Any>>();
  Tensor logits = outputs[0].cast<Tensor>();
  return Reshaped(logits, {rows, vocab_size_});
}

Tensor CompiledModel::Prefill(int64_t seq_id, const std::vector<int32_t>& tokens) {
  const int64_t length = static_cast<int64_t>(tokens.size());
  if (length == 0 || length > prefill_chunk_size_) {
    throw EmbedError(VLLM_TVM_ERR_RUNTIME, "prefill chunk of " + std::to_string(length) +
                                               " tokens is outside [1, prefill_chunk_size]");
  }
  Tensor hidden = Embed(tokens, {1, length, hidden_size_});
  Tensor positions = OnDevice(HostTensor(
      std::vector<int32_t>{static_cast<int32_t>(length - 1)}, DLDataType{kDLInt, 32, 1}));
  kv_begin_(kv_cache_, tvm::ffi::Shape({seq_id}), tvm::ffi::Shape({length}));
  tvm::ffi::Any result = prefill_(hidden, positions, kv_cache_, params_);
  kv_end_(kv_cache_);
  return Logits(result, 1);
}

Tensor CompiledModel::Decode(const std::vector<int64_t>& seq_ids,
                             const std::vector<int32_t>& tokens) {
  const int64_t batch = static_cast<int64_t>(seq_ids.size());
  Tensor hidden = Embed(tokens, {batch, 1, hidden_size_});
  kv_begin_(kv_cache_, tvm::ffi::Shape(seq_ids), tvm::ffi::Shape(std::vector<int64_t>(batch, 1)));
  tvm::ffi::Function& forward = batch == 1 ? decode_single_ : decode_;
  tvm::ffi::Any result = forward(hidden, kv_cache_, params_);
  kv_end_(kv_cache_);
  return Logits(result, batch);
}

std::vector<int32_t> CompiledModel::Sample(const Tensor& logits,
                                           const std::vector<SamplingRow>& rows) {
  std::vector<float> temperature, top_p, min_p;
  std::vector<int32_t> top_k;
  std::vector<uint32_t> keys;
  for (const SamplingRow& row : rows) {
    temperature.push_back(row.temperature);
    top_k.push_back(static_cast<int32_t>(std::min<int64_t>(row.top_k, vocab_size_)));
    top_p.push_back(row.top_p);
    min_p.push_back(row.min_p);
    keys.push_back(row.key);
  }
  Tensor tokens =
      sample_(logits, OnDevice(HostTensor(temperature, DLDataType{kDLFloat, 32, 1})),
              OnDevice(HostTensor(top_k, DLDataType{kDLInt, 32, 1})),
              OnDevice(HostTensor(top_p, DLDataType{kDLFloat, 32, 1})),
              OnDevice(HostTensor(min_p, DLDataType{kDLFloat, 32, 1})),
              OnDevice(HostTensor(keys, DLDataType{kDLUInt, 32, 1})))
          .cast<Tensor>();
  std::vector<int32_t> result(rows.size());
  if (device_.device_type == kDLCPU) {
    std::memcpy(result.data(), tokens.data_ptr(), result.size() * sizeof(int32_t));
  } else {  // copies back after the device has finished the draw
    static const tvm::ffi::Function copy_to_bytes = Global("runtime.TVMTensorCopyToBytes");
    copy_to_bytes(tokens, static_cast<void*>(result.data()),
                  static_cast<int64_t>(result.size() * sizeof(int32_t)));
  }
  return result;
}

}  // namespace vllm_tvm_embed
