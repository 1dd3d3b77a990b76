// The pre-tokenizers of tokenizer.json files: how text is cut into words before merges run,
// then (for byte-level BPE) mapped to GPT-2's byte alphabet; or, for SentencePiece-style
// files that spell it so, Metaspace (spaces become "▁", one prepended).
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

  // The words of `text`, each mapped to the byte-level alphabet when byte_level();
  // `at_text_start`: `text` begins the input (no added token before it).
  std::vector<std::string> Split(const std::string& text, bool at_text_start) const;
  bool byte_level() const { return byte_level_; }

 private:
  // One isolated split: the matches of a regex and the text between them become pieces.
  struct Step {
    std::optional<WordRegex> words;       // a word regex (matches at every position), or
    std::optional<ClassPattern> pattern;  // a class sequence
    size_t MatchAt(const std::vector<CodePoint>& points, size_t start) const;
  };
  // HF tokenizers' Metaspace: spaces replaced, the replacement prepended (always, or only to
  // the input's first piece, or never) unless the piece starts with it, then optionally
  // split before each replacement.
  struct Metaspace {
    std::string replacement;
    enum class Prepend { kAlways, kFirst, kNever } prepend;
    bool split;
  };
  void AddStep(const json::Object& step, const std::string& origin);
  void AddRegex(const std::string& regex, const std::string& origin);
  std::vector<std::string> SplitMetaspace(const std::string& text, bool at_text_start) const;

  std::vector<Step> steps_;
  std::optional<Metaspace> metaspace_;
  bool byte_level_ = false;
};

}  // namespace vllm_tvm_embed
