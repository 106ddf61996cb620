// `actorllm generate`: offline generation for one prompt through the embedding API (actorllm::LLM), so the same
// actor graph as a server runs it: TP shards and pipeline stages in this process.
#include "apps/command_registry.hpp"
#include "apps/engine_flags.hpp"
#include "apps/model_flags.hpp"
#include "apps/model_location.hpp"
#include "apps/token_id_list.hpp"

#include "actorllm/llm.hpp"
#include "util/json_writer.hpp"
#include "util/log.hpp"

#include <fmt/format.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <stdexcept>

namespace actorllm::app {
namespace {

struct generate_options {
  std::string model_dir;  ///< a directory or a Hugging Face repo id
  std::string tokenizer_dir;
  std::string revision;
  std::string tokenizer_revision;
  std::string download_dir;
  std::string prompt;
  std::string prompt_ids;
  int64_t max_tokens = 16;
  /// The sampling flags bind straight onto the request's parameters (their defaults are the flags' defaults);
  /// max_tokens and the seed are filled in at the run.
  sampling_params sampling;
  std::string output = "text";
  /// The engine's settings (apps/engine_flags.hpp); --seed seeds the sampler too. model and tokenizer are filled from
  /// the location above.
  engine_config engine;
  std::shared_ptr<engine_flag_texts> engine_texts;
};

int run_generate(generate_options& o) {
  // Flag checks that need no model come first, with the flag's name in the message.
  check_engine_flags(o.engine, *o.engine_texts, engine_command::generate);
  if (o.max_tokens < 1)
    throw std::invalid_argument(fmt::format("--max-tokens: must be at least 1, got {}", o.max_tokens));
  if (o.sampling.temperature < 0)
    throw std::invalid_argument(fmt::format("--temperature: must be >= 0, got {}", o.sampling.temperature));
  if (!(o.sampling.top_p > 0 && o.sampling.top_p <= 1))
    throw std::invalid_argument(fmt::format("--top-p: must be in (0, 1], got {}", o.sampling.top_p));
  if (o.sampling.min_p < 0 || o.sampling.min_p > 1)
    throw std::invalid_argument(fmt::format("--min-p: must be in [0, 1], got {}", o.sampling.min_p));
  if (o.output != "text" && o.output != "json")
    throw std::invalid_argument(fmt::format("--output: '{}' is not one of text, json", o.output));
  std::vector<int32_t> prompt_ids;
  if (!o.prompt_ids.empty())
    prompt_ids = parse_token_id_list(o.prompt_ids, "--prompt-ids");

  // The completion is this command's product: keep stderr to warnings unless ACTORLLM_LOG_LEVEL asks for more
  // (info shows the engine's start-up, e.g. "# CPU blocks: N").
  if (std::getenv("ACTORLLM_LOG_LEVEL") == nullptr)
    log::set_threshold(log::level::warning);

  const model_location where = resolve_model_location({.model = o.model_dir,
                                                       .tokenizer = o.tokenizer_dir,
                                                       .revision = o.revision,
                                                       .tokenizer_revision = o.tokenizer_revision,
                                                       .download_dir = o.download_dir,
                                                       .load_weights = o.engine.load_format != "dummy",
                                                       .tokenizer_needed = true});

  engine_config cfg = o.engine;
  cfg.model = where.model_dir;
  cfg.tokenizer = where.tokenizer_dir;
  cfg.max_num_seqs = 1;
  // Before the weights load (seconds for a large model): the engine reads a tokenizer from tokenizer.json there.
  const std::string tokenizer_dir = where.tokenizer_dir.empty() ? where.model_dir : where.tokenizer_dir;
  auto no_tokenizer = [&] {
    return std::invalid_argument(fmt::format(
        "--prompt needs a tokenizer, and {} has no tokenizer.json (give --tokenizer or --prompt-ids)", tokenizer_dir));
  };
  if (o.prompt_ids.empty() &&
      (cfg.skip_tokenizer_init || !std::filesystem::exists(std::filesystem::path{tokenizer_dir} / "tokenizer.json")))
    throw no_tokenizer();
  LLM llm{cfg};
  if (o.prompt_ids.empty() && !llm.info().has_tokenizer)
    throw no_tokenizer();

  sampling_params sp = o.sampling;
  sp.seed = cfg.seed;
  sp.max_tokens = static_cast<int32_t>(o.max_tokens);
  request_output out = o.prompt_ids.empty() ? llm.generate(prompt{o.prompt}, sp) : llm.generate(prompt{prompt_ids}, sp);
  const completion_output& c = out.outputs.front();
  const std::string finish = c.finish_reason ? std::string{to_string(*c.finish_reason)} : std::string{"length"};

  if (o.output == "json") {
    json_writer w;
    w.begin_object();
    w.key("prompt_ids").array(out.prompt_token_ids);
    w.key("output_ids").array(c.token_ids);
    w.key("text").value(c.text);
    w.key("finish_reason").value(finish);
    w.end_object();
    std::printf("%s\n", w.str().c_str());
  } else {
    std::printf("%s\n", c.text.c_str());
  }
  return 0;
}

command_registration generate_command{
    "generate", "Generate a completion for one prompt (offline, in this process)", [](CLI::App& sub) {
      auto o = std::make_shared<generate_options>();
      sub.add_option("--model", o->model_dir,
                     "Model directory (Hugging Face layout: config.json, *.safetensors), or a Hugging Face repo id "
                     "(org/name) found in the local Hugging Face cache and downloaded when missing")
          ->required();
      sub.add_option("--tokenizer", o->tokenizer_dir,
                     "Tokenizer directory or Hugging Face repo id (default: the model's)");
      add_hub_flags(sub, o->revision, o->tokenizer_revision, o->download_dir);
      auto* p = sub.add_option("--prompt", o->prompt, "Prompt text (tokenized with the model's tokenizer)");
      auto* pi = sub.add_option("--prompt-ids", o->prompt_ids, "Prompt as comma-separated token ids");
      p->excludes(pi);
      sub.add_option("--max-tokens", o->max_tokens, "Maximum number of tokens to generate")->capture_default_str();
      sub.add_option("--temperature", o->sampling.temperature, "Sampling temperature (0 = greedy)")
          ->capture_default_str();
      sub.add_option("--top-p", o->sampling.top_p, "Nucleus sampling probability mass")->capture_default_str();
      sub.add_option("--top-k", o->sampling.top_k, "Keep the k most likely tokens (0 = off)")->capture_default_str();
      sub.add_option("--min-p", o->sampling.min_p, "Drop tokens below min_p times the top probability")
          ->capture_default_str();
      sub.add_option("--repetition-penalty", o->sampling.repetition_penalty, "Penalty for tokens in prompt and output")
          ->capture_default_str();
      sub.add_option("--presence-penalty", o->sampling.presence_penalty, "Penalty for tokens present in the output")
          ->capture_default_str();
      sub.add_option("--frequency-penalty", o->sampling.frequency_penalty, "Penalty per occurrence in the output")
          ->capture_default_str();
      sub.add_flag("--ignore-eos", o->sampling.ignore_eos, "Keep generating past end-of-sequence tokens");
      sub.add_option("--output", o->output, "Output format: text or json")->capture_default_str();
      o->engine_texts = add_engine_flags(sub, o->engine, engine_command::generate);
      return [o]() {
        if (o->prompt.empty() && o->prompt_ids.empty())
          throw std::invalid_argument("give --prompt TEXT or --prompt-ids 1,2,3");
        return run_generate(*o);
      };
    }};

}  // namespace
}  // namespace actorllm::app
