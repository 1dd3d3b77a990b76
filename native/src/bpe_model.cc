#include "bpe_model.h"

#include <algorithm>
#include <cstdio>
#include <queue>

#include "error.h"
#include "unicode.h"

namespace vllm_tvm_embed {
namespace {

[[noreturn]] void Unsupported(const std::string& origin, const std::string& what) {
  throw EmbedError(VLLM_TVM_ERR_UNSUPPORTED, origin + ": " + what + " is not supported");
}

// "a b" or ["a", "b"]: both spellings of a merge in tokenizer.json.
std::pair<std::string, std::string> MergePair(const json::Value& merge, const std::string& origin) {
  if (auto pair = merge.try_cast<json::Array>()) {
    if (pair->size() != 2) Unsupported(origin, "a merge that is not a pair");
    return {AsString((*pair)[0], origin), AsString((*pair)[1], origin)};
  }
  const std::string text = AsString(merge, origin + " merge");
  const size_t space = text.find(' ');
  if (space == std::string::npos || text.find(' ', space + 1) != std::string::npos) {
    Unsupported(origin, "merge '" + text + "' (not two pieces split by one space)");
  }
  return {text.substr(0, space), text.substr(space + 1)};
}

bool IsNullOrEmpty(const json::Object& object, const char* key, const std::string& origin) {
  if (!HasKey(object, key) || object.at(tvm::ffi::String(key)) == nullptr) return true;
  return GetString(object, key, origin).empty();
}

// A heap entry: merge the symbol at `position` with its right neighbour into `merged_id`.
struct Candidate {
  int32_t rank;
  size_t position;
  int32_t merged_id;
  bool operator>(const Candidate& other) const {
    return rank != other.rank ? rank > other.rank : position > other.position;
  }
};

}  // namespace

BpeModel BpeModel::FromJson(const json::Object& model, const std::string& origin) {
  BpeModel bpe;
  const std::string type = HasKey(model, "type") ? GetString(model, "type", origin) : "BPE";
  if (type != "BPE") Unsupported(origin, "tokenizer model '" + type + "'");
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    if (!IsNullOrEmpty(model, key, origin)) Unsupported(origin, std::string("BPE ") + key);
  }
  if (HasKey(model, "dropout") && model.at(tvm::ffi::String("dropout")) != nullptr) {
    Unsupported(origin, "BPE dropout");
  }
  const auto flag = [&](const char* key) { return HasKey(model, key) && GetBool(model, key, origin); };
  bpe.ignore_merges_ = flag("ignore_merges");
  bpe.byte_fallback_ = flag("byte_fallback");
  bpe.fuse_unk_ = flag("fuse_unk");
  json::Object vocab = GetObject(model, "vocab", origin);
  bpe.vocab_.reserve(vocab.size());
  for (const auto& [token, id] : vocab) {
    bpe.vocab_[AsString(token, origin + " vocab")] = static_cast<int32_t>(AsInt(id, origin + " id"));
  }
  if (!IsNullOrEmpty(model, "unk_token", origin)) {
    bpe.unk_id_ = bpe.IdOf(GetString(model, "unk_token", origin), origin + " unk_token");
  }
  json::Array merges = GetArray(model, "merges", origin);
  bpe.merges_.reserve(merges.size());
  int32_t rank = 0;
  for (const auto& merge : merges) {
    auto [left, right] = MergePair(merge, origin);
    // As in HF tokenizers, a repeated pair keeps its last rank.
    bpe.merges_[PairKey(bpe.IdOf(left, origin), bpe.IdOf(right, origin))] =
        Merge{rank++, bpe.IdOf(left + right, origin + " merge result")};
  }
  return bpe;
}

int32_t BpeModel::IdOf(const std::string& token, const std::string& origin) const {
  auto found = vocab_.find(token);
  if (found == vocab_.end()) {
    throw EmbedError(VLLM_TVM_ERR_BUNDLE, origin + ": '" + token + "' is not in the vocabulary");
  }
  return found->second;
}

std::vector<std::string> BpeModel::IdToToken() const {
  int32_t max_id = -1;
  for (const auto& [token, id] : vocab_) max_id = std::max(max_id, id);
  std::vector<std::string> tokens(static_cast<size_t>(max_id + 1));
  for (const auto& [token, id] : vocab_) tokens[static_cast<size_t>(id)] = token;
  return tokens;
}

std::vector<int32_t> BpeModel::InitialSymbols(const std::string& word) const {
  std::vector<int32_t> symbols;
  bool pending_unk = false;  // an unknown run not yet emitted (fused when fuse_unk)
  for (const CodePoint& point : DecodeUtf8(word)) {
    const std::string character = word.substr(point.offset, point.length);
    auto found = vocab_.find(character);
    if (found != vocab_.end()) {
      if (pending_unk) symbols.push_back(unk_id_);
      pending_unk = false;
      symbols.push_back(found->second);
      continue;
    }
    if (byte_fallback_) {
      std::vector<int32_t> bytes;
      for (unsigned char byte : character) {
        char name[8];
        std::snprintf(name, sizeof(name), "<0x%02X>", byte);
        auto piece = vocab_.find(name);
        if (piece == vocab_.end()) break;
        bytes.push_back(piece->second);
      }
      if (bytes.size() == character.size()) {
        // HF tokenizers leaves a pending unknown for later here too.
        symbols.insert(symbols.end(), bytes.begin(), bytes.end());
        continue;
      }
    }
    if (unk_id_ < 0) {
      char code[16];
      std::snprintf(code, sizeof(code), "U+%04X", point.value);
      throw EmbedError(VLLM_TVM_ERR_UNSUPPORTED,
                       std::string("character ") + code +
                           " has no token (the vocabulary has no unknown token and no byte "
                           "fallback for it)");
    }
    if (pending_unk && !fuse_unk_) symbols.push_back(unk_id_);
    pending_unk = true;
  }
  if (pending_unk) symbols.push_back(unk_id_);
  return symbols;
}

std::vector<int32_t> BpeModel::MergeAll(std::vector<int32_t> symbols) const {
  const size_t size = symbols.size();
  const size_t none = SIZE_MAX;
  std::vector<size_t> prev(size), next(size);
  std::vector<bool> removed(size, false);
  for (size_t i = 0; i < size; ++i) {
    prev[i] = i == 0 ? none : i - 1;
    next[i] = i + 1 < size ? i + 1 : none;
  }
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<Candidate>> queue;
  const auto offer = [&](size_t position) {
    if (position == none || next[position] == none) return;
    auto found = merges_.find(PairKey(symbols[position], symbols[next[position]]));
    if (found != merges_.end()) {
      queue.push(Candidate{found->second.rank, position, found->second.merged_id});
    }
  };
  for (size_t i = 0; i + 1 < size; ++i) offer(i);
  while (!queue.empty()) {
    Candidate top = queue.top();
    queue.pop();
    if (removed[top.position] || next[top.position] == none) continue;
    const size_t right = next[top.position];
    auto current = merges_.find(PairKey(symbols[top.position], symbols[right]));
    if (current == merges_.end() || current->second.merged_id != top.merged_id) continue;
    symbols[top.position] = top.merged_id;
    removed[right] = true;
    next[top.position] = next[right];
    if (next[right] != none) prev[next[right]] = top.position;
    offer(prev[top.position]);
    offer(top.position);
  }
  std::vector<int32_t> merged;
  for (size_t i = 0; i < size; ++i) {
    if (!removed[i]) merged.push_back(symbols[i]);
  }
  return merged;
}

void BpeModel::Encode(const std::string& word, std::vector<int32_t>& ids) const {
  if (ignore_merges_) {
    auto whole = vocab_.find(word);
    if (whole != vocab_.end()) {
      ids.push_back(whole->second);
      return;
    }
  }
  for (int32_t id : MergeAll(InitialSymbols(word))) ids.push_back(id);
}

}  // namespace vllm_tvm_embed
