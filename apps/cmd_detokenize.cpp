// `actorllm detokenize`: decodes a list of token ids with a model's Hugging Face tokenizer.
#include "apps/command_registry.hpp"
#include "apps/token_id_list.hpp"
#include "text/tokenizer.hpp"

#include <fmt/format.h>

#include <memory>
#include <stdexcept>

namespace actorllm::app {
namespace {

struct detokenize_options {
  std::string tokenizer_dir;
  std::string ids;
  bool skip_special_tokens = false;
};

int run_detokenize(const detokenize_options& o) {
  const auto tok = text::tokenizer::from_directory(o.tokenizer_dir);
  const std::vector<int32_t> ids = parse_token_id_list(o.ids, "--ids");
  // decode() skips unknown ids like Hugging Face does; on the command line that would hide a typo.
  for (int32_t id : ids) {
    if (id < 0 || id >= tok.vocab_size() || tok.id_to_token(id).empty())
      throw std::runtime_error(
          fmt::format("--ids: {} is not a token of this tokenizer (ids 0..{})", id, tok.vocab_size() - 1));
  }
  fmt::print("{}\n", tok.decode(ids, o.skip_special_tokens));
  return 0;
}

const command_registration registration{
    "detokenize", "Decode token ids to text with a model's tokenizer (tokenizer.json)", [](CLI::App& sub) {
      auto o = std::make_shared<detokenize_options>();
      sub.add_option("--tokenizer", o->tokenizer_dir, "Model or tokenizer directory holding tokenizer.json")
          ->required();
      sub.add_option("--ids", o->ids, "Token ids, separated by commas or spaces (e.g. 1,15043,3186)")->required();
      sub.add_flag("--skip-special-tokens", o->skip_special_tokens, "Leave special tokens (BOS, EOS, ...) out");
      return [o] { return run_detokenize(*o); };
    }};

}  // namespace
}  // namespace actorllm::app
