// A loaded artifact on the CPU or a CUDA device: the Relax VM over model.so, its parameters, its paged KV
// cache, and the compiled sampling function — the C++ twin of the Python ModelRunner.
//
// Why here: the artifact's contract (embed / prefill / decode / decode_single /
// create_kv_cache / sample, and the vm.builtin.kv_state_* calls on the cache) is the same
// whichever language drives it, so the C library runs exactly the compiled code Python runs.
// Only one thread (the scheduler's) may call a CompiledModel at a time.
#pragma once

#include <tvm/ffi/function.h>
#include <tvm/ffi/container/tensor.h>
#include <tvm/ffi/extra/module.h>

#include <cstdint>
#include <vector>

#include "bundle.h"

namespace vllm_tvm_embed {

// Per-row parameters of the compiled `sample` function.
struct SamplingRow {
  float temperature = 0.0f;
  int32_t top_k = 0;
  float top_p = 1.0f;
  float min_p = 0.0f;
  uint32_t key = 0;
};

class CompiledModel {
 public:
  // Loads model.so and the parameters of `bundle`; the KV cache holds `max_num_seqs` sequences
  // of up to `max_model_len` tokens each.
  CompiledModel(const ModelBundle& bundle, int64_t max_num_seqs, int64_t max_model_len);

  void AddSequence(int64_t seq_id);
  void RemoveSequence(int64_t seq_id);

  // Appends `tokens` (at most prefill_chunk_size) to sequence `seq_id`; the logits row of the
  // last token, [1, vocab] float32 on the model's device.
  tvm::ffi::Tensor Prefill(int64_t seq_id, const std::vector<int32_t>& tokens);
  // One token per sequence; logits [batch, vocab].
  tvm::ffi::Tensor Decode(const std::vector<int64_t>& seq_ids,
                              const std::vector<int32_t>& tokens);
  // One token per row of `logits`, drawn by the compiled `sample` (temperature 0: argmax).
  std::vector<int32_t> Sample(const tvm::ffi::Tensor& logits,
                              const std::vector<SamplingRow>& rows);

  int64_t prefill_chunk_size() const { return prefill_chunk_size_; }

 private:
  // The embeddings of `tokens`, viewed as `shape` ([batch, tokens, hidden]).
  tvm::ffi::Tensor Embed(const std::vector<int32_t>& tokens, const std::vector<int64_t>& shape);
  tvm::ffi::Tensor Logits(const tvm::ffi::Any& result, int64_t rows) const;
  // A host tensor as the compiled functions take it: copied to a CUDA device, as is on the CPU.
  tvm::ffi::Tensor OnDevice(const tvm::ffi::Tensor& host) const;

  DLDevice device_;
  tvm::ffi::Module vm_;
  int64_t vocab_size_;
  int64_t hidden_size_;
  int64_t prefill_chunk_size_;
  tvm::ffi::Array<tvm::ffi::Tensor> params_;
  tvm::ffi::Any kv_cache_;
  tvm::ffi::Function embed_, prefill_, decode_, decode_single_, sample_;
  tvm::ffi::Function kv_add_, kv_remove_, kv_begin_, kv_end_;
};

}  // namespace vllm_tvm_embed
