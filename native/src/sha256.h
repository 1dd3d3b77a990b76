// SHA-256 of a file, to check a bundle against the sha256 its manifest records before any of
// its code is loaded (a truncated or swapped model.so must be refused, not dlopen'ed).
#pragma once

#include <string>

namespace vllm_tvm_embed {

// Lower-case hex digest of the file at `path`; throws EmbedError when it cannot be read.
std::string Sha256OfFile(const std::string& path);

}  // namespace vllm_tvm_embed
