#include "bundle.h"

#include <algorithm>

#include "error.h"
#include "json_access.h"
#include "sha256.h"

namespace vllm_tvm_embed {
namespace {

constexpr int64_t kEmbedSchemaVersion = 1;

void VerifyFiles(const std::string& directory, const json::Object& files,
                 const std::string& origin) {
  for (const auto& [name_value, digest_value] : files) {
    std::string name = AsString(name_value, origin + " file name");
    if (name.find('/') != std::string::npos || name == "..") {
      throw EmbedError(VLLM_TVM_ERR_BUNDLE, origin + " lists a path outside the bundle: " + name);
    }
    std::string expected = AsString(digest_value, origin + " sha256 of " + name);
    std::string path = directory + "/" + name;
    std::string actual = Sha256OfFile(path);
    if (actual != expected) {
      throw EmbedError(VLLM_TVM_ERR_BUNDLE, "bundle file " + path + " has sha256 " + actual +
                                                ", " + origin + " says " + expected);
    }
  }
}

void RequireListed(const json::Object& files, const std::string& name, const std::string& origin) {
  if (files.find(tvm::ffi::String(name)) == files.end()) {
    throw EmbedError(VLLM_TVM_ERR_BUNDLE, origin + " does not list " + name);
  }
}

std::vector<ParamSlice> ReadParams(const json::Array& entries, const std::string& origin) {
  std::vector<ParamSlice> params;
  for (const auto& entry_value : entries) {
    json::Object entry = AsObject(entry_value, origin + " param");
    ParamSlice slice;
    slice.name = GetString(entry, "name", origin);
    slice.dtype = GetString(entry, "dtype", origin);
    for (const auto& dim : GetArray(entry, "shape", origin)) {
      slice.shape.push_back(AsInt(dim, origin + " shape of " + slice.name));
    }
    slice.offset = static_cast<uint64_t>(GetInt(entry, "offset", origin));
    slice.nbytes = static_cast<uint64_t>(GetInt(entry, "nbytes", origin));
    params.push_back(std::move(slice));
  }
  return params;
}

}  // namespace

bool ModelBundle::HasFunction(const std::string& name) const {
  return std::find(functions.begin(), functions.end(), name) != functions.end();
}

ModelBundle LoadModelBundle(const std::string& directory) {
  ModelBundle bundle;
  bundle.directory = directory;
  const std::string manifest_origin = directory + "/manifest.json";
  const std::string embed_origin = directory + "/embed.json";
  json::Object manifest = ParseJsonObject(ReadTextFile(manifest_origin), manifest_origin);
  json::Object embed = ParseJsonObject(ReadTextFile(embed_origin), embed_origin);
  if (GetInt(embed, "schema_version", embed_origin) != kEmbedSchemaVersion) {
    throw EmbedError(VLLM_TVM_ERR_BUNDLE, embed_origin + ": unsupported schema_version");
  }

  json::Object artifact_files = GetObject(manifest, "files", manifest_origin);
  json::Object embed_files = GetObject(embed, "files", embed_origin);
  bundle.library_path = directory + "/model.so";
  bundle.params_path = directory + "/" + GetString(embed, "params_file", embed_origin);
  bundle.tokenizer_path = directory + "/" + GetString(embed, "tokenizer_file", embed_origin);
  RequireListed(artifact_files, "model.so", manifest_origin);
  RequireListed(embed_files, GetString(embed, "params_file", embed_origin), embed_origin);
  RequireListed(embed_files, GetString(embed, "tokenizer_file", embed_origin), embed_origin);
  VerifyFiles(directory, artifact_files, manifest_origin);
  VerifyFiles(directory, embed_files, embed_origin);

  bundle.architecture = GetString(manifest, "architecture", manifest_origin);
  bundle.target = GetString(manifest, "target", manifest_origin);
  bundle.dtype = GetString(manifest, "dtype", manifest_origin);
  bundle.tvm_version = GetString(manifest, "tvm_version", manifest_origin);
  for (const auto& name : GetArray(manifest, "functions", manifest_origin)) {
    bundle.functions.push_back(AsString(name, manifest_origin + " function"));
  }
  json::Object config = GetObject(manifest, "model_config", manifest_origin);
  bundle.vocab_size = GetInt(config, "vocab_size", manifest_origin);
  bundle.hidden_size = GetInt(config, "hidden_size", manifest_origin);

  bundle.context_limit = GetInt(embed, "context_limit", embed_origin);
  bundle.max_model_len = GetInt(embed, "max_model_len", embed_origin);
  bundle.max_num_seqs = GetInt(embed, "max_num_seqs", embed_origin);
  bundle.prefill_chunk_size = GetInt(embed, "prefill_chunk_size", embed_origin);
  for (const auto& id : GetArray(embed, "eos_token_ids", embed_origin)) {
    bundle.eos_token_ids.push_back(static_cast<int32_t>(AsInt(id, embed_origin + " eos id")));
  }
  if (HasKey(embed, "bos_token_id")) {
    bundle.bos_token_id = static_cast<int32_t>(GetInt(embed, "bos_token_id", embed_origin));
  }
  bundle.add_bos_token = GetBool(embed, "add_bos_token", embed_origin);
  bundle.params = ReadParams(GetArray(embed, "params", embed_origin), embed_origin);
  return bundle;
}

}  // namespace vllm_tvm_embed
