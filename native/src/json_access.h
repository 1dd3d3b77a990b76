// Typed reads from JSON documents parsed by tvm-ffi's parser (tvm::ffi::json), raising
// EmbedError(VLLM_TVM_ERR_BUNDLE) that names the file and key instead of a bad-cast abort.
#pragma once

#include <tvm/ffi/extra/json.h>

#include <cstdint>
#include <string>

namespace vllm_tvm_embed {

namespace json = tvm::ffi::json;

std::string ReadTextFile(const std::string& path);
// Parses `text` (read from `origin`, named in errors) and requires a top-level object.
json::Object ParseJsonObject(const std::string& text, const std::string& origin);

bool HasKey(const json::Object& object, const char* key);
int64_t GetInt(const json::Object& object, const char* key, const std::string& origin);
std::string GetString(const json::Object& object, const char* key, const std::string& origin);
bool GetBool(const json::Object& object, const char* key, const std::string& origin);
json::Object GetObject(const json::Object& object, const char* key, const std::string& origin);
json::Array GetArray(const json::Object& object, const char* key, const std::string& origin);

// Conversions of one value (arrays' elements), with `what` naming it in errors.
int64_t AsInt(const json::Value& value, const std::string& what);
std::string AsString(const json::Value& value, const std::string& what);
json::Object AsObject(const json::Value& value, const std::string& what);

}  // namespace vllm_tvm_embed
