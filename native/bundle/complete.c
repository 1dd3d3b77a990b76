/*
 * complete.c: the smallest program over libvllm_tvm (the reference's vllm.h example, ported).
 * Build with this folder's CMakeLists.txt; run as `complete [MODEL_DIR] [PROMPT]`
 * (default: this bundle's model and "The capital of France is").
 */
#include <stdio.h>

#include "vllm_tvm.h"

int main(int argc, char** argv) {
  vllm_tvm_model_params mp = vllm_tvm_model_params_default();
  mp.model_path = argc > 1 ? argv[1] : VLLM_TVM_BUNDLE_MODEL_DIR;
  const char* prompt = argc > 2 ? argv[2] : "The capital of France is";

  vllm_tvm_engine* engine = NULL;
  if (vllm_tvm_engine_load(&mp, &engine) != VLLM_TVM_OK) {
    fprintf(stderr, "%s\n", vllm_tvm_last_error());
    return 1;
  }
  vllm_tvm_sampling_params sp = vllm_tvm_sampling_params_default();
  sp.max_tokens = 16;
  sp.temperature = 0.0f; /* greedy */
  vllm_tvm_completion out;
  if (vllm_tvm_complete(engine, prompt, &sp, &out) == VLLM_TVM_OK) {
    printf("%s\n", out.text);
    vllm_tvm_completion_free(&out);
  } else {
    fprintf(stderr, "%s\n", vllm_tvm_last_error());
  }
  vllm_tvm_engine_free(engine);
  return 0;
}
