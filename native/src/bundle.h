// The model directory of an embedding bundle: what `vllm-tvm embed` wrote, checked.
//
// Why: the library must trust nothing it loads. Every file the artifact manifest
// (manifest.json) and the embedding manifest (embed.json) list is hashed and compared with
// its recorded sha256 before model.so is dlopen'ed or weights are read; a missing, extra-short
// or swapped file is refused with VLLM_TVM_ERR_BUNDLE naming it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace vllm_tvm_embed {

struct ParamSlice {
  std::string name;
  std::string dtype;
  std::vector<int64_t> shape;
  uint64_t offset = 0;
  uint64_t nbytes = 0;
};

struct ModelBundle {
  std::string directory;
  std::string library_path;  // model.so
  std::string params_path;   // raw parameter bytes, laid out by `params`
  std::string tokenizer_path;
  std::string architecture;
  std::string target;
  std::string dtype;
  std::string tvm_version;
  std::vector<std::string> functions;
  int64_t vocab_size = 0;
  int64_t hidden_size = 0;
  int64_t context_limit = 0;  // the model's own limit (positions, sliding window)
  int64_t max_model_len = 0;  // the bundle's default context window
  int64_t max_num_seqs = 0;   // the bundle's default batch
  int64_t prefill_chunk_size = 0;
  std::vector<int32_t> eos_token_ids;
  int32_t bos_token_id = -1;  // -1: none
  bool add_bos_token = false;
  std::vector<ParamSlice> params;

  bool HasFunction(const std::string& name) const;
};

// Reads and verifies the bundle model directory `directory`.
ModelBundle LoadModelBundle(const std::string& directory);

}  // namespace vllm_tvm_embed
