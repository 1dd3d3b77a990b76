#include "pretokenizer.h"

#include "error.h"
#include "unicode.h"

namespace vllm_tvm_embed {

size_t PreTokenizer::Step::MatchAt(const std::vector<CodePoint>& points, size_t start) const {
  return words ? WordMatchLength(*words, points, start) : pattern->MatchAt(points, start);
}

void PreTokenizer::AddRegex(const std::string& regex, const std::string& origin) {
  if (std::optional<WordRegex> words = FindWordRegex(regex)) {
    steps_.push_back(Step{words, std::nullopt});
  } else if (std::optional<ClassPattern> pattern = ClassPattern::Parse(regex)) {
    steps_.push_back(Step{std::nullopt, pattern});
  } else if (regex == "[^\n]+|[\n]+" || regex == "[^\\n]+|[\\n]+") {
    // Gemma's line split: newline runs and the runs between them.
    steps_.push_back(Step{std::nullopt, ClassPattern::Parse("[\\n]+")});
  } else {
    throw EmbedError(VLLM_TVM_ERR_UNSUPPORTED,
                     origin + ": Split pre-tokenizer regex '" + regex + "' is not supported");
  }
}

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
      steps_.push_back(Step{WordRegex::kGpt2, std::nullopt});
    }
    byte_level_ = true;
  } else if (type == "Digits") {
    // HF tokenizers' Digits: each number alone, or whole runs of numbers.
    AddRegex(GetBool(step, "individual_digits", origin) ? "\\p{N}" : "\\p{N}+", origin);
  } else if (type == "Split") {
    json::Object pattern = GetObject(step, "pattern", origin);
    const std::string behavior = GetString(step, "behavior", origin);
    if (behavior != "Isolated" || GetBool(step, "invert", origin)) {
      throw EmbedError(VLLM_TVM_ERR_UNSUPPORTED,
                       origin + ": Split pre-tokenizer behavior '" + behavior + "' (or invert) "
                                "is not supported; supported: Isolated");
    }
    if (!HasKey(pattern, "Regex")) {
      throw EmbedError(VLLM_TVM_ERR_UNSUPPORTED,
                       origin + ": Split pre-tokenizer on a fixed string is not supported");
    }
    AddRegex(GetString(pattern, "Regex", origin), origin);
  } else {
    throw EmbedError(VLLM_TVM_ERR_UNSUPPORTED,
                     origin + ": pre-tokenizer '" + type + "' is not supported");
  }
}

PreTokenizer PreTokenizer::FromJson(const json::Value& spec, const std::string& origin) {
  PreTokenizer pre_tokenizer;
  if (spec != nullptr) pre_tokenizer.AddStep(AsObject(spec, origin + " pre_tokenizer"), origin);
  return pre_tokenizer;
}

std::vector<std::string> PreTokenizer::Split(const std::string& text) const {
  std::vector<std::string> pieces{text};
  for (const Step& step : steps_) {
    std::vector<std::string> next;
    for (const std::string& piece : pieces) {
      std::vector<CodePoint> points = DecodeUtf8(piece);
      const auto emit = [&](size_t first, size_t end) {  // code points [first, end)
        if (first == end) return;
        const size_t begin = points[first].offset;
        next.push_back(piece.substr(begin, points[end - 1].offset + points[end - 1].length - begin));
      };
      size_t gap = 0, start = 0;
      while (start < points.size()) {
        const size_t length = step.MatchAt(points, start);
        if (length == 0) {
          ++start;
          continue;
        }
        emit(gap, start);
        emit(start, start + length);
        start += length;
        gap = start;
      }
      emit(gap, points.size());
    }
    pieces = std::move(next);
  }
  if (!byte_level_) return pieces;
  const std::vector<std::string>& alphabet = ByteToUnicode();
  for (std::string& piece : pieces) {
    std::string mapped;
    for (unsigned char byte : piece) mapped += alphabet[byte];
    piece = std::move(mapped);
  }
  return pieces;
}

}  // namespace vllm_tvm_embed
