// The engine behind the C ABI: a loaded bundle, its tokenizer, and a scheduler thread that
// runs every submitted request batched with the others.
//
// Why one worker thread: a CompiledModel (Relax VM and KV cache) may be driven by one thread
// only, while callers submit, poll and cancel from any thread. Each step the worker admits
// waiting requests (up to max_num_seqs), then either prefills one chunk of one new prompt or
// decodes one token for every running request in a single batched forward, and samples with
// the artifact's compiled `sample`. Callers only touch request state under the engine mutex.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "bpe_tokenizer.h"
#include "bundle.h"
#include "compiled_model.h"
#include "vllm_tvm.h"

namespace vllm_tvm_embed {

// What a request has produced so far.
struct RequestProgress {
  std::vector<int32_t> output;
  size_t prompt_tokens = 0;
  vllm_tvm_finish_reason finish = VLLM_TVM_FINISH_NONE;
};

class Engine {
 public:
  explicit Engine(const vllm_tvm_model_params& params);
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  uint64_t Submit(const std::string& prompt, const vllm_tvm_sampling_params& params);
  // The request's progress once it has more than `seen` tokens or has finished (blocking).
  RequestProgress WaitForProgress(uint64_t id, size_t seen);
  // The request's progress now; a finished request is forgotten after this returns it.
  RequestProgress Poll(uint64_t id);
  void Cancel(uint64_t id);

  const BpeTokenizer& tokenizer() const { return tokenizer_; }
  std::string DiagnosticsJson() const;

 private:
  struct Request;
  void Loop();
  void Step(std::unique_lock<std::mutex>& lock);
  void Finish(const std::shared_ptr<Request>& request, vllm_tvm_finish_reason reason);
  void Append(const std::shared_ptr<Request>& request, int32_t token);
  std::shared_ptr<Request> Find(uint64_t id) const;

  ModelBundle bundle_;
  BpeTokenizer tokenizer_;
  int64_t max_num_seqs_;
  int64_t max_model_len_;
  CompiledModel model_;

  mutable std::mutex mutex_;
  std::condition_variable work_ready_;
  std::condition_variable progress_;
  std::map<uint64_t, std::shared_ptr<Request>> requests_;
  std::deque<std::shared_ptr<Request>> waiting_;
  std::vector<std::shared_ptr<Request>> running_;
  uint64_t next_id_ = 1;
  bool stopping_ = false;
  std::string failure_;  // set when a forward failed; every later call reports it
  std::thread worker_;
};

}  // namespace vllm_tvm_embed
