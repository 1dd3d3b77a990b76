#include "bpe_tokenizer.h"

#include <algorithm>
#include <climits>

#include "error.h"
#include "unicode.h"

namespace vllm_tvm_embed {
namespace {

[[noreturn]] void Unsupported(const std::string& origin, const std::string& what) {
  throw EmbedError(VLLM_TVM_ERR_UNSUPPORTED, origin + ": " + what + " is not supported");
}

// "a b" or ["a", "b"]: both spellings of a merge in tokenizer.json.
std::string MergeKey(const json::Value& merge, const std::string& origin) {
  if (auto pair = merge.try_cast<json::Array>()) {
    if (pair->size() != 2) Unsupported(origin, "a merge that is not a pair");
    return AsString((*pair)[0], origin) + " " + AsString((*pair)[1], origin);
  }
  return AsString(merge, origin + " merge");
}

}  // namespace

BpeTokenizer::BpeTokenizer(const std::string& path, int32_t bos_token_id, bool add_bos_token)
    : bos_token_id_(bos_token_id), add_bos_token_(add_bos_token) {
  json::Object root = ParseJsonObject(ReadTextFile(path), path);
  if (HasKey(root, "normalizer")) Unsupported(path, "a normalizer");
  json::Object model = GetObject(root, "model", path);
  const std::string type = HasKey(model, "type") ? GetString(model, "type", path) : "BPE";
  if (type != "BPE") Unsupported(path, "tokenizer model '" + type + "'");
  if (HasKey(model, "byte_fallback") && GetBool(model, "byte_fallback", path)) {
    Unsupported(path, "BPE byte_fallback");
  }
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    if (HasKey(model, key) && !GetString(model, key, path).empty()) {
      Unsupported(path, std::string("BPE ") + key);
    }
  }
  ignore_merges_ = HasKey(model, "ignore_merges") && GetBool(model, "ignore_merges", path);
  pre_tokenizer_ = PreTokenizer::FromJson(root.at(tvm::ffi::String("pre_tokenizer")), path);
  if (HasKey(root, "decoder") &&
      GetString(GetObject(root, "decoder", path), "type", path) != "ByteLevel") {
    Unsupported(path, "decoder '" + GetString(GetObject(root, "decoder", path), "type", path) +
                          "'");
  }

  for (const auto& [token, id] : GetObject(model, "vocab", path)) {
    vocab_[AsString(token, path + " vocab")] = static_cast<int32_t>(AsInt(id, path + " id"));
  }
  int32_t rank = 0;
  for (const auto& merge : GetArray(model, "merges", path)) {
    merge_ranks_.emplace(MergeKey(merge, path), rank++);
  }
  for (const auto& value : GetArray(root, "added_tokens", path)) {
    json::Object added = AsObject(value, path + " added token");
    AddedToken token{GetString(added, "content", path),
                     static_cast<int32_t>(GetInt(added, "id", path)),
                     GetBool(added, "special", path)};
    vocab_[token.content] = token.id;
    if (token.special) special_ids_.insert(token.id);
    if (!token.content.empty()) added_tokens_.push_back(token);
  }
  std::stable_sort(added_tokens_.begin(), added_tokens_.end(),
                   [](const AddedToken& a, const AddedToken& b) {
                     return a.content.size() > b.content.size();
                   });
  int32_t max_id = -1;
  for (const auto& [token, id] : vocab_) max_id = std::max(max_id, id);
  id_to_token_.resize(static_cast<size_t>(max_id + 1));
  for (const auto& [token, id] : vocab_) id_to_token_[static_cast<size_t>(id)] = token;
  if (HasKey(root, "post_processor")) {
    LoadPostProcessor(root.at(tvm::ffi::String("post_processor")), path);
  }
}

void BpeTokenizer::LoadPostProcessor(const json::Value& spec, const std::string& origin) {
  json::Object processor = AsObject(spec, origin + " post_processor");
  const std::string type = GetString(processor, "type", origin);
  if (type == "ByteLevel") return;  // offsets only
  if (type != "TemplateProcessing") Unsupported(origin, "post-processor '" + type + "'");
  json::Object special_tokens = GetObject(processor, "special_tokens", origin);
  bool after_sequence = false;
  for (const auto& item_value : GetArray(processor, "single", origin)) {
    json::Object item = AsObject(item_value, origin + " template item");
    if (HasKey(item, "Sequence")) {
      after_sequence = true;
      continue;
    }
    const std::string name = GetString(GetObject(item, "SpecialToken", origin), "id", origin);
    for (const auto& id : GetArray(GetObject(special_tokens, name.c_str(), origin), "ids", origin)) {
      (after_sequence ? suffix_ids_ : prefix_ids_)
          .push_back(static_cast<int32_t>(AsInt(id, origin + " template id")));
    }
  }
}

void BpeTokenizer::EncodeWord(const std::string& word, std::vector<int32_t>& ids) const {
  if (ignore_merges_) {
    auto whole = vocab_.find(word);
    if (whole != vocab_.end()) {
      ids.push_back(whole->second);
      return;
    }
  }
  std::vector<std::string> symbols;
  for (const CodePoint& point : DecodeUtf8(word)) {
    symbols.push_back(word.substr(point.offset, point.length));
  }
  while (symbols.size() > 1) {
    int32_t best_rank = INT32_MAX;
    size_t best = 0;
    for (size_t i = 0; i + 1 < symbols.size(); ++i) {
      auto found = merge_ranks_.find(symbols[i] + " " + symbols[i + 1]);
      if (found != merge_ranks_.end() && found->second < best_rank) {
        best_rank = found->second;
        best = i;
      }
    }
    if (best_rank == INT32_MAX) break;
    symbols[best] += symbols[best + 1];
    symbols.erase(symbols.begin() + static_cast<std::ptrdiff_t>(best) + 1);
  }
  for (const std::string& symbol : symbols) {
    auto found = vocab_.find(symbol);
    if (found == vocab_.end()) {
      throw EmbedError(VLLM_TVM_ERR_UNSUPPORTED,
                       "byte-level symbol '" + symbol + "' is missing from the vocabulary");
    }
    ids.push_back(found->second);
  }
}

void BpeTokenizer::EncodeOrdinaryText(const std::string& text, std::vector<int32_t>& ids) const {
  if (text.empty()) return;
  for (const std::string& word : pre_tokenizer_.Split(text)) EncodeWord(word, ids);
}

std::vector<int32_t> BpeTokenizer::Encode(const std::string& text, bool add_special_tokens) const {
  std::vector<int32_t> ids;
  if (add_special_tokens) ids = prefix_ids_;
  size_t plain_start = 0, pos = 0;
  while (pos < text.size()) {
    const AddedToken* match = nullptr;
    for (const AddedToken& token : added_tokens_) {
      if (text.compare(pos, token.content.size(), token.content) == 0) {
        match = &token;
        break;
      }
    }
    if (match == nullptr) {
      ++pos;
      continue;
    }
    EncodeOrdinaryText(text.substr(plain_start, pos - plain_start), ids);
    ids.push_back(match->id);
    pos += match->content.size();
    plain_start = pos;
  }
  EncodeOrdinaryText(text.substr(plain_start), ids);
  if (add_special_tokens) ids.insert(ids.end(), suffix_ids_.begin(), suffix_ids_.end());
  if (add_special_tokens && add_bos_token_ && bos_token_id_ >= 0 &&
      (ids.empty() || ids.front() != bos_token_id_)) {
    ids.insert(ids.begin(), bos_token_id_);
  }
  return ids;
}

std::string BpeTokenizer::DecodeBytes(const std::vector<int32_t>& ids) const {
  std::string bytes;
  for (int32_t id : ids) {
    if (id < 0 || static_cast<size_t>(id) >= id_to_token_.size()) {
      throw EmbedError(VLLM_TVM_ERR_INVALID_ARGUMENT,
                       "token id " + std::to_string(id) + " is outside the vocabulary");
    }
    if (special_ids_.count(id)) continue;
    const std::string& token = id_to_token_[static_cast<size_t>(id)];
    for (const CodePoint& point : DecodeUtf8(token)) {
      int byte = UnicodeToByte(point.value);
      if (byte >= 0) {
        bytes.push_back(static_cast<char>(byte));
      } else {
        bytes.append(token, point.offset, point.length);
      }
    }
  }
  return bytes;
}

std::string BpeTokenizer::Decode(const std::vector<int32_t>& ids) const {
  return SanitizeUtf8(DecodeBytes(ids));
}

}  // namespace vllm_tvm_embed
