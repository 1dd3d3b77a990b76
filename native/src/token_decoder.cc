#include "token_decoder.h"

#include <cstdlib>

#include "error.h"
#include "text_normalizer.h"
#include "unicode.h"

namespace vllm_tvm_embed {
namespace {

// The byte a "<0xNN>" piece stands for, or -1.
int FallbackByte(const std::string& token) {
  if (token.size() != 6 || token.compare(0, 3, "<0x") != 0 || token[5] != '>') return -1;
  char* end = nullptr;
  const std::string digits = token.substr(3, 2);
  long value = std::strtol(digits.c_str(), &end, 16);
  return end == digits.c_str() + 2 ? static_cast<int>(value) : -1;
}

// A token in GPT-2's byte characters back to bytes; a token with any other character is
// kept as it is (HF tokenizers' ByteLevel rule).
std::string ByteLevelBytes(const std::string& token) {
  std::string bytes;
  for (const CodePoint& point : DecodeUtf8(token)) {
    int byte = UnicodeToByte(point.value);
    if (byte < 0) return token;
    bytes.push_back(static_cast<char>(byte));
  }
  return bytes;
}

// A run of <0xNN> bytes: as is when raw or valid UTF-8, else one U+FFFD per byte.
std::string FlushBytes(const std::string& bytes, bool raw_bytes) {
  if (raw_bytes || SanitizeUtf8(bytes) == bytes) return bytes;
  std::string replaced;
  for (size_t i = 0; i < bytes.size(); ++i) AppendUtf8(0xFFFD, replaced);
  return replaced;
}

std::vector<std::string> ByteFallback(const std::vector<std::string>& tokens, bool raw_bytes) {
  std::vector<std::string> out;
  std::string pending;
  for (const std::string& token : tokens) {
    int byte = FallbackByte(token);
    if (byte >= 0) {
      pending.push_back(static_cast<char>(byte));
      continue;
    }
    if (!pending.empty()) out.push_back(FlushBytes(pending, raw_bytes));
    pending.clear();
    out.push_back(token);
  }
  if (!pending.empty()) out.push_back(FlushBytes(pending, raw_bytes));
  return out;
}

std::string Strip(const std::string& token, const std::string& character, size_t start,
                  size_t stop) {
  std::vector<CodePoint> points = DecodeUtf8(token);
  size_t begin = 0, end = points.size();
  const auto is_stripped = [&](size_t i) {
    return token.compare(points[i].offset, points[i].length, character) == 0;
  };
  while (begin < end && begin < start && is_stripped(begin)) ++begin;
  while (end > begin && points.size() - end < stop && is_stripped(end - 1)) --end;
  if (begin == end) return "";
  return token.substr(points[begin].offset,
                      points[end - 1].offset + points[end - 1].length - points[begin].offset);
}

}  // namespace

void TokenDecoder::AddStep(const json::Object& step, const std::string& origin) {
  const std::string type = GetString(step, "type", origin);
  if (type == "Sequence") {
    for (const auto& inner : GetArray(step, "decoders", origin)) {
      AddStep(AsObject(inner, origin + " decoder"), origin);
    }
  } else if (type == "ByteLevel") {
    steps_.push_back(Step{Step::Kind::kByteLevel});
    byte_level_ = true;
  } else if (type == "Replace") {
    steps_.push_back(
        Step{Step::Kind::kReplace, StringPattern(step, origin), GetString(step, "content", origin)});
  } else if (type == "ByteFallback") {
    steps_.push_back(Step{Step::Kind::kByteFallback});
  } else if (type == "Fuse") {
    steps_.push_back(Step{Step::Kind::kFuse});
  } else if (type == "Strip") {
    const std::string character = GetString(step, "content", origin);
    if (DecodeUtf8(character).size() != 1) {
      throw EmbedError(VLLM_TVM_ERR_BUNDLE, origin + ": a Strip decoder needs one character");
    }
    steps_.push_back(Step{Step::Kind::kStrip, character, "",
                          static_cast<size_t>(GetInt(step, "start", origin)),
                          static_cast<size_t>(GetInt(step, "stop", origin))});
  } else if (type == "Metaspace") {
    const std::string scheme = HasKey(step, "prepend_scheme")
                                   ? GetString(step, "prepend_scheme", origin)
                               : !HasKey(step, "add_prefix_space") ||
                                       GetBool(step, "add_prefix_space", origin)
                                   ? "always"
                                   : "never";
    steps_.push_back(Step{Step::Kind::kMetaspace, GetString(step, "replacement", origin), " ",
                          scheme == "never" ? 0u : 1u});
  } else {
    throw EmbedError(VLLM_TVM_ERR_UNSUPPORTED,
                     origin + ": decoder '" + type +
                         "' is not supported; supported: ByteLevel, Replace (fixed strings), "
                         "ByteFallback, Fuse, Strip, Metaspace, Sequence");
  }
}

TokenDecoder TokenDecoder::FromJson(const json::Value& spec, const std::string& origin) {
  TokenDecoder decoder;
  if (spec != nullptr) decoder.AddStep(AsObject(spec, origin + " decoder"), origin);
  return decoder;
}

std::string TokenDecoder::Decode(std::vector<std::string> tokens, bool raw_bytes) const {
  for (const Step& step : steps_) {
    switch (step.kind) {
      case Step::Kind::kByteLevel: {
        std::string bytes;
        for (const std::string& token : tokens) bytes += ByteLevelBytes(token);
        tokens = {raw_bytes ? bytes : SanitizeUtf8(bytes)};
        break;
      }
      case Step::Kind::kReplace:
        for (std::string& token : tokens) token = ReplaceAll(token, step.pattern, step.content);
        break;
      case Step::Kind::kByteFallback:
        tokens = ByteFallback(tokens, raw_bytes);
        break;
      case Step::Kind::kFuse: {
        std::string joined;
        for (const std::string& token : tokens) joined += token;
        tokens = {joined};
        break;
      }
      case Step::Kind::kMetaspace:
        // HF tokenizers: every mark of the first token is dropped when a space was prepended.
        for (size_t i = 0; i < tokens.size(); ++i) {
          tokens[i] = ReplaceAll(tokens[i], step.pattern, i == 0 && step.start ? "" : " ");
        }
        break;
      case Step::Kind::kStrip:
        for (std::string& token : tokens) token = Strip(token, step.pattern, step.start, step.stop);
        break;
    }
  }
  std::string text;
  for (const std::string& token : tokens) {
    // Without a decoder, HF tokenizers joins the token strings with spaces.
    if (steps_.empty() && !text.empty()) text += ' ';
    text += token;
  }
  return raw_bytes ? text : SanitizeUtf8(text);
}

}  // namespace vllm_tvm_embed
