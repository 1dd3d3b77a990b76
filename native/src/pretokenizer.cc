#include "pretokenizer.h"

#include "error.h"
#include "unicode.h"

namespace vllm_tvm_embed {
namespace {

// GPT-2's word regex, as tokenizer.json files spell it.
const char kGpt2Regex[] =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";
const char kEachNumberRegex[] = "\\p{N}";

bool IsOther(uint32_t code) { return !IsWhitespace(code) && !IsLetter(code) && !IsNumber(code); }

// Length (in code points) of GPT-2's regex match at `start`; every position matches.
size_t Gpt2MatchLength(const std::vector<CodePoint>& points, size_t start) {
  const size_t size = points.size();
  const auto at = [&](size_t i) { return i < size ? points[i].value : 0xFFFFFFFFu; };
  if (at(start) == '\'') {
    uint32_t next = at(start + 1), after = at(start + 2);
    if (next == 's' || next == 't' || next == 'm' || next == 'd') return 2;
    if ((next == 'r' && after == 'e') || (next == 'v' && after == 'e') ||
        (next == 'l' && after == 'l')) {
      return 3;
    }
  }
  const size_t body = at(start) == ' ' ? start + 1 : start;
  for (bool (*in_class)(uint32_t) : {&IsLetter, &IsNumber, &IsOther}) {
    if (body < size && in_class(at(body))) {
      size_t end = body;
      while (end < size && in_class(at(end))) ++end;
      return end - start;
    }
  }
  size_t end = start;
  while (end < size && IsWhitespace(at(end))) ++end;
  // \s+(?!\S): a run followed by text gives back its last space to the next word.
  if (end < size && end - start > 1) return end - start - 1;
  return end - start;
}

}  // namespace

void PreTokenizer::AddStep(const json::Object& step, const std::string& origin) {
  const std::string type = GetString(step, "type", origin);
  if (type == "Sequence") {
    for (const auto& inner : GetArray(step, "pretokenizers", origin)) {
      AddStep(AsObject(inner, origin + " pre_tokenizer"), origin);
    }
  } else if (type == "ByteLevel") {
    if (GetBool(step, "add_prefix_space", origin)) {
      throw EmbedError(VLLM_TVM_ERR_UNSUPPORTED,
                       origin + ": pre-tokenizer ByteLevel with add_prefix_space is not supported");
    }
    if (!HasKey(step, "use_regex") || GetBool(step, "use_regex", origin)) {
      rules_.push_back(Rule::kGpt2Words);
    }
    byte_level_ = true;
  } else if (type == "Digits") {
    rules_.push_back(GetBool(step, "individual_digits", origin) ? Rule::kEachNumber
                                                                 : Rule::kNumberRuns);
  } else if (type == "Split") {
    json::Object pattern = GetObject(step, "pattern", origin);
    const std::string regex = HasKey(pattern, "Regex") ? GetString(pattern, "Regex", origin)
                                                        : GetString(pattern, "String", origin);
    const std::string behavior = GetString(step, "behavior", origin);
    if (behavior != "Isolated" || GetBool(step, "invert", origin)) {
      throw EmbedError(VLLM_TVM_ERR_UNSUPPORTED,
                       origin + ": Split pre-tokenizer behavior '" + behavior + "' (or invert) "
                                "is not supported; supported: Isolated");
    }
    if (regex == kGpt2Regex) {
      rules_.push_back(Rule::kGpt2Words);
    } else if (regex == kEachNumberRegex) {
      rules_.push_back(Rule::kEachNumber);
    } else {
      throw EmbedError(VLLM_TVM_ERR_UNSUPPORTED,
                       origin + ": Split pre-tokenizer regex '" + regex + "' is not supported");
    }
  } else {
    throw EmbedError(VLLM_TVM_ERR_UNSUPPORTED,
                     origin + ": pre-tokenizer '" + type + "' is not supported");
  }
}

PreTokenizer PreTokenizer::FromJson(const json::Value& spec, const std::string& origin) {
  PreTokenizer pre_tokenizer;
  if (spec == nullptr) {
    throw EmbedError(VLLM_TVM_ERR_UNSUPPORTED,
                     origin + ": a byte-level BPE needs a pre-tokenizer; none is set");
  }
  pre_tokenizer.AddStep(AsObject(spec, origin + " pre_tokenizer"), origin);
  if (!pre_tokenizer.byte_level_) {
    throw EmbedError(VLLM_TVM_ERR_UNSUPPORTED,
                     origin + ": only byte-level BPE pre-tokenizers (ending in ByteLevel) are "
                              "supported");
  }
  return pre_tokenizer;
}

std::vector<std::string> PreTokenizer::Split(const std::string& text) const {
  std::vector<std::string> pieces{text};
  for (Rule rule : rules_) {
    std::vector<std::string> next;
    for (const std::string& piece : pieces) {
      std::vector<CodePoint> points = DecodeUtf8(piece);
      size_t start = 0;
      while (start < points.size()) {
        size_t length;
        if (rule == Rule::kGpt2Words) {
          length = Gpt2MatchLength(points, start);
        } else {
          // Numbers are isolated (one each, or whole runs); the text between is one piece.
          const bool number = IsNumber(points[start].value);
          length = 1;
          if (!number || rule == Rule::kNumberRuns) {
            while (start + length < points.size() &&
                   IsNumber(points[start + length].value) == number) {
              ++length;
            }
          }
        }
        size_t begin = points[start].offset;
        const CodePoint& last = points[start + length - 1];
        next.push_back(piece.substr(begin, last.offset + last.length - begin));
        start += length;
      }
    }
    pieces = std::move(next);
  }
  const std::vector<std::string>& alphabet = ByteToUnicode();
  for (std::string& piece : pieces) {
    std::string mapped;
    for (unsigned char byte : piece) mapped += alphabet[byte];
    piece = std::move(mapped);
  }
  return pieces;
}

}  // namespace vllm_tvm_embed
