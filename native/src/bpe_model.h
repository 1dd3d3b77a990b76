// The BPE model of an HF tokenizer.json: a vocabulary, ranked merges, and what happens to a
// character the vocabulary lacks (byte fallback to <0xNN> pieces, an unknown token, or an
// error), applied to one pre-tokenized word the way HF tokenizers' BPE model does.
//
// Why one model for byte-level and SentencePiece-style vocabularies: both are the same
// algorithm over different alphabets (GPT-2's byte characters, or text with "▁" for spaces);
// merges run lowest rank first, leftmost first, with a heap so a long word (SentencePiece
// vocabularies have no pre-tokenizer, so a whole prompt is one word) costs n log n.
#pragma once

#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "json_access.h"

namespace vllm_tvm_embed {

class BpeModel {
 public:
  BpeModel() = default;
  // From tokenizer.json's "model" object; refuses by name what it does not implement.
  static BpeModel FromJson(const json::Object& model, const std::string& origin);

  // Appends the ids of `word` (already normalized and pre-tokenized) to `ids`.
  void Encode(const std::string& word, std::vector<int32_t>& ids) const;
  // The string of every id of the vocabulary (empty where no entry has the id).
  std::vector<std::string> IdToToken() const;

 private:
  struct Merge {
    int32_t rank;
    int32_t merged_id;
  };
  static uint64_t PairKey(int32_t left, int32_t right) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) |
           static_cast<uint32_t>(right);
  }
  int32_t IdOf(const std::string& token, const std::string& origin) const;
  // The ids of `word`'s characters before merging (byte fallback and unknown applied).
  std::vector<int32_t> InitialSymbols(const std::string& word) const;
  std::vector<int32_t> MergeAll(std::vector<int32_t> symbols) const;

  std::unordered_map<std::string, int32_t> vocab_;
  std::unordered_map<uint64_t, Merge> merges_;
  int32_t unk_id_ = -1;
  bool fuse_unk_ = false;
  bool byte_fallback_ = false;
  bool ignore_merges_ = false;
};

}  // namespace vllm_tvm_embed
