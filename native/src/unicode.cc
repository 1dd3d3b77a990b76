#include "unicode.h"

#include <algorithm>
#include <array>

namespace vllm_tvm_embed {
namespace {

struct CodeRange {
  uint32_t first;
  uint32_t last;
};

#include "unicode_classes.inc"

template <size_t N>
bool InRanges(const CodeRange (&ranges)[N], uint32_t code) {
  auto found = std::upper_bound(std::begin(ranges), std::end(ranges), code,
                                [](uint32_t value, const CodeRange& range) {
                                  return value < range.first;
                                });
  return found != std::begin(ranges) && code <= (found - 1)->last;
}

constexpr uint32_t kReplacement = 0xFFFD;

// Length of the valid UTF-8 sequence at `pos` and its value, or 0 when invalid.
size_t DecodeOne(const std::string& text, size_t pos, uint32_t& value) {
  const auto byte = [&](size_t i) { return static_cast<unsigned char>(text[i]); };
  unsigned char lead = byte(pos);
  size_t length;
  uint32_t minimum;
  if (lead < 0x80) {
    value = lead;
    return 1;
  } else if ((lead & 0xE0) == 0xC0) {
    length = 2, value = lead & 0x1F, minimum = 0x80;
  } else if ((lead & 0xF0) == 0xE0) {
    length = 3, value = lead & 0x0F, minimum = 0x800;
  } else if ((lead & 0xF8) == 0xF0) {
    length = 4, value = lead & 0x07, minimum = 0x10000;
  } else {
    return 0;
  }
  if (pos + length > text.size()) return 0;
  for (size_t i = 1; i < length; ++i) {
    if ((byte(pos + i) & 0xC0) != 0x80) return 0;
    value = (value << 6) | (byte(pos + i) & 0x3F);
  }
  if (value < minimum || value > 0x10FFFF || (value >= 0xD800 && value <= 0xDFFF)) return 0;
  return length;
}

}  // namespace

std::vector<CodePoint> DecodeUtf8(const std::string& text) {
  std::vector<CodePoint> points;
  size_t pos = 0;
  while (pos < text.size()) {
    uint32_t value = 0;
    size_t length = DecodeOne(text, pos, value);
    if (length == 0) {
      points.push_back({kReplacement, pos, 1});
      pos += 1;
    } else {
      points.push_back({value, pos, length});
      pos += length;
    }
  }
  return points;
}

void AppendUtf8(uint32_t code, std::string& out) {
  if (code < 0x80) {
    out.push_back(static_cast<char>(code));
  } else if (code < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (code >> 6)));
    out.push_back(static_cast<char>(0x80 | (code & 0x3F)));
  } else if (code < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (code >> 12)));
    out.push_back(static_cast<char>(0x80 | ((code >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (code & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (code >> 18)));
    out.push_back(static_cast<char>(0x80 | ((code >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((code >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (code & 0x3F)));
  }
}

std::string SanitizeUtf8(const std::string& bytes) {
  std::string out;
  for (const CodePoint& point : DecodeUtf8(bytes)) {
    if (point.value == kReplacement) {
      AppendUtf8(kReplacement, out);
    } else {
      out.append(bytes, point.offset, point.length);
    }
  }
  return out;
}

size_t CompleteUtf8Prefix(const std::string& bytes) {
  size_t end = bytes.size();
  // A character is at most 4 bytes: look back at most 3 for an unfinished lead byte.
  for (size_t back = 1; back <= 3 && back <= end; ++back) {
    unsigned char byte = static_cast<unsigned char>(bytes[end - back]);
    if ((byte & 0xC0) == 0x80) continue;  // continuation byte: keep looking for its lead
    size_t needed = byte >= 0xF0 ? 4 : byte >= 0xE0 ? 3 : byte >= 0xC0 ? 2 : 1;
    return needed > back ? end - back : end;
  }
  return end;
}

bool IsLetter(uint32_t code) { return InRanges(kLetterRanges, code); }

bool IsNumber(uint32_t code) { return InRanges(kNumberRanges, code); }

bool IsPunctuation(uint32_t code) { return InRanges(kPunctuationRanges, code); }

bool IsMark(uint32_t code) { return InRanges(kMarkRanges, code); }

bool IsWhitespace(uint32_t code) {
  // Oniguruma's \s under Unicode: White_Space code points.
  return (code >= 0x09 && code <= 0x0D) || code == 0x20 || code == 0x85 || code == 0xA0 ||
         code == 0x1680 || (code >= 0x2000 && code <= 0x200A) || code == 0x2028 ||
         code == 0x2029 || code == 0x202F || code == 0x205F || code == 0x3000;
}

namespace {

// GPT-2's alphabet: printable Latin-1 bytes stand for themselves, the other 68 bytes for
// U+0100 onwards in byte order.
struct ByteAlphabet {
  std::vector<std::string> chars = std::vector<std::string>(256);
  std::array<int, 324> bytes;

  ByteAlphabet() {
    bytes.fill(-1);
    uint32_t next_extra = 256;
    for (uint32_t byte = 0; byte < 256; ++byte) {
      bool printable = (byte >= '!' && byte <= '~') || (byte >= 0xA1 && byte <= 0xAC) ||
                       (byte >= 0xAE && byte <= 0xFF);
      uint32_t code = printable ? byte : next_extra++;
      AppendUtf8(code, chars[byte]);
      bytes[code] = static_cast<int>(byte);
    }
  }
};

const ByteAlphabet& Alphabet() {
  static const ByteAlphabet alphabet;
  return alphabet;
}

}  // namespace

const std::vector<std::string>& ByteToUnicode() { return Alphabet().chars; }

int UnicodeToByte(uint32_t code) {
  return code < Alphabet().bytes.size() ? Alphabet().bytes[code] : -1;
}

}  // namespace vllm_tvm_embed
