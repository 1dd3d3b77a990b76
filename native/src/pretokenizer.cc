#include "pretokenizer.h"

#include "error.h"
#include "text_normalizer.h"
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
  if (spec == nullptr) return pre_tokenizer;
  json::Object object = AsObject(spec, origin + " pre_tokenizer");
  if (GetString(object, "type", origin) != "Metaspace") {
    pre_tokenizer.AddStep(object, origin);
    return pre_tokenizer;
  }
  Metaspace metaspace{GetString(object, "replacement", origin), Metaspace::Prepend::kAlways,
                      !HasKey(object, "split") || GetBool(object, "split", origin)};
  const std::string scheme = HasKey(object, "prepend_scheme")
                                 ? GetString(object, "prepend_scheme", origin)
                             : !HasKey(object, "add_prefix_space") ||
                                     GetBool(object, "add_prefix_space", origin)
                                 ? "always"
                                 : "never";
  if (scheme == "first") {
    metaspace.prepend = Metaspace::Prepend::kFirst;
  } else if (scheme == "never") {
    metaspace.prepend = Metaspace::Prepend::kNever;
  } else if (scheme != "always") {
    throw EmbedError(VLLM_TVM_ERR_UNSUPPORTED,
                     origin + ": Metaspace prepend_scheme '" + scheme + "' is not supported");
  }
  if (DecodeUtf8(metaspace.replacement).size() != 1) {
    throw EmbedError(VLLM_TVM_ERR_BUNDLE, origin + ": a Metaspace replacement is one character");
  }
  pre_tokenizer.metaspace_ = metaspace;
  return pre_tokenizer;
}

std::vector<std::string> PreTokenizer::SplitMetaspace(const std::string& text,
                                                      bool at_text_start) const {
  const std::string& mark = metaspace_->replacement;
  std::string replaced = ReplaceAll(text, " ", mark);
  const bool prepend = metaspace_->prepend == Metaspace::Prepend::kAlways ||
                       (metaspace_->prepend == Metaspace::Prepend::kFirst && at_text_start);
  if (prepend && replaced.compare(0, mark.size(), mark) != 0) replaced = mark + replaced;
  if (!metaspace_->split) return {replaced};
  std::vector<std::string> pieces;  // each mark begins a piece
  size_t start = 0;
  for (size_t found = replaced.find(mark, 1); found != std::string::npos;
       found = replaced.find(mark, found + mark.size())) {
    pieces.push_back(replaced.substr(start, found - start));
    start = found;
  }
  pieces.push_back(replaced.substr(start));
  return pieces;
}

std::vector<std::string> PreTokenizer::Split(const std::string& text, bool at_text_start) const {
  if (metaspace_) return SplitMetaspace(text, at_text_start);
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
