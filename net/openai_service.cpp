// The OpenAI-compatible routes of `actorllm serve`: see openai_service.hpp.
#include "net/openai_service.hpp"

#include "net/openai/chat_render.hpp"
#include "net/openai/exchange.hpp"
#include "net/openai/generation_config.hpp"
#include "net/openai/requests.hpp"
#include "net/openai/responses.hpp"
#include "text/chat_template.hpp"
#include "text/tokenizer.hpp"
#include "util/json_writer.hpp"
#include "util/log.hpp"

#include <fmt/format.h>
#include <simdjson.h>

#include <algorithm>
#include <ctime>
#include <filesystem>
#include <stdexcept>
#include <string_view>
#include <utility>

namespace actorllm::net {

namespace {

constexpr std::string_view where = "openai";

std::shared_ptr<response_channel> fail(const openai::api_error& e) { return reply(error_response(e)); }

/// GET /v1/models/{model}.
constexpr std::string_view model_path_prefix = "/v1/models/";

}  // namespace

openai_service::openai_service(LLM& llm, service_config config)
    : llm_(llm),
      config_(std::move(config)),
      metrics_(std::make_shared<openai::engine_metrics>(config_.served_model_names.front())),
      // Each data-parallel replica runs max_num_seqs sequences; the queue is shared.
      admission_(config_.max_queued_requests < 0
                     ? -1
                     : llm.info().max_num_seqs * llm.info().data_parallel_size + config_.max_queued_requests),
      created_(static_cast<int64_t>(std::time(nullptr))) {
  const std::filesystem::path dir = config_.tokenizer_path.empty() ? config_.model_path : config_.tokenizer_path;
  if (!config_.skip_tokenizer_init && std::filesystem::exists(dir / "tokenizer.json"))
    tokenizer_ = std::make_unique<text::tokenizer>(text::tokenizer::from_directory(dir));
  if (!config_.chat_template.empty()) {
    chat_template_ = std::make_unique<text::chat_template>(openai::load_chat_template(config_.chat_template));
    if (!tokenizer_)
      log::warning(where, "--chat-template is set but {} has no tokenizer.json: /v1/chat/completions answers 400",
                   dir.string());
  } else if (tokenizer_) {
    if (const auto& source = tokenizer_->chat_template())
      chat_template_ = std::make_unique<text::chat_template>(text::chat_template::parse(*source));
  }
  if (!chat_template_)
    log::warning(where, "{} has no chat template: /v1/chat/completions answers 400", dir.string());
  openai::sampling_defaults defaults = openai::resolve_generation_config(config_.generation_config, config_.model_path);
  if (!defaults.empty())
    log::info(where,
              "Default sampling parameters have been overridden by the model's Hugging Face generation config: {} "
              "(fields a request sets win; --generation-config vllm ignores the file)",
              openai::describe(defaults));
  if (admission_.limit() >= 0)
    log::info(where,
              "At most {} sequences of generation requests at once (max_num_seqs {}{} + max_queued_requests {}); more "
              "get 429",
              admission_.limit(), llm.info().max_num_seqs,
              llm.info().data_parallel_size > 1 ? fmt::format(" x {} replicas", llm.info().data_parallel_size) : "",
              config_.max_queued_requests);
  if (config_.log_stats_interval.count() > 0)
    stats_logger_ = std::make_unique<stats_logger>(
        [&llm](std::function<void(engine_stats)> done) { llm.stats_async(std::move(done)); },
        config_.log_stats_interval);
  loras_ = std::make_unique<lora_service>(llm, config_.enable_lora, config_.served_model_names);
  for (const lora_module& m : config_.lora_modules) {
    auto added = loras_->add(m);
    if (!added)
      throw std::runtime_error("--lora-modules " + m.name + "=" + m.path + ": " + added.error().message);
    log::info(where, "Serving LoRA adapter '{}' from {} (id {})", m.name, m.path, added->id);
  }
  preprocessor_ = std::make_unique<openai::preprocessor>(
      llm_, tokenizer_.get(), chat_template_.get(), *loras_, admission_,
      openai::preprocess_settings{.limits = parse_limits(),
                                  .defaults = defaults,
                                  .structured_tokenizer_dir = std::filesystem::absolute(dir).string(),
                                  .structured_limits = config_.structured_limits,
                                  .reasoning_parser = config_.reasoning_parser,
                                  .tool_call_parser = config_.tool_call_parser,
                                  .enable_auto_tool_choice = config_.enable_auto_tool_choice,
                                  .content_as_parts = config_.chat_template_content_format == "openai",
                                  .enable_force_include_usage = config_.enable_force_include_usage,
                                  .enable_prompt_tokens_details = config_.enable_prompt_tokens_details,
                                  .return_tokens_as_token_ids = config_.return_tokens_as_token_ids,
                                  .max_queued_requests = config_.max_queued_requests});
  preprocess_ = std::make_unique<handler_pool>(config_.preprocess_threads);
}

openai_service::~openai_service() = default;

void openai_service::begin_drain() { *draining_ = true; }

bool openai_service::stop_preprocessing(std::chrono::steady_clock::time_point deadline) {
  return preprocess_->stop(deadline);
}

void openai_service::install(router& r) {
  using openai::endpoint;
  // Parsing, chat rendering, constraint compiling and tokenizing run on the preprocessing threads.
  auto off = [this](router::route_handler h) { return preprocess_->offload(std::move(h)); };
  auto generating = [this, off](endpoint kind) {
    return off([this, kind](const http_request& q) { return generate(kind, q); });
  };
  r.add("POST", "/v1/completions", generating(endpoint::completions));
  r.add("POST", "/v1/chat/completions", generating(endpoint::chat));
  r.add("POST", "/v1/chat/completions/batch", generating(endpoint::chat_batch));
  r.add("POST", "/tokenize", off([this](const http_request& q) { return tokenize(q); }));
  r.add("POST", "/detokenize", off([this](const http_request& q) { return detokenize(q); }));
  r.add("GET", "/v1/models", [this](const http_request&) { return models(); });
  loras_->install(r);
  r.add_prefix("GET", std::string{model_path_prefix}, [this](const http_request& q) {
    return model(percent_decode(std::string_view{q.target}.substr(model_path_prefix.size())));
  });
  r.add("GET", "/health", [this](const http_request&) { return health(); });
  r.add("GET", "/metrics", [this](const http_request&) { return metrics(); });
  r.add("POST", "/reset_prefix_cache", [this](const http_request&) { return reset_prefix_cache(); });
  r.add("GET", "/version", [](const http_request&) { return reply(json_response(200, openai::version_json())); });
  // SageMaker's entry point (vLLM's too): a chat completions body or a completions body, told apart by its fields.
  r.add("POST", "/invocations", off([this](const http_request& q) { return invocations(q); }));
  // vLLM's load probe: sequences admitted and not finished.
  r.add("GET", "/load", [this](const http_request&) {
    json_writer w;
    w.begin_object().key("server_load").value(admission_.active()).end_object();
    return reply(json_response(200, w.take()));
  });
}

std::shared_ptr<response_channel> openai_service::generate(openai::endpoint kind, const http_request& req) {
  auto prepared = preprocessor_->prepare(kind, req);
  if (!prepared)
    return fail(prepared.error());
  return openai::exchange::start(llm_, metrics_, std::move(*prepared));
}

std::shared_ptr<response_channel> openai_service::invocations(const http_request& req) {
  if (auto bad = openai::check_json_content_type(req))
    return fail(*bad);
  simdjson::dom::parser parser;
  simdjson::dom::object body;
  if (parser.parse(req.body).get(body) != simdjson::SUCCESS)
    return fail(openai::api_error::bad_request("/invocations takes a JSON object", ""));
  simdjson::dom::element unused;
  if (body["messages"].get(unused) == simdjson::SUCCESS)
    return generate(openai::endpoint::chat, req);
  if (body["prompt"].get(unused) == simdjson::SUCCESS)
    return generate(openai::endpoint::completions, req);
  return fail(openai::api_error::bad_request(
      "/invocations takes a chat completions body (with messages) or a completions body (with prompt); this one has "
      "neither",
      ""));
}

openai::parse_limits openai_service::parse_limits() const {
  return {.max_body_bytes = config_.max_body_bytes,
          .max_logprobs = config_.max_logprobs,
          .max_n = llm_.info().max_num_seqs,
          .max_stop_strings = config_.max_stop_strings,
          .max_stop_bytes = config_.max_stop_bytes,
          .max_prompts = config_.max_prompts_per_request,
          .max_tools = config_.max_tools,
          .max_template_kwargs = config_.max_chat_template_kwargs,
          .max_bad_words = config_.max_bad_words,
          .structured = config_.structured_limits};
}

std::shared_ptr<response_channel> openai_service::tokenize(const http_request& req) {
  if (auto bad = openai::check_json_content_type(req))
    return fail(*bad);
  if (!tokenizer_)
    return fail(openai::api_error::bad_request("this model has no tokenizer"));
  simdjson::dom::parser parser;
  simdjson::dom::element doc;
  if (parser.parse(req.body).get(doc) != simdjson::SUCCESS || !doc.is_object())
    return fail(openai::api_error::bad_request("the body must be a JSON object"));
  std::vector<int32_t> ids;
  if (doc["messages"].error() == simdjson::SUCCESS) {
    auto parsed = openai::parse_chat_request(req.body, parse_limits());
    if (!parsed)
      return fail(parsed.error());
    auto text = openai::render_chat(chat_template_.get(), *tokenizer_, *parsed,
                                    config_.chat_template_content_format == "openai");
    if (!text)
      return fail(text.error());
    ids = tokenizer_->encode(*text, parsed->add_special_tokens.value_or(false));
  } else {
    std::string_view text;
    if (doc["prompt"].get_string().get(text) != simdjson::SUCCESS)
      return fail(openai::api_error::bad_request("prompt must be a string (or give messages)", "prompt"));
    // add_special_tokens (default true for a prompt, as in vLLM) decides whether bos is added.
    bool add_special = true;
    if (auto f = doc["add_special_tokens"]; f.error() == simdjson::SUCCESS && !f.is_null()) {
      if (f.get_bool().get(add_special) != simdjson::SUCCESS)
        return fail(openai::api_error::bad_request("add_special_tokens must be a boolean", "add_special_tokens"));
    }
    ids = doc["add_special_tokens"].error() == simdjson::SUCCESS ? tokenizer_->encode(text, add_special)
                                                                 : llm_.tokenize(std::string{text});
  }
  json_writer w;
  w.begin_object();
  w.key("tokens").array(ids);
  w.key("count").value(static_cast<int64_t>(ids.size()));
  w.key("max_model_len").value(llm_.info().max_model_len);
  w.end_object();
  return reply(json_response(200, w.take()));
}

std::shared_ptr<response_channel> openai_service::detokenize(const http_request& req) {
  if (auto bad = openai::check_json_content_type(req))
    return fail(*bad);
  if (!tokenizer_)
    return fail(openai::api_error::bad_request("this model has no tokenizer"));
  simdjson::dom::parser parser;
  simdjson::dom::element doc;
  simdjson::dom::array tokens;
  if (parser.parse(req.body).get(doc) != simdjson::SUCCESS || !doc.is_object())
    return fail(openai::api_error::bad_request("the body must be a JSON object"));
  if (doc["tokens"].get_array().get(tokens) != simdjson::SUCCESS)
    return fail(openai::api_error::bad_request("tokens must be a list of token ids", "tokens"));
  std::vector<int32_t> ids;
  for (simdjson::dom::element t : tokens) {
    int64_t id = 0;
    if (t.get_int64().get(id) != simdjson::SUCCESS || id < 0 || id >= llm_.info().n_vocab)
      return fail(openai::api_error::bad_request(
          "tokens must be token ids in [0, " + std::to_string(llm_.info().n_vocab) + ")", "tokens"));
    ids.push_back(static_cast<int32_t>(id));
  }
  json_writer w;
  w.begin_object();
  w.key("prompt").value(tokenizer_->decode(ids));
  w.end_object();
  return reply(json_response(200, w.take()));
}

std::shared_ptr<response_channel> openai_service::models() const {
  std::vector<openai::model_card> cards;
  for (const std::string& name : config_.served_model_names)
    cards.push_back({name, created_, "actorllm", config_.model_path, llm_.info().max_model_len, {}});
  for (openai::model_card& c : loras_->cards(created_, llm_.info().max_model_len))
    cards.push_back(std::move(c));
  return reply(json_response(200, openai::models_json(cards)));
}

std::shared_ptr<response_channel> openai_service::model(const std::string& id) const {
  if (std::find(config_.served_model_names.begin(), config_.served_model_names.end(), id) ==
      config_.served_model_names.end()) {
    for (const openai::model_card& c : loras_->cards(created_, llm_.info().max_model_len))
      if (c.id == id)
        return reply(json_response(200, openai::model_json(c)));
    return fail(openai::api_error::not_found("The model `" + id + "` does not exist.", "model"));
  }
  return reply(json_response(
      200, openai::model_json({id, created_, "actorllm", config_.model_path, llm_.info().max_model_len, {}})));
}

std::shared_ptr<response_channel> openai_service::health() const {
  // 503 whenever no work can be taken (a load balancer's signal): the server drains for shutdown, or no replica
  // serves (failed, restarting, or given up on; LLM::stats says so and why). Never 500, and always an answer.
  if (*draining_)
    return fail(openai::api_error::unavailable("the server is shutting down"));
  auto ch = std::make_shared<response_channel>();
  llm_.stats_async([ch, draining = draining_](engine_stats s) {
    if (*draining)
      ch->respond(error_response(openai::api_error::unavailable("the server is shutting down")));
    else if (s.healthy)
      ch->respond(json_response(200, openai::health_json(s)));
    else
      ch->respond(error_response(openai::api_error::unavailable("engine unhealthy: " + s.failure)));
  });
  return ch;
}

std::shared_ptr<response_channel> openai_service::reset_prefix_cache() {
  auto ch = std::make_shared<response_channel>();
  llm_.reset_prefix_cache_async([ch](int32_t, std::optional<error> failure) {
    if (failure)
      ch->respond(
          error_response(openai::api_error::unavailable(std::string{"engine unavailable: "} + failure->what())));
    else  // vLLM answers 200 with an empty body.
      ch->respond(http_response{200, "text/plain; charset=utf-8", "", {}});
  });
  return ch;
}

std::shared_ptr<response_channel> openai_service::metrics() {
  auto ch = std::make_shared<response_channel>();
  llm_.stats_async([ch, m = metrics_](engine_stats s) {
    m->update(s);
    ch->respond(http_response{200, "text/plain; version=0.0.4; charset=utf-8", m->render(), {}});
  });
  return ch;
}

}  // namespace actorllm::net
