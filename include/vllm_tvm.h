/*
 * vllm_tvm.h: the flat C ABI of libvllm_tvm, a vllm-tvm compiled model inside a C program.
 *
 * Shaped like the reference engine's vllm.h (lifecycle, blocking and streaming completion,
 * non-blocking concurrent requests, memory helpers, diagnostics) so applications that load
 * one through dlopen/FFI can load the other. No function throws or aborts on bad input:
 * each returns a vllm_tvm_status and leaves a message in vllm_tvm_last_error() (per thread).
 * Everything the library allocates for the caller is released with a *_free function.
 */
#ifndef VLLM_TVM_H
#define VLLM_TVM_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(_WIN32)
#define VLLM_TVM_API __declspec(dllexport)
#else
#define VLLM_TVM_API __attribute__((visibility("default")))
#endif

/* Bumped whenever a struct layout or a function signature changes. */
#define VLLM_TVM_ABI_VERSION 1

typedef enum vllm_tvm_status {
  VLLM_TVM_OK = 0,
  VLLM_TVM_ERR_INVALID_ARGUMENT = 1, /* NULL pointer, bad sampling value, unknown id */
  VLLM_TVM_ERR_BUNDLE = 2,           /* missing, malformed or tampered bundle */
  VLLM_TVM_ERR_PROMPT_TOO_LONG = 3,  /* prompt + max_tokens past the context window */
  VLLM_TVM_ERR_RUNTIME = 4,          /* the TVM runtime failed while running the model */
  VLLM_TVM_ERR_NOT_FOUND = 5,        /* no such request id */
  VLLM_TVM_ERR_UNSUPPORTED = 6       /* a tokenizer or artifact feature this build lacks */
} vllm_tvm_status;

typedef enum vllm_tvm_finish_reason {
  VLLM_TVM_FINISH_NONE = 0,   /* still running */
  VLLM_TVM_FINISH_STOP = 1,   /* an end-of-sequence token */
  VLLM_TVM_FINISH_LENGTH = 2, /* max_tokens or the context window */
  VLLM_TVM_FINISH_ABORT = 3   /* cancelled, or stopped by a stream callback */
} vllm_tvm_finish_reason;

typedef struct vllm_tvm_engine vllm_tvm_engine;

typedef struct vllm_tvm_model_params {
  const char* model_path; /* bundle's model directory (the one holding embed.json) */
  int32_t max_num_seqs;   /* requests decoded together; 0: the bundle's default */
  int32_t max_model_len;  /* context window in tokens; 0: the bundle's default */
} vllm_tvm_model_params;

typedef struct vllm_tvm_sampling_params {
  int32_t max_tokens; /* tokens to generate, >= 1 */
  float temperature;  /* 0 means greedy */
  int32_t top_k;      /* 0: off; negative values are refused */
  float top_p;        /* in (0, 1]; 1: off */
  float min_p;        /* in [0, 1]; 0: off */
  int64_t seed;       /* < 0: a fresh random seed per request */
  int32_t ignore_eos; /* nonzero: do not stop at end-of-sequence tokens */
} vllm_tvm_sampling_params;

typedef struct vllm_tvm_completion {
  char* text;          /* generated text, NUL-terminated UTF-8 */
  int32_t* token_ids;  /* generated token ids */
  size_t num_tokens;
  size_t prompt_tokens;
  vllm_tvm_finish_reason finish_reason;
} vllm_tvm_completion;

/* Called once per generated token with the text it completes (may be ""). Return nonzero to
 * stop generation (the completion then finishes with VLLM_TVM_FINISH_ABORT). */
typedef int (*vllm_tvm_token_callback)(int32_t token_id, const char* text, void* user_data);

/* Lifecycle */
VLLM_TVM_API vllm_tvm_model_params vllm_tvm_model_params_default(void);
VLLM_TVM_API vllm_tvm_sampling_params vllm_tvm_sampling_params_default(void);
VLLM_TVM_API vllm_tvm_status vllm_tvm_engine_load(const vllm_tvm_model_params* params,
                                                  vllm_tvm_engine** engine);
VLLM_TVM_API void vllm_tvm_engine_free(vllm_tvm_engine* engine);

/* Blocking and streaming completion */
VLLM_TVM_API vllm_tvm_status vllm_tvm_complete(vllm_tvm_engine* engine, const char* prompt,
                                               const vllm_tvm_sampling_params* params,
                                               vllm_tvm_completion* out);
VLLM_TVM_API vllm_tvm_status vllm_tvm_complete_stream(vllm_tvm_engine* engine,
                                                      const char* prompt,
                                                      const vllm_tvm_sampling_params* params,
                                                      vllm_tvm_token_callback callback,
                                                      void* user_data, vllm_tvm_completion* out);

/* Non-blocking requests: submitted requests run batched together. poll sets *finished to 1
 * and fills `out` once the request is done (it is then forgotten), else sets 0. A cancelled
 * request finishes with VLLM_TVM_FINISH_ABORT and the tokens it had. */
VLLM_TVM_API vllm_tvm_status vllm_tvm_submit(vllm_tvm_engine* engine, const char* prompt,
                                             const vllm_tvm_sampling_params* params,
                                             uint64_t* request_id);
VLLM_TVM_API vllm_tvm_status vllm_tvm_poll(vllm_tvm_engine* engine, uint64_t request_id,
                                           int* finished, vllm_tvm_completion* out);
VLLM_TVM_API vllm_tvm_status vllm_tvm_cancel(vllm_tvm_engine* engine, uint64_t request_id);

/* Tokenization (add_special: prepend BOS where the model's tokenizer does) */
VLLM_TVM_API vllm_tvm_status vllm_tvm_tokenize(vllm_tvm_engine* engine, const char* text,
                                               int add_special, int32_t** token_ids,
                                               size_t* num_tokens);
VLLM_TVM_API vllm_tvm_status vllm_tvm_detokenize(vllm_tvm_engine* engine,
                                                 const int32_t* token_ids, size_t num_tokens,
                                                 char** text);

/* Memory helpers (each accepts NULL) */
VLLM_TVM_API void vllm_tvm_completion_free(vllm_tvm_completion* completion);
VLLM_TVM_API void vllm_tvm_tokens_free(int32_t* token_ids);
VLLM_TVM_API void vllm_tvm_string_free(char* text);

/* Diagnostics */
VLLM_TVM_API const char* vllm_tvm_last_error(void); /* "" when none; valid until the next call */
VLLM_TVM_API const char* vllm_tvm_version(void);
VLLM_TVM_API int32_t vllm_tvm_abi_version(void);
VLLM_TVM_API const char* vllm_tvm_status_name(vllm_tvm_status status);
/* A JSON object describing the loaded model and runtime; free with vllm_tvm_string_free. */
VLLM_TVM_API vllm_tvm_status vllm_tvm_diagnostics(vllm_tvm_engine* engine, char** json);

#ifdef __cplusplus
}
#endif

#endif /* VLLM_TVM_H */
