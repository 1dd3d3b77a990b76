// Split regexes made only of character classes with quantifiers, one after another
// (`\s?\p{L}+`, `[\r\n]`, `\p{N}{1,3}`, `[0-9][0-9][0-9]`, `\s+$`, long explicit ranges such
// as DeepSeek's letter class): parsed once, matched with Oniguruma's greedy backtracking.
//
// Why this small subset: most GGUF pre-tokenizer families chain several such splits, and a
// sequence of classes can be matched exactly without a regex engine. Alternation, groups,
// look-around, lazy or possessive quantifiers are outside it: Parse refuses those (the caller
// refuses the pre-tokenizer by name), so no regex is ever matched approximately.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "unicode.h"

namespace vllm_tvm_embed {

class ClassPattern {
 public:
  // The pattern of `regex`, or nothing when `regex` is outside the subset (or can match "").
  static std::optional<ClassPattern> Parse(const std::string& regex);

  // Length (in code points) of the match that starts at `start`, or 0 when none does.
  size_t MatchAt(const std::vector<CodePoint>& points, size_t start) const;

 private:
  struct CharClass {
    bool negated = false;
    uint32_t categories = 0;  // bits of the Category enum in class_pattern.cc
    std::vector<std::pair<uint32_t, uint32_t>> ranges;
    bool Contains(uint32_t code) const;
  };
  struct Item {
    CharClass characters;
    size_t min = 1;
    size_t max = 1;
    bool end_of_line = false;  // `$`: the end of the text or before a newline
  };
  bool MatchFrom(const std::vector<CodePoint>& points, size_t item, size_t pos,
                 size_t& end) const;

  std::vector<Item> items_;
};

}  // namespace vllm_tvm_embed
