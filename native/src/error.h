// Errors inside libvllm_tvm: one exception type carrying the C status it maps to.
//
// Why: the C boundary must never let an exception or abort escape, so every internal failure
// becomes an EmbedError (or a std::exception that c_api.cc maps to VLLM_TVM_ERR_RUNTIME),
// and the boundary turns it into a status code plus the thread-local last-error message.
#pragma once

#include <stdexcept>
#include <string>

#include "vllm_tvm.h"

namespace vllm_tvm_embed {

class EmbedError : public std::runtime_error {
 public:
  EmbedError(vllm_tvm_status status, const std::string& message)
      : std::runtime_error(message), status_(status) {}
  vllm_tvm_status status() const { return status_; }

 private:
  vllm_tvm_status status_;
};

}  // namespace vllm_tvm_embed
