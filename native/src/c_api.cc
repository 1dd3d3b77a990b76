// The exported C functions: argument checks, then the engine, with every exception turned
// into a status code and the thread-local last-error message.
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <memory>
#include <new>
#include <string>
#include <vector>

#include "engine.h"
#include "error.h"
#include "unicode.h"
#include "vllm_tvm.h"

#ifndef VLLM_TVM_VERSION
#error "VLLM_TVM_VERSION must be defined by the build"
#endif

struct vllm_tvm_engine {
  vllm_tvm_embed::Engine engine;
  explicit vllm_tvm_engine(const vllm_tvm_model_params& params) : engine(params) {}
};

namespace vllm_tvm_embed {
namespace {

thread_local std::string last_error;

template <typename Body>
vllm_tvm_status Guarded(Body body) {
  try {
    body();
    last_error.clear();
    return VLLM_TVM_OK;
  } catch (const EmbedError& error) {
    last_error = error.what();
    return error.status();
  } catch (const std::bad_alloc&) {
    last_error = "out of memory";
    return VLLM_TVM_ERR_RUNTIME;
  } catch (const std::exception& error) {
    last_error = error.what();
    return VLLM_TVM_ERR_RUNTIME;
  } catch (...) {
    last_error = "unknown error";
    return VLLM_TVM_ERR_RUNTIME;
  }
}

void Require(bool condition, const char* message) {
  if (!condition) throw EmbedError(VLLM_TVM_ERR_INVALID_ARGUMENT, message);
}

char* CopyString(const std::string& text) {
  char* copy = static_cast<char*>(std::malloc(text.size() + 1));
  if (copy == nullptr) throw std::bad_alloc();
  std::memcpy(copy, text.c_str(), text.size() + 1);
  return copy;
}

int32_t* CopyIds(const std::vector<int32_t>& ids) {
  int32_t* copy = static_cast<int32_t*>(std::malloc((ids.size() + 1) * sizeof(int32_t)));
  if (copy == nullptr) throw std::bad_alloc();
  std::memcpy(copy, ids.data(), ids.size() * sizeof(int32_t));
  return copy;
}

void FillCompletion(const Engine& engine, const RequestProgress& progress,
                    vllm_tvm_completion* out) {
  std::unique_ptr<char, void (*)(void*)> text(CopyString(engine.tokenizer().Decode(progress.output)),
                                               &std::free);
  out->token_ids = CopyIds(progress.output);
  out->text = text.release();
  out->num_tokens = progress.output.size();
  out->prompt_tokens = progress.prompt_tokens;
  out->finish_reason = progress.finish;
}

// Runs one request to its end, handing each new token to `callback` (when set).
void Generate(vllm_tvm_engine* handle, const char* prompt, const vllm_tvm_sampling_params* params,
              vllm_tvm_token_callback callback, void* user_data, vllm_tvm_completion* out) {
  Require(handle != nullptr, "engine is NULL");
  Require(prompt != nullptr, "prompt is NULL");
  Require(params != nullptr, "sampling params are NULL");
  Require(out != nullptr, "completion output is NULL");
  *out = vllm_tvm_completion{};
  Engine& engine = handle->engine;
  uint64_t id = engine.Submit(prompt, *params);
  size_t seen = 0, emitted_bytes = 0;
  size_t stopped_at = 0;  // tokens delivered when the callback asked to stop (0: it did not)
  RequestProgress progress;
  do {
    progress = engine.WaitForProgress(id, seen);
    for (; callback != nullptr && stopped_at == 0 && seen < progress.output.size(); ++seen) {
      std::vector<int32_t> prefix(progress.output.begin(), progress.output.begin() + seen + 1);
      std::string bytes = engine.tokenizer().DecodeBytes(prefix);
      size_t complete = CompleteUtf8Prefix(bytes);
      std::string piece = bytes.substr(emitted_bytes, complete - emitted_bytes);
      emitted_bytes = std::max(emitted_bytes, complete);
      if (callback(progress.output[seen], piece.c_str(), user_data) != 0) {
        stopped_at = seen + 1;
        engine.Cancel(id);
      }
    }
    seen = progress.output.size();
  } while (progress.finish == VLLM_TVM_FINISH_NONE);
  progress = engine.Poll(id);
  if (stopped_at != 0) {
    // The worker may have run ahead of the callback: the result ends where the caller stopped.
    progress.output.resize(std::min(progress.output.size(), stopped_at));
    progress.finish = VLLM_TVM_FINISH_ABORT;
  }
  FillCompletion(engine, progress, out);
}

}  // namespace
}  // namespace vllm_tvm_embed

using vllm_tvm_embed::EmbedError;
using vllm_tvm_embed::Guarded;
using vllm_tvm_embed::Require;

extern "C" {

vllm_tvm_model_params vllm_tvm_model_params_default(void) {
  return vllm_tvm_model_params{nullptr, 0, 0};
}

vllm_tvm_sampling_params vllm_tvm_sampling_params_default(void) {
  return vllm_tvm_sampling_params{16, 1.0f, 0, 1.0f, 0.0f, -1, 0};
}

vllm_tvm_status vllm_tvm_engine_load(const vllm_tvm_model_params* params,
                                     vllm_tvm_engine** engine) {
  return Guarded([&] {
    Require(engine != nullptr, "engine output is NULL");
    *engine = nullptr;
    Require(params != nullptr, "model params are NULL");
    Require(params->model_path != nullptr, "model_path is NULL");
    Require(params->max_num_seqs >= 0 && params->max_model_len >= 0,
            "max_num_seqs and max_model_len must be >= 0 (0: the bundle's default)");
    *engine = new vllm_tvm_engine(*params);
  });
}

void vllm_tvm_engine_free(vllm_tvm_engine* engine) { delete engine; }

vllm_tvm_status vllm_tvm_complete(vllm_tvm_engine* engine, const char* prompt,
                                  const vllm_tvm_sampling_params* params,
                                  vllm_tvm_completion* out) {
  return Guarded([&] { vllm_tvm_embed::Generate(engine, prompt, params, nullptr, nullptr, out); });
}

vllm_tvm_status vllm_tvm_complete_stream(vllm_tvm_engine* engine, const char* prompt,
                                         const vllm_tvm_sampling_params* params,
                                         vllm_tvm_token_callback callback, void* user_data,
                                         vllm_tvm_completion* out) {
  return Guarded([&] {
    Require(callback != nullptr, "callback is NULL");
    vllm_tvm_embed::Generate(engine, prompt, params, callback, user_data, out);
  });
}

vllm_tvm_status vllm_tvm_submit(vllm_tvm_engine* engine, const char* prompt,
                                const vllm_tvm_sampling_params* params, uint64_t* request_id) {
  return Guarded([&] {
    Require(engine != nullptr && prompt != nullptr && params != nullptr && request_id != nullptr,
            "engine, prompt, params and request_id must not be NULL");
    *request_id = engine->engine.Submit(prompt, *params);
  });
}

vllm_tvm_status vllm_tvm_poll(vllm_tvm_engine* engine, uint64_t request_id, int* finished,
                              vllm_tvm_completion* out) {
  return Guarded([&] {
    Require(engine != nullptr && finished != nullptr && out != nullptr,
            "engine, finished and out must not be NULL");
    *finished = 0;
    *out = vllm_tvm_completion{};
    vllm_tvm_embed::RequestProgress progress = engine->engine.Poll(request_id);
    if (progress.finish == VLLM_TVM_FINISH_NONE) return;
    vllm_tvm_embed::FillCompletion(engine->engine, progress, out);
    *finished = 1;
  });
}

vllm_tvm_status vllm_tvm_cancel(vllm_tvm_engine* engine, uint64_t request_id) {
  return Guarded([&] {
    Require(engine != nullptr, "engine is NULL");
    engine->engine.Cancel(request_id);
  });
}

vllm_tvm_status vllm_tvm_tokenize(vllm_tvm_engine* engine, const char* text, int add_special,
                                  int32_t** token_ids, size_t* num_tokens) {
  return Guarded([&] {
    Require(engine != nullptr && text != nullptr && token_ids != nullptr && num_tokens != nullptr,
            "engine, text, token_ids and num_tokens must not be NULL");
    std::vector<int32_t> ids = engine->engine.tokenizer().Encode(text, add_special != 0);
    *token_ids = vllm_tvm_embed::CopyIds(ids);
    *num_tokens = ids.size();
  });
}

vllm_tvm_status vllm_tvm_detokenize(vllm_tvm_engine* engine, const int32_t* token_ids,
                                    size_t num_tokens, char** text) {
  return Guarded([&] {
    Require(engine != nullptr && text != nullptr, "engine and text must not be NULL");
    Require(token_ids != nullptr || num_tokens == 0, "token_ids is NULL");
    std::vector<int32_t> ids(token_ids, token_ids + num_tokens);
    *text = vllm_tvm_embed::CopyString(engine->engine.tokenizer().Decode(ids));
  });
}

void vllm_tvm_completion_free(vllm_tvm_completion* completion) {
  if (completion == nullptr) return;
  std::free(completion->text);
  std::free(completion->token_ids);
  *completion = vllm_tvm_completion{};
}

void vllm_tvm_tokens_free(int32_t* token_ids) { std::free(token_ids); }

void vllm_tvm_string_free(char* text) { std::free(text); }

const char* vllm_tvm_last_error(void) { return vllm_tvm_embed::last_error.c_str(); }

const char* vllm_tvm_version(void) { return VLLM_TVM_VERSION; }

int32_t vllm_tvm_abi_version(void) { return VLLM_TVM_ABI_VERSION; }

const char* vllm_tvm_status_name(vllm_tvm_status status) {
  switch (status) {
    case VLLM_TVM_OK: return "VLLM_TVM_OK";
    case VLLM_TVM_ERR_INVALID_ARGUMENT: return "VLLM_TVM_ERR_INVALID_ARGUMENT";
    case VLLM_TVM_ERR_BUNDLE: return "VLLM_TVM_ERR_BUNDLE";
    case VLLM_TVM_ERR_PROMPT_TOO_LONG: return "VLLM_TVM_ERR_PROMPT_TOO_LONG";
    case VLLM_TVM_ERR_RUNTIME: return "VLLM_TVM_ERR_RUNTIME";
    case VLLM_TVM_ERR_NOT_FOUND: return "VLLM_TVM_ERR_NOT_FOUND";
    case VLLM_TVM_ERR_UNSUPPORTED: return "VLLM_TVM_ERR_UNSUPPORTED";
  }
  return "VLLM_TVM_ERR_UNKNOWN";
}

vllm_tvm_status vllm_tvm_diagnostics(vllm_tvm_engine* engine, char** json) {
  return Guarded([&] {
    Require(engine != nullptr && json != nullptr, "engine and json must not be NULL");
    *json = vllm_tvm_embed::CopyString(engine->engine.DiagnosticsJson());
  });
}

}  // extern "C"
