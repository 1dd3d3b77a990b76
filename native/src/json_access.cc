#include "json_access.h"

#include <fstream>
#include <sstream>

#include "error.h"

namespace vllm_tvm_embed {
namespace {

[[noreturn]] void Malformed(const std::string& what, const char* expected) {
  throw EmbedError(VLLM_TVM_ERR_BUNDLE, what + ": expected " + expected);
}

json::Value Get(const json::Object& object, const char* key, const std::string& origin) {
  auto found = object.find(tvm::ffi::String(key));
  if (found == object.end()) {
    throw EmbedError(VLLM_TVM_ERR_BUNDLE, origin + ": missing key '" + key + "'");
  }
  return (*found).second;
}

std::string Where(const std::string& origin, const char* key) { return origin + " '" + key + "'"; }

}  // namespace

std::string ReadTextFile(const std::string& path) {
  std::ifstream stream(path, std::ios::binary);
  if (!stream) throw EmbedError(VLLM_TVM_ERR_BUNDLE, "cannot open " + path);
  std::ostringstream text;
  text << stream.rdbuf();
  return text.str();
}

json::Object ParseJsonObject(const std::string& text, const std::string& origin) {
  tvm::ffi::String error;
  json::Value value = json::Parse(tvm::ffi::String(text), &error);
  if (!error.empty()) {
    throw EmbedError(VLLM_TVM_ERR_BUNDLE, origin + " is not valid JSON: " + std::string(error));
  }
  return AsObject(value, origin);
}

bool HasKey(const json::Object& object, const char* key) {
  auto found = object.find(tvm::ffi::String(key));
  return found != object.end() && (*found).second != nullptr;
}

int64_t AsInt(const json::Value& value, const std::string& what) {
  auto number = value.try_cast<int64_t>();
  if (!number) Malformed(what, "an integer");
  return *number;
}

std::string AsString(const json::Value& value, const std::string& what) {
  auto text = value.try_cast<tvm::ffi::String>();
  if (!text) Malformed(what, "a string");
  return std::string(*text);
}

json::Object AsObject(const json::Value& value, const std::string& what) {
  auto object = value.try_cast<json::Object>();
  if (!object) Malformed(what, "an object");
  return *object;
}

int64_t GetInt(const json::Object& object, const char* key, const std::string& origin) {
  return AsInt(Get(object, key, origin), Where(origin, key));
}

std::string GetString(const json::Object& object, const char* key, const std::string& origin) {
  return AsString(Get(object, key, origin), Where(origin, key));
}

bool GetBool(const json::Object& object, const char* key, const std::string& origin) {
  auto flag = Get(object, key, origin).try_cast<bool>();
  if (!flag) Malformed(Where(origin, key), "true or false");
  return *flag;
}

json::Object GetObject(const json::Object& object, const char* key, const std::string& origin) {
  return AsObject(Get(object, key, origin), Where(origin, key));
}

json::Array GetArray(const json::Object& object, const char* key, const std::string& origin) {
  auto array = Get(object, key, origin).try_cast<json::Array>();
  if (!array) Malformed(Where(origin, key), "an array");
  return *array;
}

}  // namespace vllm_tvm_embed
