// `actorllm tokenize`: encodes text with a model's Hugging Face tokenizer and prints the ids and tokens.
#include "apps/command_registry.hpp"
#include "text/tokenizer.hpp"
#include "util/json_writer.hpp"

#include <fmt/format.h>

#include <memory>

namespace actorllm::app {
namespace {

struct tokenize_options {
  std::string tokenizer_dir;
  std::string text;
  bool add_special_tokens = false;
  std::string output = "text";
};

int run_tokenize(const tokenize_options& o) {
  const auto tok = text::tokenizer::from_directory(o.tokenizer_dir);
  const std::vector<int32_t> ids = tok.encode(o.text, o.add_special_tokens);
  if (o.output == "json") {
    std::vector<std::string> tokens;
    tokens.reserve(ids.size());
    for (int32_t id : ids)
      tokens.push_back(tok.id_to_token(id));
    json_writer w;
    w.begin_object().key("ids").begin_array();
    for (int32_t id : ids)
      w.value(id);
    w.end_array().key("tokens").array(tokens).end_object();
    fmt::print("{}\n", w.str());
    return 0;
  }
  // Tokens are shown JSON-quoted so that spaces, newlines and control bytes stay visible.
  fmt::print("{} tokens\n", ids.size());
  for (int32_t id : ids) {
    std::string quoted;
    append_json_string(quoted, tok.id_to_token(id));
    fmt::print("{:>8}  {}{}\n", id, quoted, tok.is_special(id) ? "  (special)" : "");
  }
  return 0;
}

const command_registration registration{
    "tokenize", "Encode text to token ids with a model's tokenizer (tokenizer.json)", [](CLI::App& sub) {
      auto o = std::make_shared<tokenize_options>();
      sub.add_option("--tokenizer", o->tokenizer_dir, "Model or tokenizer directory holding tokenizer.json")
          ->required();
      sub.add_option("--text", o->text, "Text to encode")->required();
      sub.add_flag("--add-special-tokens", o->add_special_tokens,
                   "Apply the post-processor (BOS etc.) as for a prompt");
      sub.add_option("--output", o->output, "Output format: text (readable) or json")
          ->check(CLI::IsMember({"text", "json"}));
      return [o] { return run_tokenize(*o); };
    }};

}  // namespace
}  // namespace actorllm::app
