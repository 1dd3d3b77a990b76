#include "engine.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
#include <sstream>

#include "error.h"

namespace vllm_tvm_embed {

struct Engine::Request {
  uint64_t id;
  std::vector<int32_t> prompt;
  vllm_tvm_sampling_params params;
  uint64_t seed;
  size_t computed_prompt = 0;  // prompt tokens already in the KV cache
  bool in_kv_cache = false;
  bool cancel_requested = false;
  RequestProgress progress;
};

namespace {

int64_t Chosen(int32_t requested, int64_t bundle_default) {
  return requested > 0 ? requested : bundle_default;
}

int64_t CheckedModelLen(int32_t requested, const ModelBundle& bundle) {
  int64_t chosen = Chosen(requested, bundle.max_model_len);
  if (chosen > bundle.context_limit) {
    throw EmbedError(VLLM_TVM_ERR_INVALID_ARGUMENT,
                     "max_model_len " + std::to_string(chosen) +
                         " exceeds the model's context limit " +
                         std::to_string(bundle.context_limit));
  }
  return chosen;
}

void CheckSampling(const vllm_tvm_sampling_params& params) {
  const auto invalid = [](const std::string& what) {
    throw EmbedError(VLLM_TVM_ERR_INVALID_ARGUMENT, what);
  };
  if (params.max_tokens < 1) invalid("max_tokens must be at least 1");
  if (!std::isfinite(params.temperature) || params.temperature < 0.0f) {
    invalid("temperature must be a finite value >= 0");
  }
  if (!(params.top_p > 0.0f && params.top_p <= 1.0f)) invalid("top_p must be in (0, 1]");
  if (!(params.min_p >= 0.0f && params.min_p <= 1.0f)) invalid("min_p must be in [0, 1]");
  if (params.top_k < 0) invalid("top_k must be >= 0 (0: off)");
}

// The noise key of a request's `index`-th sampled token (splitmix64 of seed and index).
uint32_t SampleKey(uint64_t seed, uint64_t index) {
  uint64_t z = seed + 0x9E3779B97F4A7C15ull * (index + 1);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return static_cast<uint32_t>((z ^ (z >> 31)) & 0xFFFFFFFFu);
}

std::string JsonString(const std::string& text) {
  std::string out = "\"";
  for (char c : text) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      char escaped[8];
      std::snprintf(escaped, sizeof(escaped), "\\u%04x", c);
      out += escaped;
    } else {
      out += c;
    }
  }
  return out + "\"";
}

}  // namespace

Engine::Engine(const vllm_tvm_model_params& params)
    : bundle_(LoadModelBundle(params.model_path)),
      tokenizer_(bundle_.tokenizer_path, bundle_.bos_token_id, bundle_.add_bos_token),
      max_num_seqs_(Chosen(params.max_num_seqs, bundle_.max_num_seqs)),
      max_model_len_(CheckedModelLen(params.max_model_len, bundle_)),
      model_(bundle_, max_num_seqs_, max_model_len_) {
  worker_ = std::thread([this] { Loop(); });
}

Engine::~Engine() {
  {
    std::lock_guard<std::mutex> guard(mutex_);
    stopping_ = true;
  }
  work_ready_.notify_all();
  worker_.join();
}

uint64_t Engine::Submit(const std::string& prompt, const vllm_tvm_sampling_params& params) {
  CheckSampling(params);
  auto request = std::make_shared<Request>();
  request->prompt = tokenizer_.Encode(prompt, true);
  if (request->prompt.empty()) {
    throw EmbedError(VLLM_TVM_ERR_INVALID_ARGUMENT, "the prompt has no tokens");
  }
  if (static_cast<int64_t>(request->prompt.size()) >= max_model_len_) {
    throw EmbedError(VLLM_TVM_ERR_PROMPT_TOO_LONG,
                     "prompt of " + std::to_string(request->prompt.size()) +
                         " tokens leaves no room to generate within max_model_len " +
                         std::to_string(max_model_len_));
  }
  request->params = params;
  request->seed = params.seed >= 0 ? static_cast<uint64_t>(params.seed)
                                   : (uint64_t{std::random_device{}()} << 32) ^
                                         std::random_device{}();
  request->progress.prompt_tokens = request->prompt.size();
  std::lock_guard<std::mutex> guard(mutex_);
  if (!failure_.empty()) throw EmbedError(VLLM_TVM_ERR_RUNTIME, failure_);
  request->id = next_id_++;
  requests_[request->id] = request;
  waiting_.push_back(request);
  work_ready_.notify_one();
  return request->id;
}

std::shared_ptr<Engine::Request> Engine::Find(uint64_t id) const {
  auto found = requests_.find(id);
  if (found == requests_.end()) {
    throw EmbedError(VLLM_TVM_ERR_NOT_FOUND, "no request with id " + std::to_string(id));
  }
  return found->second;
}

RequestProgress Engine::WaitForProgress(uint64_t id, size_t seen) {
  std::unique_lock<std::mutex> lock(mutex_);
  std::shared_ptr<Request> request = Find(id);
  progress_.wait(lock, [&] {
    return request->progress.output.size() > seen ||
           request->progress.finish != VLLM_TVM_FINISH_NONE || !failure_.empty();
  });
  if (!failure_.empty() && request->progress.finish == VLLM_TVM_FINISH_NONE) {
    throw EmbedError(VLLM_TVM_ERR_RUNTIME, failure_);
  }
  return request->progress;
}

RequestProgress Engine::Poll(uint64_t id) {
  std::lock_guard<std::mutex> guard(mutex_);
  std::shared_ptr<Request> request = Find(id);
  if (!failure_.empty() && request->progress.finish == VLLM_TVM_FINISH_NONE) {
    requests_.erase(id);
    throw EmbedError(VLLM_TVM_ERR_RUNTIME, failure_);
  }
  if (request->progress.finish != VLLM_TVM_FINISH_NONE) requests_.erase(id);
  return request->progress;
}

void Engine::Cancel(uint64_t id) {
  std::lock_guard<std::mutex> guard(mutex_);
  Find(id)->cancel_requested = true;
  work_ready_.notify_one();
}

void Engine::Loop() {
  std::unique_lock<std::mutex> lock(mutex_);
  while (true) {
    work_ready_.wait(lock, [&] { return stopping_ || !waiting_.empty() || !running_.empty(); });
    if (stopping_) return;
    try {
      Step(lock);
    } catch (const std::exception& error) {
      failure_ = std::string("model step failed: ") + error.what();
      waiting_.clear();
      running_.clear();
      progress_.notify_all();
      work_ready_.wait(lock, [&] { return stopping_; });
      return;
    }
  }
}

void Engine::Finish(const std::shared_ptr<Request>& request, vllm_tvm_finish_reason reason) {
  request->progress.finish = reason;
  if (request->in_kv_cache) {
    model_.RemoveSequence(static_cast<int64_t>(request->id));
    request->in_kv_cache = false;
  }
  running_.erase(std::remove(running_.begin(), running_.end(), request), running_.end());
  waiting_.erase(std::remove(waiting_.begin(), waiting_.end(), request), waiting_.end());
}

void Engine::Append(const std::shared_ptr<Request>& request, int32_t token) {
  RequestProgress& progress = request->progress;
  progress.output.push_back(token);
  const auto& eos = bundle_.eos_token_ids;
  if (!request->params.ignore_eos && std::find(eos.begin(), eos.end(), token) != eos.end()) {
    Finish(request, VLLM_TVM_FINISH_STOP);
  } else if (static_cast<int64_t>(progress.output.size()) >= request->params.max_tokens ||
             static_cast<int64_t>(request->prompt.size() + progress.output.size()) >=
                 max_model_len_) {
    Finish(request, VLLM_TVM_FINISH_LENGTH);
  }
}

void Engine::Step(std::unique_lock<std::mutex>& lock) {
  for (const auto& request : std::vector<std::shared_ptr<Request>>(running_)) {
    if (request->cancel_requested) Finish(request, VLLM_TVM_FINISH_ABORT);
  }
  for (const auto& request : std::deque<std::shared_ptr<Request>>(waiting_)) {
    if (request->cancel_requested) Finish(request, VLLM_TVM_FINISH_ABORT);
  }
  while (!waiting_.empty() && static_cast<int64_t>(running_.size()) < max_num_seqs_) {
    std::shared_ptr<Request> request = waiting_.front();
    waiting_.pop_front();
    model_.AddSequence(static_cast<int64_t>(request->id));
    request->in_kv_cache = true;
    running_.push_back(request);
  }
  progress_.notify_all();
  if (running_.empty()) return;

  const auto row_of = [](const Request& request) {
    const vllm_tvm_sampling_params& p = request.params;
    return SamplingRow{p.temperature, p.top_k, p.top_p, p.min_p,
                       SampleKey(request.seed, request.progress.output.size())};
  };
  auto prefilling = std::find_if(running_.begin(), running_.end(), [](const auto& request) {
    return request->computed_prompt < request->prompt.size();
  });
  if (prefilling != running_.end()) {
    std::shared_ptr<Request> request = *prefilling;
    size_t start = request->computed_prompt;
    size_t count = std::min<size_t>(request->prompt.size() - start,
                                    static_cast<size_t>(model_.prefill_chunk_size()));
    std::vector<int32_t> chunk(request->prompt.begin() + start,
                               request->prompt.begin() + start + count);
    bool last = start + count == request->prompt.size();
    SamplingRow row = row_of(*request);
    lock.unlock();
    tvm::ffi::Tensor logits = model_.Prefill(static_cast<int64_t>(request->id), chunk);
    std::vector<int32_t> token = last ? model_.Sample(logits, {row}) : std::vector<int32_t>{};
    lock.lock();
    request->computed_prompt += count;
    if (last) Append(request, token[0]);
  } else {
    std::vector<std::shared_ptr<Request>> batch = running_;
    std::vector<int64_t> seq_ids;
    std::vector<int32_t> tokens;
    std::vector<SamplingRow> rows;
    for (const auto& request : batch) {
      seq_ids.push_back(static_cast<int64_t>(request->id));
      tokens.push_back(request->progress.output.back());
      rows.push_back(row_of(*request));
    }
    lock.unlock();
    tvm::ffi::Tensor logits = model_.Decode(seq_ids, tokens);
    std::vector<int32_t> sampled = model_.Sample(logits, rows);
    lock.lock();
    for (size_t i = 0; i < batch.size(); ++i) Append(batch[i], sampled[i]);
  }
  progress_.notify_all();
}

std::string Engine::DiagnosticsJson() const {
  std::ostringstream json;
  json << "{\"abi_version\": " << VLLM_TVM_ABI_VERSION
       << ", \"architecture\": " << JsonString(bundle_.architecture)
       << ", \"target\": " << JsonString(bundle_.target)
       << ", \"dtype\": " << JsonString(bundle_.dtype)
       << ", \"tvm_version\": " << JsonString(bundle_.tvm_version)
       << ", \"vocab_size\": " << bundle_.vocab_size << ", \"max_model_len\": " << max_model_len_
       << ", \"max_num_seqs\": " << max_num_seqs_
       << ", \"model_path\": " << JsonString(bundle_.directory) << "}";
  return json.str();
}

}  // namespace vllm_tvm_embed
