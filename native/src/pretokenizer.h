// The pre-tokenizers of byte-level BPE tokenizer.json files: how text is cut into words
// before merges run, then mapped to GPT-2's byte alphabet.
//
// Why hand-written matchers instead of a regex engine: C++'s std::regex has no Unicode
// classes, and the few splitting rules byte-level vocabularies use are fixed strings. The
// supported ones are matched exactly as HF tokenizers (Oniguruma) matches them; any other
// pre-tokenizer or regex is refused by name (guessing one silently changes token ids).
#pragma once

#include <string>
#include <vector>

#include "json_access.h"

namespace vllm_tvm_embed {

class PreTokenizer {
 public:
  // From tokenizer.json's "pre_tokenizer" value (`origin` names the file in errors).
  static PreTokenizer FromJson(const json::Value& spec, const std::string& origin);

  // The words of `text`, each already mapped to the byte-level alphabet.
  std::vector<std::string> Split(const std::string& text) const;

 private:
  enum class Rule { kGpt2Words, kEachNumber, kNumberRuns };
  void AddStep(const json::Object& step, const std::string& origin);

  std::vector<Rule> rules_;
  bool byte_level_ = false;
};

}  // namespace vllm_tvm_embed
