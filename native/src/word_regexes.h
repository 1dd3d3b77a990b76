// The word regexes of byte-level BPE families, hand-matched: GPT-2's, Llama-3's, Qwen2's and
// Qwen3.5's, exactly as tokenizer.json files spell them.
//
// Why by hand: they combine alternation, case-insensitive contractions and a look-ahead
// (`\s+(?!\S)`), which the class sequences of class_pattern.h cannot express; each is matched
// here as Oniguruma (HF tokenizers' regex engine) matches it, alternative by alternative.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "unicode.h"

namespace vllm_tvm_embed {

enum class WordRegex { kGpt2, kLlama3, kQwen2, kQwen35 };

// The word regex `regex` spells, or nothing.
std::optional<WordRegex> FindWordRegex(const std::string& regex);

// Length (in code points) of `regex`'s match at `start`; every position matches.
size_t WordMatchLength(WordRegex regex, const std::vector<CodePoint>& points, size_t start);

}  // namespace vllm_tvm_embed
