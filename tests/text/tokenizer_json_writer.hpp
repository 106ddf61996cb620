// Builds small tokenizer.json files for tests of features and errors that the staged tokenizers do not cover.
#pragma once

#include "support/test_paths.hpp"

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

namespace actorllm::test {

/// The parts of a tokenizer.json, each as JSON text.
struct tokenizer_json_parts {
  std::string model;
  std::string normalizer = "null";
  std::string pre_tokenizer = "null";
  std::string post_processor = "null";
  std::string decoder = "null";
  std::string added_tokens = "[]";
  std::string extra;  // more top-level members, e.g. R"("foo": 1,)"
};

inline std::string tokenizer_json(const tokenizer_json_parts& p) {
  return R"({"version": "1.0", "truncation": null, "padding": null,)" + p.extra + R"("added_tokens": )" +
         p.added_tokens + R"(, "normalizer": )" + p.normalizer + R"(, "pre_tokenizer": )" + p.pre_tokenizer +
         R"(, "post_processor": )" + p.post_processor + R"(, "decoder": )" + p.decoder + R"(, "model": )" + p.model +
         "}";
}

/// A BPE model over the given vocabulary (ids in order) and merges ("a b").
inline std::string bpe_model_json(const std::vector<std::string>& vocab, const std::vector<std::string>& merges,
                                  const std::string& options = "") {
  std::string v = "{";
  for (size_t i = 0; i < vocab.size(); ++i)
    v += (i ? ", \"" : "\"") + vocab[i] + "\": " + std::to_string(i);
  v += "}";
  std::string m = "[";
  for (size_t i = 0; i < merges.size(); ++i)
    m += (i ? ", \"" : "\"") + merges[i] + "\"";
  m += "]";
  return R"({"type": "BPE", "dropout": null, )" + options + R"("vocab": )" + v + R"(, "merges": )" + m + "}";
}

/// An added-token entry.
inline std::string added_token_json(int id, const std::string& content, bool special, const std::string& flags = "") {
  return R"({"id": )" + std::to_string(id) + R"(, "content": ")" + content + R"(", )" + flags + R"("special": )" +
         (special ? "true" : "false") + "}";
}

/// Loads a tokenizer from `dir` and deletes the directory (tests write one per case).
template <class F>
auto use_and_remove(const std::filesystem::path& dir, F&& use) {
  struct remover {
    std::filesystem::path dir;
    ~remover() {
      std::error_code ec;
      std::filesystem::remove_all(dir, ec);
    }
  } cleanup{dir};
  return use(dir);
}

/// Writes files into a fresh temporary directory and returns it.
inline std::filesystem::path write_tokenizer_dir(const std::string& tokenizer_json_text,
                                                 const std::string& config_json = "",
                                                 const std::string& chat_template_jinja = "") {
  const auto dir = make_temp_dir("actorllm-tokenizer");
  std::ofstream{dir / "tokenizer.json"} << tokenizer_json_text;
  if (!config_json.empty())
    std::ofstream{dir / "tokenizer_config.json"} << config_json;
  if (!chat_template_jinja.empty())
    std::ofstream{dir / "chat_template.jinja"} << chat_template_jinja;
  return dir;
}

}  // namespace actorllm::test
