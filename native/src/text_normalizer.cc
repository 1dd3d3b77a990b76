#include "text_normalizer.h"

#include "error.h"

namespace vllm_tvm_embed {

std::string ReplaceAll(const std::string& text, const std::string& pattern,
                       const std::string& content) {
  std::string out;
  size_t start = 0;
  for (size_t found = text.find(pattern); found != std::string::npos;
       found = text.find(pattern, start)) {
    out.append(text, start, found - start);
    out += content;
    start = found + pattern.size();
  }
  out.append(text, start, std::string::npos);
  return out;
}

std::string StringPattern(const json::Object& step, const std::string& origin) {
  json::Object pattern = GetObject(step, "pattern", origin);
  if (!HasKey(pattern, "String")) {
    throw EmbedError(VLLM_TVM_ERR_UNSUPPORTED,
                     origin + ": a Replace with a regex pattern is not supported (only fixed "
                              "strings)");
  }
  std::string text = GetString(pattern, "String", origin);
  if (text.empty()) {
    throw EmbedError(VLLM_TVM_ERR_UNSUPPORTED, origin + ": a Replace of the empty string");
  }
  return text;
}

void TextNormalizer::AddStep(const json::Object& step, const std::string& origin) {
  const std::string type = GetString(step, "type", origin);
  if (type == "Sequence") {
    for (const auto& inner : GetArray(step, "normalizers", origin)) {
      AddStep(AsObject(inner, origin + " normalizer"), origin);
    }
  } else if (type == "Prepend") {
    steps_.push_back(Step{Step::Kind::kPrepend, "", GetString(step, "prepend", origin)});
  } else if (type == "Replace") {
    steps_.push_back(
        Step{Step::Kind::kReplace, StringPattern(step, origin), GetString(step, "content", origin)});
  } else {
    throw EmbedError(VLLM_TVM_ERR_UNSUPPORTED, origin + ": normalizer '" + type +
                                                   "' is not supported; supported: Prepend, "
                                                   "Replace (fixed strings), Sequence");
  }
}

TextNormalizer TextNormalizer::FromJson(const json::Value& spec, const std::string& origin) {
  TextNormalizer normalizer;
  if (spec != nullptr) normalizer.AddStep(AsObject(spec, origin + " normalizer"), origin);
  return normalizer;
}

std::string TextNormalizer::Apply(const std::string& text) const {
  std::string out = text;
  for (const Step& step : steps_) {
    if (step.kind == Step::Kind::kReplace) {
      out = ReplaceAll(out, step.pattern, step.content);
    } else if (!out.empty()) {  // HF tokenizers' Prepend leaves empty text empty
      out = step.content + out;
    }
  }
  return out;
}

}  // namespace vllm_tvm_embed
