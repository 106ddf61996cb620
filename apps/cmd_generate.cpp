// `actorllm generate`: offline generation for one prompt, on one shard in this process.
#include "apps/command_registry.hpp"

#include "kernels/collective.hpp"
#include "kernels/cpu/sampling.hpp"
#include "model/kv_cache.hpp"
#include "model/llama_model.hpp"
#include "model/model_source.hpp"
#include "text/tokenizer.hpp"
#include "util/json_writer.hpp"
#include "util/log.hpp"
#include "util/thread_pool.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <memory>
#include <optional>
#include <stdexcept>

namespace actorllm::app {
namespace {

struct generate_options {
  std::string model_dir;
  std::string tokenizer_dir;
  std::string prompt;
  std::string prompt_ids;
  int64_t max_tokens = 16;
  float temperature = 1.0f;
  float top_p = 1.0f;
  int32_t top_k = 0;
  float min_p = 0.0f;
  float repetition_penalty = 1.0f;
  float presence_penalty = 0.0f;
  float frequency_penalty = 0.0f;
  uint64_t seed = 0;
  bool ignore_eos = false;
  std::string output = "text";
  std::string load_format = "auto";
  std::string dtype_name = "auto";
  int64_t block_size = 16;
  int64_t max_model_len = 0;
  int64_t max_num_batched_tokens = 2048;
  int threads = 0;
};

std::vector<int32_t> parse_id_list(const std::string& s, const std::string& flag) {
  std::vector<int32_t> ids;
  size_t i = 0;
  while (i <= s.size()) {
    size_t comma = s.find(',', i);
    if (comma == std::string::npos)
      comma = s.size();
    std::string_view part{s.data() + i, comma - i};
    while (!part.empty() && part.front() == ' ')
      part.remove_prefix(1);
    while (!part.empty() && part.back() == ' ')
      part.remove_suffix(1);
    int32_t v = 0;
    auto [end, ec] = std::from_chars(part.data(), part.data() + part.size(), v);
    if (part.empty() || ec != std::errc{} || end != part.data() + part.size() || v < 0)
      throw std::invalid_argument(fmt::format("{}: '{}' is not a non-negative token id", flag, std::string{part}));
    ids.push_back(v);
    i = comma + 1;
  }
  return ids;
}

int run_generate(const generate_options& o) {
  namespace fs = std::filesystem;
  auto format = model::parse_load_format(o.load_format);
  if (!format)
    throw std::invalid_argument(
        fmt::format("--load-format: '{}' is not one of auto, safetensors, dummy", o.load_format));
  std::optional<dtype> weight_dtype;
  if (o.dtype_name != "auto") {
    weight_dtype = parse_dtype(o.dtype_name);
    if (!weight_dtype)
      throw std::invalid_argument(
          fmt::format("--dtype: '{}' is not one of auto, float32, float16, bfloat16", o.dtype_name));
  }
  if (o.max_tokens < 1)
    throw std::invalid_argument(fmt::format("--max-tokens: must be at least 1, got {}", o.max_tokens));
  if (o.temperature < 0)
    throw std::invalid_argument(fmt::format("--temperature: must be >= 0, got {}", o.temperature));
  if (!(o.top_p > 0 && o.top_p <= 1))
    throw std::invalid_argument(fmt::format("--top-p: must be in (0, 1], got {}", o.top_p));
  if (o.min_p < 0 || o.min_p > 1)
    throw std::invalid_argument(fmt::format("--min-p: must be in [0, 1], got {}", o.min_p));
  if (o.block_size < 1 || o.block_size > 256)
    throw std::invalid_argument(fmt::format("--block-size: must be in [1, 256], got {}", o.block_size));
  if (o.output != "text" && o.output != "json")
    throw std::invalid_argument(fmt::format("--output: '{}' is not one of text, json", o.output));

  // Tokenizer: needed for --prompt and for the output text; a dummy model dir may have none.
  fs::path tok_dir = o.tokenizer_dir.empty() ? fs::path{o.model_dir} : fs::path{o.tokenizer_dir};
  std::unique_ptr<text::tokenizer> tok;
  if (fs::exists(tok_dir / "tokenizer.json"))
    tok = std::make_unique<text::tokenizer>(text::tokenizer::from_directory(tok_dir));

  std::vector<int32_t> prompt;
  if (!o.prompt_ids.empty()) {
    prompt = parse_id_list(o.prompt_ids, "--prompt-ids");
  } else {
    if (!tok)
      throw std::invalid_argument(
          fmt::format("--prompt needs a tokenizer, and {} has no tokenizer.json (give --tokenizer or --prompt-ids)",
                      tok_dir.string()));
    prompt = tok->encode(o.prompt, /*add_special_tokens=*/true);
  }
  if (prompt.empty())
    throw std::invalid_argument("the prompt is empty");

  thread_pool pool{o.threads > 0 ? o.threads : thread_pool::global().size()};
  model::shard_spec shard;
  model::load_options load;
  load.format = *format;
  load.weight_dtype = weight_dtype;
  load.seed = o.seed;
  auto loaded = model::load_shard(o.model_dir, shard, load);
  const auto& cfg = loaded.config;
  for (int32_t id : prompt)
    if (id >= cfg.n_vocab)
      throw std::invalid_argument(fmt::format("prompt token id {} is outside the vocabulary of {}", id, cfg.n_vocab));

  int64_t max_model_len = cfg.max_position_embeddings;
  if (o.max_model_len > 0)
    max_model_len = o.max_model_len;
  const int64_t n_prompt = static_cast<int64_t>(prompt.size());
  if (n_prompt + o.max_tokens > max_model_len)
    throw std::invalid_argument(
        fmt::format("the prompt ({} tokens) plus --max-tokens ({}) is {} tokens, over the maximum model length of {}",
                    n_prompt, o.max_tokens, n_prompt + o.max_tokens, max_model_len));

  single_rank_collective comm;
  model::llama_model llm{cfg, std::move(loaded.weights), shard, comm, pool};
  const int64_t total = n_prompt + o.max_tokens;
  const int64_t n_blocks = (total + o.block_size - 1) / o.block_size;
  model::kv_cache cache{llm.cache_shape(o.block_size), n_blocks};
  std::vector<int32_t> block_table(static_cast<size_t>(n_blocks));
  for (int64_t b = 0; b < n_blocks; ++b)
    block_table[static_cast<size_t>(b)] = static_cast<int32_t>(b);

  cpu::sampling_params sp;
  sp.temperature = o.temperature;
  sp.top_p = o.top_p;
  sp.top_k = o.top_k;
  sp.min_p = o.min_p;
  sp.repetition_penalty = o.repetition_penalty;
  sp.presence_penalty = o.presence_penalty;
  sp.frequency_penalty = o.frequency_penalty;
  cpu::sampler_rng rng{o.seed};

  std::vector<int32_t> output;
  std::string finish_reason = "length";
  std::vector<float> logits;
  // Prefill in chunks of at most max_num_batched_tokens; only the last chunk is sampled.
  for (int64_t begin = 0; begin < n_prompt;) {
    int64_t len = std::min(o.max_num_batched_tokens, n_prompt - begin);
    model::forward_batch batch;
    batch.add_sequence(std::span<const int32_t>{prompt}.subspan(static_cast<size_t>(begin), static_cast<size_t>(len)),
                       static_cast<int32_t>(begin), block_table, begin + len == n_prompt);
    logits = llm.forward(batch, cache);
    begin += len;
  }
  while (true) {
    cpu::sample_result r = cpu::sample(logits.data(), cfg.n_vocab, sp, prompt, output, rng);
    output.push_back(r.token);
    bool is_eos = std::find(cfg.eos_token_ids.begin(), cfg.eos_token_ids.end(), r.token) != cfg.eos_token_ids.end();
    if (is_eos && !o.ignore_eos) {
      finish_reason = "stop";
      break;
    }
    if (static_cast<int64_t>(output.size()) >= o.max_tokens)
      break;
    model::forward_batch batch;
    int32_t tokens[1] = {r.token};
    batch.add_sequence(tokens, static_cast<int32_t>(n_prompt + static_cast<int64_t>(output.size()) - 1), block_table,
                       true);
    logits = llm.forward(batch, cache);
  }

  std::string text = tok ? tok->decode(output, /*skip_special_tokens=*/true) : std::string{};
  if (o.output == "json") {
    json_writer w;
    w.begin_object();
    w.key("prompt_ids").array(prompt);
    w.key("output_ids").array(output);
    w.key("text").value(text);
    w.key("finish_reason").value(finish_reason);
    w.end_object();
    std::printf("%s\n", w.str().c_str());
  } else {
    std::printf("%s\n", text.c_str());
  }
  return 0;
}

command_registration generate_command{
    "generate", "Generate a completion for one prompt (offline, in this process)", [](CLI::App& sub) {
      auto o = std::make_shared<generate_options>();
      sub.add_option("--model", o->model_dir, "Model directory (Hugging Face layout: config.json, *.safetensors)")
          ->required();
      sub.add_option("--tokenizer", o->tokenizer_dir, "Tokenizer directory (default: the model directory)");
      auto* p = sub.add_option("--prompt", o->prompt, "Prompt text (tokenized with the model's tokenizer)");
      auto* pi = sub.add_option("--prompt-ids", o->prompt_ids, "Prompt as comma-separated token ids");
      p->excludes(pi);
      sub.add_option("--max-tokens", o->max_tokens, "Maximum number of tokens to generate")->capture_default_str();
      sub.add_option("--temperature", o->temperature, "Sampling temperature (0 = greedy)")->capture_default_str();
      sub.add_option("--top-p", o->top_p, "Nucleus sampling probability mass")->capture_default_str();
      sub.add_option("--top-k", o->top_k, "Keep the k most likely tokens (0 = off)")->capture_default_str();
      sub.add_option("--min-p", o->min_p, "Drop tokens below min_p times the top probability")->capture_default_str();
      sub.add_option("--repetition-penalty", o->repetition_penalty, "Penalty for tokens in prompt and output")
          ->capture_default_str();
      sub.add_option("--presence-penalty", o->presence_penalty, "Penalty for tokens present in the output")
          ->capture_default_str();
      sub.add_option("--frequency-penalty", o->frequency_penalty, "Penalty per occurrence in the output")
          ->capture_default_str();
      sub.add_option("--seed", o->seed, "Seed of the sampler (and of dummy weights)")->capture_default_str();
      sub.add_flag("--ignore-eos", o->ignore_eos, "Keep generating past end-of-sequence tokens");
      sub.add_option("--output", o->output, "Output format: text or json")->capture_default_str();
      sub.add_option("--load-format", o->load_format, "auto, safetensors, or dummy (random weights)")
          ->capture_default_str();
      sub.add_option("--dtype", o->dtype_name, "Weight dtype: auto, float32, float16, bfloat16")->capture_default_str();
      sub.add_option("--block-size", o->block_size, "Tokens per KV-cache block")->capture_default_str();
      sub.add_option("--max-model-len", o->max_model_len, "Context length limit (default: the model's)");
      sub.add_option("--max-num-batched-tokens", o->max_num_batched_tokens, "Prefill chunk size")
          ->capture_default_str();
      sub.add_option("--num-threads", o->threads, "CPU threads (default: all cores)");
      return [o]() {
        if (o->prompt.empty() && o->prompt_ids.empty())
          throw std::invalid_argument("give --prompt TEXT or --prompt-ids 1,2,3");
        return run_generate(*o);
      };
    }};

}  // namespace
}  // namespace actorllm::app
