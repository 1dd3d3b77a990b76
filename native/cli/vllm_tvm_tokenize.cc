// vllm-tvm-tokenize: libvllm_tvm's tokenizer over a file of texts, for checks against other
// tokenizers (llama.cpp's vocabulary test vectors use this layout).
//
//   vllm-tvm-tokenize TOKENIZER_JSON encode TEXTS   one line of ids per text
//   vllm-tvm-tokenize TOKENIZER_JSON decode IDS     the text of each line of ids
//
// TEXTS holds texts separated by "\n__ggml_vocab_test__\n" lines (decode writes that layout);
// no special tokens are added. A tokenizer.json the library does not support exits with 1
// and the library's message naming what is unsupported.
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "bpe_tokenizer.h"
#include "error.h"
#include "json_access.h"

namespace {

const char kSeparator[] = "\n__ggml_vocab_test__\n";

std::vector<std::string> SplitTexts(const std::string& raw) {
  std::vector<std::string> texts;
  const std::string separator = kSeparator;
  size_t start = 0;
  for (size_t found = raw.find(separator); found != std::string::npos;
       found = raw.find(separator, start)) {
    texts.push_back(raw.substr(start, found - start));
    start = found + separator.size();
  }
  if (start < raw.size()) texts.push_back(raw.substr(start));
  return texts;
}

int Run(const std::string& tokenizer_path, const std::string& mode, const std::string& input) {
  vllm_tvm_embed::BpeTokenizer tokenizer(tokenizer_path, -1, false);
  const std::string raw = vllm_tvm_embed::ReadTextFile(input);
  if (mode == "encode") {
    for (const std::string& text : SplitTexts(raw)) {
      const char* space = "";
      for (int32_t id : tokenizer.Encode(text, false)) {
        std::cout << space << id;
        space = " ";
      }
      std::cout << '\n';
    }
    return 0;
  }
  if (mode != "decode") {
    std::cerr << "vllm-tvm-tokenize: unknown mode '" << mode << "'; expected encode or decode\n";
    return 2;
  }
  std::istringstream lines(raw);
  for (std::string line; std::getline(lines, line);) {
    std::istringstream numbers(line);
    std::vector<int32_t> ids;
    for (int32_t id; numbers >> id;) ids.push_back(id);
    std::cout << tokenizer.Decode(ids) << kSeparator;
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 4) {
    std::cerr << "usage: vllm-tvm-tokenize TOKENIZER_JSON encode|decode FILE\n";
    return 2;
  }
  try {
    return Run(argv[1], argv[2], argv[3]);
  } catch (const vllm_tvm_embed::EmbedError& error) {
    std::cerr << "vllm-tvm-tokenize: " << vllm_tvm_status_name(error.status()) << ": "
              << error.what() << '\n';
  } catch (const std::exception& error) {
    std::cerr << "vllm-tvm-tokenize: " << error.what() << '\n';
  }
  return 1;
}
