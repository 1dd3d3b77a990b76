/*
 * vllm-tvm-cli: one completion from a bundle, for scripts and smoke tests.
 *
 *   vllm-tvm-cli [--model DIR] --prompt TEXT [--max-tokens N] [--temperature T] [--seed S] [--json]
 *   vllm-tvm-cli --help | --version
 *
 * Without --model it runs the model of its own bundle (<bundle>/model, found from
 * /proc/self/exe). With --json it prints one object {"token_ids": [...], "text": "..."}.
 */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "vllm_tvm.h"

#define USAGE                                                                        \
  "usage: vllm-tvm-cli [--model DIR] --prompt TEXT [--max-tokens N] [--temperature T] " \
  "[--seed S] [--json]\n       vllm-tvm-cli --help | --version\n"

static int usage(const char* message) {
  fprintf(stderr, "vllm-tvm-cli: %s\n" USAGE, message);
  return 2;
}

/* <bundle>/model for the executable at <bundle>/bin/vllm-tvm-cli. */
static int bundled_model(char* path, size_t size) {
  char exe[PATH_MAX];
  ssize_t length = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
  if (length <= 0) return -1;
  exe[length] = '\0';
  char* slash = strrchr(exe, '/');
  if (slash == NULL) return -1;
  *slash = '\0';
  return snprintf(path, size, "%s/../model", exe) < (int)size ? 0 : -1;
}

static int parse_number(const char* text, double* value) {
  char* end = NULL;
  *value = strtod(text, &end);
  return end != text && *end == '\0' ? 0 : -1;
}

static void print_json_string(const char* text) {
  putchar('"');
  for (const unsigned char* c = (const unsigned char*)text; *c; ++c) {
    if (*c == '"' || *c == '\\') {
      printf("\\%c", *c);
    } else if (*c < 0x20) {
      printf("\\u%04x", *c);
    } else {
      putchar(*c);
    }
  }
  putchar('"');
}

int main(int argc, char** argv) {
  const char* model = NULL;
  const char* prompt = NULL;
  int json = 0;
  vllm_tvm_sampling_params sampling = vllm_tvm_sampling_params_default();
  for (int i = 1; i < argc; ++i) {
    const char* flag = argv[i];
    if (strcmp(flag, "--json") == 0) {
      json = 1;
      continue;
    }
    if (strcmp(flag, "--help") == 0) {
      fputs(USAGE, stdout);
      return 0;
    }
    if (strcmp(flag, "--version") == 0) {
      printf("vllm-tvm-cli %s (C ABI %d)\n", vllm_tvm_version(), (int)vllm_tvm_abi_version());
      return 0;
    }
    if (i + 1 >= argc) return usage("a flag is missing its value");
    const char* value = argv[++i];
    double number = 0;
    if (strcmp(flag, "--model") == 0) {
      model = value;
    } else if (strcmp(flag, "--prompt") == 0) {
      prompt = value;
    } else if (strcmp(flag, "--max-tokens") == 0 && parse_number(value, &number) == 0) {
      sampling.max_tokens = (int32_t)number;
    } else if (strcmp(flag, "--temperature") == 0 && parse_number(value, &number) == 0) {
      sampling.temperature = (float)number;
    } else if (strcmp(flag, "--seed") == 0 && parse_number(value, &number) == 0) {
      sampling.seed = (int64_t)number;
    } else {
      return usage("unknown flag or bad value");
    }
  }
  if (prompt == NULL) return usage("--prompt is required");
  char own_model[PATH_MAX];
  if (model == NULL) {
    if (bundled_model(own_model, sizeof(own_model)) != 0) return usage("cannot find the bundle");
    model = own_model;
  }

  vllm_tvm_model_params params = vllm_tvm_model_params_default();
  params.model_path = model;
  vllm_tvm_engine* engine = NULL;
  if (vllm_tvm_engine_load(&params, &engine) != VLLM_TVM_OK) {
    fprintf(stderr, "vllm-tvm-cli: %s\n", vllm_tvm_last_error());
    return 1;
  }
  vllm_tvm_completion out;
  vllm_tvm_status status = vllm_tvm_complete(engine, prompt, &sampling, &out);
  if (status != VLLM_TVM_OK) {
    fprintf(stderr, "vllm-tvm-cli: %s: %s\n", vllm_tvm_status_name(status), vllm_tvm_last_error());
    vllm_tvm_engine_free(engine);
    return 1;
  }
  if (json) {
    printf("{\"token_ids\": [");
    for (size_t i = 0; i < out.num_tokens; ++i) printf(i ? ", %d" : "%d", out.token_ids[i]);
    printf("], \"text\": ");
    print_json_string(out.text);
    printf("}\n");
  } else {
    printf("%s\n", out.text);
  }
  vllm_tvm_completion_free(&out);
  vllm_tvm_engine_free(engine);
  return 0;
}
