// BPE from an HF tokenizer.json (byte-level, or SentencePiece-style with "▁" for spaces and
// <0xNN> byte fallback): encode text to ids and decode ids to text.
//
// Why in C++: an embedded program has no Python and no HF tokenizers; this reads the same
// tokenizer.json the Python runtime loads (for GGUF models, `vllm-tvm embed` writes the
// tokenizer.json the Python runtime builds from the GGUF vocabulary) and gives the same ids.
// The steps run in HF tokenizers' order: added tokens are cut out of the text, each remaining
// piece is normalized (text_normalizer.h), split into words (pretokenizer.h) and merged
// (bpe_model.h); decoding runs the decoders of token_decoder.h. Post-processors: ByteLevel
// and TemplateProcessing. Anything else is refused by name when the tokenizer is loaded.
#pragma once

#include <cstdint>
#include <string>
#include <unordered_set>
#include <vector>

#include "bpe_model.h"
#include "pretokenizer.h"
#include "text_normalizer.h"
#include "token_decoder.h"

namespace vllm_tvm_embed {

class BpeTokenizer {
 public:
  // `bos_token_id` >= 0 with `add_bos_token`: prepended when special tokens are added and the
  // ids do not already start with it (the Python Tokenizer's rule).
  BpeTokenizer(const std::string& tokenizer_json_path, int32_t bos_token_id, bool add_bos_token);

  std::vector<int32_t> Encode(const std::string& text, bool add_special_tokens) const;
  // Raw bytes of `ids` (special added tokens skipped); may end inside a UTF-8 character.
  std::string DecodeBytes(const std::vector<int32_t>& ids) const;
  // Text of `ids`, invalid UTF-8 replaced by U+FFFD.
  std::string Decode(const std::vector<int32_t>& ids) const;

  int64_t vocab_size() const { return static_cast<int64_t>(id_to_token_.size()); }

 private:
  struct AddedToken {
    std::string content;
    int32_t id;
    bool special;
  };
  std::string DecodeIds(const std::vector<int32_t>& ids, bool raw_bytes) const;
  // `text` lies between added tokens; `at_text_start`: it begins the input.
  void EncodeOrdinaryText(const std::string& text, bool at_text_start,
                          std::vector<int32_t>& ids) const;
  void LoadPostProcessor(const json::Value& spec, const std::string& origin);

  TextNormalizer normalizer_;
  PreTokenizer pre_tokenizer_;
  BpeModel model_;
  TokenDecoder decoder_;
  std::vector<std::string> id_to_token_;
  std::vector<AddedToken> added_tokens_;  // longest first
  std::unordered_set<int32_t> special_ids_;
  std::vector<int32_t> prefix_ids_;  // from a TemplateProcessing post-processor
  std::vector<int32_t> suffix_ids_;
  int32_t bos_token_id_;
  bool add_bos_token_;
};

}  // namespace vllm_tvm_embed
