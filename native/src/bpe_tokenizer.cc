#include "bpe_tokenizer.h"

#include <algorithm>

#include "error.h"

namespace vllm_tvm_embed {
namespace {

[[noreturn]] void Unsupported(const std::string& origin, const std::string& what) {
  throw EmbedError(VLLM_TVM_ERR_UNSUPPORTED, origin + ": " + what + " is not supported");
}

json::Value GetOrNull(const json::Object& object, const char* key) {
  return HasKey(object, key) ? object.at(tvm::ffi::String(key)) : json::Value(nullptr);
}

}  // namespace

BpeTokenizer::BpeTokenizer(const std::string& path, int32_t bos_token_id, bool add_bos_token)
    : bos_token_id_(bos_token_id), add_bos_token_(add_bos_token) {
  json::Object root = ParseJsonObject(ReadTextFile(path), path);
  normalizer_ = TextNormalizer::FromJson(GetOrNull(root, "normalizer"), path);
  pre_tokenizer_ = PreTokenizer::FromJson(GetOrNull(root, "pre_tokenizer"), path);
  decoder_ = TokenDecoder::FromJson(GetOrNull(root, "decoder"), path);
  if (pre_tokenizer_.byte_level() != decoder_.byte_level()) {
    Unsupported(path, std::string("a ") + (pre_tokenizer_.byte_level() ? "" : "non-") +
                          "byte-level pre-tokenizer with a " +
                          (decoder_.byte_level() ? "" : "non-") + "byte-level decoder");
  }
  model_ = BpeModel::FromJson(GetObject(root, "model", path), path);
  id_to_token_ = model_.IdToToken();

  for (const auto& value : GetArray(root, "added_tokens", path)) {
    json::Object added = AsObject(value, path + " added token");
    AddedToken token{GetString(added, "content", path),
                     static_cast<int32_t>(GetInt(added, "id", path)),
                     GetBool(added, "special", path)};
    if (!normalizer_.empty() && HasKey(added, "normalized") &&
        GetBool(added, "normalized", path)) {
      Unsupported(path, "added token '" + token.content + "' matched after normalization");
    }
    if (token.id < 0) Unsupported(path, "added token '" + token.content + "' with a negative id");
    if (static_cast<size_t>(token.id) >= id_to_token_.size()) {
      id_to_token_.resize(static_cast<size_t>(token.id) + 1);
    }
    id_to_token_[static_cast<size_t>(token.id)] = token.content;
    if (token.special) special_ids_.insert(token.id);
    if (!token.content.empty()) added_tokens_.push_back(token);
  }
  std::stable_sort(added_tokens_.begin(), added_tokens_.end(),
                   [](const AddedToken& a, const AddedToken& b) {
                     return a.content.size() > b.content.size();
                   });
  if (HasKey(root, "post_processor")) {
    LoadPostProcessor(root.at(tvm::ffi::String("post_processor")), path);
  }
}

void BpeTokenizer::LoadPostProcessor(const json::Value& spec, const std::string& origin) {
  if (spec == nullptr) return;
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

void BpeTokenizer::EncodeOrdinaryText(const std::string& text, bool at_text_start,
                                      std::vector<int32_t>& ids) const {
  if (text.empty()) return;
  for (const std::string& word : pre_tokenizer_.Split(normalizer_.Apply(text), at_text_start)) {
    model_.Encode(word, ids);
  }
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
    EncodeOrdinaryText(text.substr(plain_start, pos - plain_start), plain_start == 0, ids);
    ids.push_back(match->id);
    pos += match->content.size();
    plain_start = pos;
  }
  EncodeOrdinaryText(text.substr(plain_start), plain_start == 0, ids);
  if (add_special_tokens) ids.insert(ids.end(), suffix_ids_.begin(), suffix_ids_.end());
  if (add_special_tokens && add_bos_token_ && bos_token_id_ >= 0 &&
      (ids.empty() || ids.front() != bos_token_id_)) {
    ids.insert(ids.begin(), bos_token_id_);
  }
  return ids;
}

std::string BpeTokenizer::DecodeIds(const std::vector<int32_t>& ids, bool raw_bytes) const {
  std::vector<std::string> tokens;
  for (int32_t id : ids) {
    if (id < 0 || static_cast<size_t>(id) >= id_to_token_.size()) {
      throw EmbedError(VLLM_TVM_ERR_INVALID_ARGUMENT,
                       "token id " + std::to_string(id) + " is outside the vocabulary");
    }
    if (!special_ids_.count(id)) tokens.push_back(id_to_token_[static_cast<size_t>(id)]);
  }
  return decoder_.Decode(std::move(tokens), raw_bytes);
}

std::string BpeTokenizer::DecodeBytes(const std::vector<int32_t>& ids) const {
  return DecodeIds(ids, true);
}

std::string BpeTokenizer::Decode(const std::vector<int32_t>& ids) const {
  return DecodeIds(ids, false);
}

}  // namespace vllm_tvm_embed
