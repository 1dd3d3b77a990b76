#include "word_regexes.h"

#include <algorithm>

namespace vllm_tvm_embed {
namespace {

const char kGpt2Regex[] =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";
const char kLlama3Regex[] =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| "
    "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
const char kQwen2Regex[] =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| "
    "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
const char kQwen35Regex[] =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?[\\p{L}\\p{M}]+|\\p{N}| "
    "?[^\\s\\p{L}\\p{M}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

bool IsNewline(uint32_t code) { return code == '\r' || code == '\n'; }
bool IsLetterOrMark(uint32_t code) { return IsLetter(code) || IsMark(code); }
bool IsGpt2Other(uint32_t code) {
  return !IsWhitespace(code) && !IsLetter(code) && !IsNumber(code);
}
bool IsQwen35Other(uint32_t code) { return IsGpt2Other(code) && !IsMark(code); }
uint32_t AsciiLower(uint32_t code) { return code >= 'A' && code <= 'Z' ? code + 32 : code; }

class Cursor {
 public:
  explicit Cursor(const std::vector<CodePoint>& points) : points_(points) {}
  uint32_t at(size_t i) const { return i < points_.size() ? points_[i].value : 0xFFFFFFFFu; }
  size_t size() const { return points_.size(); }
  // How many code points from `from` on are in the class.
  size_t Run(size_t from, bool (*in_class)(uint32_t)) const {
    size_t end = from;
    while (end < points_.size() && in_class(points_[end].value)) ++end;
    return end - from;
  }
  // 's 't 're 've 'm 'll 'd at `start` (`any_case`: (?i:...)): its length, or 0.
  size_t Contraction(size_t start, bool any_case) const {
    if (at(start) != '\'') return 0;
    const auto fold = [&](uint32_t code) { return any_case ? AsciiLower(code) : code; };
    uint32_t next = fold(at(start + 1)), after = fold(at(start + 2));
    if (next == 's' || next == 't' || next == 'm' || next == 'd') return 2;
    if ((next == 'r' && after == 'e') || (next == 'v' && after == 'e') ||
        (next == 'l' && after == 'l')) {
      return 3;
    }
    return 0;
  }
  // \s+(?!\S)|\s+ at `start`: the run, less its last character when text follows it and the
  // run is longer than one.
  size_t TrailingSpace(size_t start) const {
    size_t run = Run(start, &IsWhitespace);
    return start + run < size() && run > 1 ? run - 1 : run;
  }

 private:
  const std::vector<CodePoint>& points_;
};

size_t Gpt2Length(const Cursor& text, size_t start) {
  if (size_t contraction = text.Contraction(start, false)) return contraction;
  const size_t body = text.at(start) == ' ' ? start + 1 : start;
  for (bool (*in_class)(uint32_t) : {&IsLetter, &IsNumber, &IsGpt2Other}) {
    if (in_class(text.at(body))) return body - start + text.Run(body, in_class);
  }
  return text.TrailingSpace(start);
}

// Llama-3's regex and its relatives: `max_digits` per number piece, and whether marks
// (\p{M}) belong to words.
size_t Llama3Length(const Cursor& text, size_t start, size_t max_digits, bool marks) {
  if (size_t contraction = text.Contraction(start, true)) return contraction;
  bool (*in_word)(uint32_t) = marks ? &IsLetterOrMark : &IsLetter;
  bool (*is_other)(uint32_t) = marks ? &IsQwen35Other : &IsGpt2Other;
  const uint32_t first = text.at(start);
  // [^\r\n\p{L}\p{N}]?\p{L}+  (with marks: [\p{L}\p{M}]+)
  if (!IsNewline(first) && !IsLetter(first) && !IsNumber(first) && in_word(text.at(start + 1))) {
    return 1 + text.Run(start + 1, in_word);
  }
  if (in_word(first)) return text.Run(start, in_word);
  if (IsNumber(first)) return std::min(max_digits, text.Run(start, &IsNumber));
  // ` ?[^\s\p{L}\p{N}]+[\r\n]*`
  const size_t body = first == ' ' && is_other(text.at(start + 1)) ? start + 1 : start;
  if (is_other(text.at(body))) {
    const size_t end = body + text.Run(body, is_other);
    return end - start + text.Run(end, &IsNewline);
  }
  // \s*[\r\n]+: the whitespace run up to its last newline, when it has one.
  for (size_t length = text.Run(start, &IsWhitespace); length > 0; --length) {
    if (IsNewline(text.at(start + length - 1))) return length;
  }
  return text.TrailingSpace(start);
}

}  // namespace

std::optional<WordRegex> FindWordRegex(const std::string& regex) {
  if (regex == kGpt2Regex) return WordRegex::kGpt2;
  if (regex == kLlama3Regex) return WordRegex::kLlama3;
  if (regex == kQwen2Regex) return WordRegex::kQwen2;
  if (regex == kQwen35Regex) return WordRegex::kQwen35;
  return std::nullopt;
}

size_t WordMatchLength(WordRegex regex, const std::vector<CodePoint>& points, size_t start) {
  const Cursor text(points);
  switch (regex) {
    case WordRegex::kGpt2:
      return Gpt2Length(text, start);
    case WordRegex::kLlama3:
      return Llama3Length(text, start, 3, false);
    case WordRegex::kQwen2:
      return Llama3Length(text, start, 1, false);
    case WordRegex::kQwen35:
      return Llama3Length(text, start, 1, true);
  }
  return 1;
}

}  // namespace vllm_tvm_embed
