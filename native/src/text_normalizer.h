// The normalizers of tokenizer.json that SentencePiece-style BPE vocabularies use: text is
// rewritten before it is cut into words ("▁" prepended, spaces replaced by "▁").
//
// Why only these: Llama-2 / Mistral / Phi-3 / Gemma tokenizer.json files (and the ones the
// Python runtime builds from GGUF `llama` / `gemma4` vocabularies) use Prepend and Replace of
// fixed strings; Unicode normalization forms and SentencePiece's precompiled character maps
// would need tables this library does not carry, so they are refused by name.
#pragma once

#include <string>
#include <vector>

#include "json_access.h"

namespace vllm_tvm_embed {

class TextNormalizer {
 public:
  // From tokenizer.json's "normalizer" value (null: text is left as it is).
  static TextNormalizer FromJson(const json::Value& spec, const std::string& origin);

  std::string Apply(const std::string& text) const;
  bool empty() const { return steps_.empty(); }

 private:
  struct Step {
    enum class Kind { kPrepend, kReplace } kind;
    std::string pattern;  // kReplace: the text replaced
    std::string content;  // kPrepend: the prefix; kReplace: the replacement
  };
  void AddStep(const json::Object& step, const std::string& origin);

  std::vector<Step> steps_;
};

// Every occurrence of `pattern` (non-empty) in `text` replaced by `content`.
std::string ReplaceAll(const std::string& text, const std::string& pattern,
                       const std::string& content);

// The fixed string of a {"String": ...} pattern; a {"Regex": ...} pattern is refused.
std::string StringPattern(const json::Object& step, const std::string& origin);

}  // namespace vllm_tvm_embed
