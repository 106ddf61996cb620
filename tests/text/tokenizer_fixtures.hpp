// Shared helpers for the tokenizer tests: the staged tokenizers (loaded once per process) and llama.cpp's
// tokenizer test vectors.
#pragma once

#include "support/test_paths.hpp"
#include "text/tokenizer.hpp"

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace actorllm::test {

/// A tokenizer from shared/models/<name>, loaded once and reused by every test in the process.
inline const text::tokenizer& staged_tokenizer(const std::string& name) {
  static std::map<std::string, text::tokenizer> cache;
  auto it = cache.find(name);
  if (it == cache.end())
    it = cache.emplace(name, text::tokenizer::from_directory(model_dir(name))).first;
  return it->second;
}

/// The staged tokenizers that the fuzz and streaming tests run over.
inline const std::vector<std::string>& staged_tokenizer_names() {
  static const std::vector<std::string> names{"llama2-tokenizer", "tokenizers/llama3", "tokenizers/qwen3",
                                              "tokenizers/mistral", "stories260K"};
  return names;
}

inline std::string read_file(const std::filesystem::path& path) {
  std::ifstream in{path, std::ios::binary};
  if (!in)
    throw std::runtime_error("cannot read " + path.string());
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

/// One llama.cpp test vector: a text and the ids it encodes to without special tokens.
struct vocab_test_case {
  std::string text;
  std::vector<int32_t> ids;
};

/// Reads a llama.cpp `.inp` / `.out` pair: texts separated by "\n__ggml_vocab_test__\n", one line of ids per text.
inline std::vector<vocab_test_case> read_vocab_test_cases(const std::filesystem::path& inp,
                                                          const std::filesystem::path& out) {
  const std::string all = read_file(inp);
  const std::string separator = "\n__ggml_vocab_test__\n";
  std::vector<vocab_test_case> cases;
  size_t pos = 0;
  while (true) {
    const size_t next = all.find(separator, pos);
    if (next == std::string::npos)
      break;
    cases.push_back({all.substr(pos, next - pos), {}});
    pos = next + separator.size();
  }
  std::istringstream lines{read_file(out)};
  std::string line;
  size_t i = 0;
  while (std::getline(lines, line)) {
    if (i >= cases.size())
      throw std::runtime_error(out.string() + " has more lines than " + inp.string() + " has texts");
    std::istringstream ids{line};
    int32_t id = 0;
    while (ids >> id)
      cases[i].ids.push_back(id);
    ++i;
  }
  if (i != cases.size())
    throw std::runtime_error(out.string() + " has " + std::to_string(i) + " lines for " + std::to_string(cases.size()) +
                             " texts");
  return cases;
}

}  // namespace actorllm::test
