#include "class_pattern.h"

#include <algorithm>
#include <climits>

namespace vllm_tvm_embed {
namespace {

enum Category : uint32_t {
  kLetter = 1,
  kNumber = 2,
  kPunctuation = 4,
  kMark = 8,
  kSpace = 16,
};

// Reads a regex as code points, one at a time.
class Reader {
 public:
  explicit Reader(const std::string& text) {
    for (const CodePoint& point : DecodeUtf8(text)) codes_.push_back(point.value);
  }
  bool done() const { return pos_ >= codes_.size(); }
  uint32_t peek(size_t ahead = 0) const {
    return pos_ + ahead < codes_.size() ? codes_[pos_ + ahead] : 0xFFFFFFFFu;
  }
  uint32_t next() { return codes_[pos_++]; }
  bool take(uint32_t code) {
    if (peek() != code) return false;
    ++pos_;
    return true;
  }

 private:
  std::vector<uint32_t> codes_;
  size_t pos_ = 0;
};

// The category of `\p{X}` after its "\p" was read, or 0 when X is not supported.
uint32_t PropertyCategory(Reader& reader) {
  if (!reader.take('{')) return 0;
  const uint32_t name = reader.next();
  if (!reader.take('}')) return 0;
  switch (name) {
    case 'L': return kLetter;
    case 'N': return kNumber;
    case 'P': return kPunctuation;
    case 'M': return kMark;
    default: return 0;
  }
}

// The literal an escape stands for (after its backslash), or UINT32_MAX for a class escape.
uint32_t EscapedLiteral(uint32_t code) {
  switch (code) {
    case 'r': return '\r';
    case 'n': return '\n';
    case 't': return '\t';
    case 'f': return '\f';
    case 'v': return '\v';
    default: break;
  }
  const bool word = (code >= 'a' && code <= 'z') || (code >= 'A' && code <= 'Z') ||
                    (code >= '0' && code <= '9');
  return word ? UINT32_MAX : code;  // \$ \+ \| ...: the character itself
}

// One escape (after its backslash) added to `into`; false when unsupported.
bool AddEscape(Reader& reader, uint32_t& literal, uint32_t& categories, bool& negated) {
  const uint32_t code = reader.next();
  literal = UINT32_MAX;
  if (code == 'p') {
    categories = PropertyCategory(reader);
    return categories != 0;
  }
  if (code == 's' || code == 'S') {
    categories = kSpace;
    negated = code == 'S';
    return true;
  }
  literal = EscapedLiteral(code);
  return literal != UINT32_MAX;
}

}  // namespace

bool ClassPattern::CharClass::Contains(uint32_t code) const {
  bool found = ((categories & kLetter) && IsLetter(code)) ||
               ((categories & kNumber) && IsNumber(code)) ||
               ((categories & kPunctuation) && IsPunctuation(code)) ||
               ((categories & kMark) && IsMark(code)) ||
               ((categories & kSpace) && IsWhitespace(code));
  for (const auto& [first, last] : ranges) found = found || (code >= first && code <= last);
  return found != negated;
}

std::optional<ClassPattern> ClassPattern::Parse(const std::string& regex) {
  ClassPattern pattern;
  Reader reader(regex);
  while (!reader.done()) {
    Item item;
    const uint32_t code = reader.next();
    if (code == '$') {
      item.end_of_line = true;
      item.min = item.max = 0;
      pattern.items_.push_back(item);
      continue;
    }
    if (code == '[') {
      item.characters.negated = reader.take('^');
      bool first = true;
      while (!reader.done() && (first || reader.peek() != ']')) {
        first = false;
        uint32_t low = reader.next(), categories = 0;
        bool negated = false;
        if (low == '[') return std::nullopt;  // nested classes and [:posix:]
        if (low == '\\') {
          if (!AddEscape(reader, low, categories, negated) || negated) return std::nullopt;
          if (categories != 0) {
            item.characters.categories |= categories;
            continue;
          }
        }
        uint32_t high = low;
        if (reader.peek() == '-' && reader.peek(1) != ']' && reader.peek(1) != 0xFFFFFFFFu) {
          reader.next();
          high = reader.next();
          if (high == '\\' && !AddEscape(reader, high, categories, negated)) return std::nullopt;
          if (categories != 0 || high < low) return std::nullopt;
        }
        item.characters.ranges.emplace_back(low, high);
      }
      if (!reader.take(']')) return std::nullopt;
    } else if (code == '\\') {
      uint32_t literal = 0, categories = 0;
      if (!AddEscape(reader, literal, categories, item.characters.negated)) return std::nullopt;
      item.characters.categories = categories;
      if (categories == 0) item.characters.ranges.emplace_back(literal, literal);
    } else if (std::string("()|*+?{}.^").find(static_cast<char>(code)) != std::string::npos &&
               code < 0x80) {
      return std::nullopt;
    } else {
      item.characters.ranges.emplace_back(code, code);
    }
    if (reader.take('?')) {
      item.min = 0;
    } else if (reader.take('+')) {
      item.max = SIZE_MAX;
    } else if (reader.take('*')) {
      item.min = 0, item.max = SIZE_MAX;
    } else if (reader.take('{')) {
      size_t numbers[2] = {0, 0}, count = 0;
      bool comma = false;
      while (!reader.done() && reader.peek() != '}') {
        const uint32_t digit = reader.next();
        if (digit == ',' && !comma) {
          comma = true, count = 1;
        } else if (digit >= '0' && digit <= '9') {
          numbers[count] = numbers[count] * 10 + (digit - '0');
        } else {
          return std::nullopt;
        }
      }
      if (!reader.take('}') || (comma && numbers[1] < numbers[0])) return std::nullopt;
      item.min = numbers[0];
      item.max = comma ? (numbers[1] == 0 ? SIZE_MAX : numbers[1]) : numbers[0];
    }
    if (reader.peek() == '?' || reader.peek() == '+') return std::nullopt;  // lazy, possessive
    pattern.items_.push_back(item);
  }
  const bool can_be_empty = std::all_of(pattern.items_.begin(), pattern.items_.end(),
                                        [](const Item& item) { return item.min == 0; });
  if (pattern.items_.empty() || can_be_empty) return std::nullopt;
  return pattern;
}

bool ClassPattern::MatchFrom(const std::vector<CodePoint>& points, size_t item, size_t pos,
                             size_t& end) const {
  if (item == items_.size()) {
    end = pos;
    return true;
  }
  const Item& current = items_[item];
  if (current.end_of_line) {
    return (pos == points.size() || points[pos].value == '\n') &&
           MatchFrom(points, item + 1, pos, end);
  }
  size_t longest = 0;
  while (longest < current.max && pos + longest < points.size() &&
         current.characters.Contains(points[pos + longest].value)) {
    ++longest;
  }
  // Greedy: the longest run first, giving back one character at a time.
  for (size_t count = longest + 1; count-- > current.min;) {
    if (MatchFrom(points, item + 1, pos + count, end)) return true;
  }
  return false;
}

size_t ClassPattern::MatchAt(const std::vector<CodePoint>& points, size_t start) const {
  size_t end = start;
  return MatchFrom(points, 0, start, end) ? end - start : 0;
}

}  // namespace vllm_tvm_embed
