// The pre-tokenizers of tokenizer.json files: how text is cut into words before merges run,
// then (for byte-level BPE) mapped to GPT-2's byte alphabet.
//
// Why no regex engine: C++'s std::regex has no Unicode classes. Split regexes are matched by
// hand-written matchers for the word regexes of word_regexes.h and by the class sequences of
// class_pattern.h, both exactly as HF tokenizers (Oniguruma) matches them; any other
// pre-tokenizer or regex is refused by name (guessing one silently changes token ids).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "class_pattern.h"
#include "json_access.h"
#include "word_regexes.h"

namespace vllm_tvm_embed {

class PreTokenizer {
 public:
  // From tokenizer.json's "pre_tokenizer" value (`origin` names the file in errors; null:
  // the text is one word).
  static PreTokenizer FromJson(const json::Value& spec, const std::string& origin);

  // The words of `text`, each mapped to the byte-level alphabet when byte_level().
  std::vector<std::string> Split(const std::string& text) const;
  bool byte_level() const { return byte_level_; }

 private:
  // One isolated split: the matches of a regex and the text between them become pieces.
  struct Step {
    std::optional<WordRegex> words;       // a word regex (matches at every position), or
    std::optional<ClassPattern> pattern;  // a class sequence
    size_t MatchAt(const std::vector<CodePoint>& points, size_t start) const;
  };
  void AddStep(const json::Object& step, const std::string& origin);
  void AddRegex(const std::string& regex, const std::string& origin);

  std::vector<Step> steps_;
  bool byte_level_ = false;
};

}  // namespace vllm_tvm_embed
