// The decoders of tokenizer.json: how the strings of token ids become text again.
//
// Why a pipeline: HF tokenizers decodes by passing the list of token strings through each
// decoder in turn (ByteLevel maps GPT-2's byte characters back to bytes; SentencePiece-style
// vocabularies Replace "▁" by a space, turn <0xNN> pieces back into bytes, Fuse and Strip
// the leading space), and the exact order decides where invalid UTF-8 becomes U+FFFD.
#pragma once

#include <string>
#include <vector>

#include "json_access.h"

namespace vllm_tvm_embed {

class TokenDecoder {
 public:
  // From tokenizer.json's "decoder" value (null: the token strings joined by spaces).
  static TokenDecoder FromJson(const json::Value& spec, const std::string& origin);

  // The text of `tokens` as HF tokenizers decodes it (invalid UTF-8 replaced by U+FFFD), or
  // with `raw_bytes` the bytes before that replacement (they may end inside a character).
  std::string Decode(std::vector<std::string> tokens, bool raw_bytes) const;
  bool byte_level() const { return byte_level_; }

 private:
  struct Step {
    enum class Kind { kByteLevel, kReplace, kByteFallback, kFuse, kStrip, kMetaspace } kind;
    std::string pattern = "";  // kReplace: the text replaced; kStrip: the character stripped;
                               // kMetaspace: the mark that stands for a space
    std::string content = "";  // kReplace: the replacement
    size_t start = 0;  // kStrip: at most this many from the start; kMetaspace: 1 to drop the
                       // first token's marks (the prepended space), else 0
    size_t stop = 0;      // kStrip: at most this many from the end
  };
  void AddStep(const json::Object& step, const std::string& origin);

  std::vector<Step> steps_;
  bool byte_level_ = false;
};

}  // namespace vllm_tvm_embed
