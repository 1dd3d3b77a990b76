// UTF-8 and the Unicode facts BPE pre-tokenizers need: code points, the classes \p{L} / \p{N} /
// \p{P} / \p{M} / \s as HF tokenizers' regexes match them, and GPT-2's byte <-> printable-
// character alphabet.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace vllm_tvm_embed {

// One decoded code point and where its bytes lie in the source string.
struct CodePoint {
  uint32_t value;
  size_t offset;
  size_t length;
};

// Decodes UTF-8; an invalid byte becomes U+FFFD covering that one byte.
std::vector<CodePoint> DecodeUtf8(const std::string& text);
void AppendUtf8(uint32_t code, std::string& out);
// `bytes` with every invalid UTF-8 sequence replaced by U+FFFD (as HF decoding does).
std::string SanitizeUtf8(const std::string& bytes);
// Length of the longest prefix of `bytes` that ends on a complete UTF-8 character.
size_t CompleteUtf8Prefix(const std::string& bytes);

bool IsLetter(uint32_t code);
bool IsNumber(uint32_t code);
bool IsPunctuation(uint32_t code);
bool IsMark(uint32_t code);
bool IsWhitespace(uint32_t code);

// GPT-2's map of each byte to a printable character (as UTF-8) and its inverse.
const std::vector<std::string>& ByteToUnicode();
// The byte a byte-level character stands for, or -1 when it is not in the alphabet.
int UnicodeToByte(uint32_t code);

}  // namespace vllm_tvm_embed
