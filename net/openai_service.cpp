#include "net/openai_service.hpp"

#include "net/openai/generation_config.hpp"
#include "net/openai/requests.hpp"
#include "net/openai/responses.hpp"
#include "text/chat_template.hpp"
#include "text/jinja/json.hpp"
#include "text/structured/constraint_cache.hpp"
#include "text/token_text.hpp"
#include "text/tokenizer.hpp"
#include "text/tokenizer_error.hpp"
#include "util/json_writer.hpp"
#include "util/log.hpp"

#include <fmt/format.h>
#include <simdjson.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <condition_variable>
#include <ctime>
#include <deque>
#include <exception>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <sstream>
#include <stdexcept>
#include <string_view>
#include <thread>
#include <utility>

namespace actorllm::net {

/// One thread for the LLM calls that wait for the engine's answer (stats(), reset_prefix_cache()), so that neither the
/// I/O thread nor the delivery thread ever waits on the engine. Drains its queue before it stops.
struct engine_worker {
  engine_worker() : thread([this] { run(); }) {}
  ~engine_worker() {
    {
      std::lock_guard lock{mutex};
      stopping = true;
    }
    wake.notify_one();
    thread.join();
  }
  engine_worker(const engine_worker&) = delete;
  engine_worker& operator=(const engine_worker&) = delete;

  void post(std::function<void()> f) {
    {
      std::lock_guard lock{mutex};
      jobs.push_back(std::move(f));
    }
    wake.notify_one();
  }

 private:
  void run() {
    for (;;) {
      std::function<void()> f;
      {
        std::unique_lock lock{mutex};
        wake.wait(lock, [this] { return stopping || !jobs.empty(); });
        if (jobs.empty())
          return;
        f = std::move(jobs.front());
        jobs.pop_front();
      }
      try {
        f();
      } catch (const std::exception& e) {
        log::error("openai", "engine call failed: {}", e.what());
      }
    }
  }

  std::mutex mutex;
  std::condition_variable wake;
  std::deque<std::function<void()>> jobs;
  bool stopping = false;
  std::thread thread;
};

namespace {

using clock_type = std::chrono::steady_clock;
constexpr std::string_view where = "openai";

double seconds_since(clock_type::time_point t) { return std::chrono::duration<double>(clock_type::now() - t).count(); }

/// One HTTP request's engine requests (one per prompt) and how their progress becomes the response. Callbacks run
/// on actorllm's delivery thread; every member is guarded by `mutex`.
struct job {
  std::mutex mutex;
  LLM* llm = nullptr;
  std::shared_ptr<engine_worker> worker;
  std::shared_ptr<openai::engine_metrics> metrics;
  std::shared_ptr<response_channel> channel;
  openai::response_context ctx;
  bool chat = false;
  bool chat_batch = false;              // /v1/chat/completions/batch: one conversation per prompt, never streamed
  std::vector<std::string> echo_texts;  // chat_batch: each conversation's echo text
  bool stream = false;
  std::optional<openai::completion_stream> completion_chunks;
  std::optional<openai::chat_stream> chat_chunks;
  std::vector<request_output> outputs;
  std::vector<uint64_t> ids;
  std::vector<clock_type::time_point> last_token;  // per prompt
  std::vector<bool> got_token;
  std::size_t remaining = 0;
  bool failed = false;
  admission_gate::slot slot;         // given back once every engine request of this job has ended
  std::optional<lora_request> lora;  // the adapter the request's `model` named
  // The structured-output constraint, held while the job lives: the cache may drop it meanwhile, yet the sampler
  // still finds this one instead of compiling it again.
  std::shared_ptr<const text::structured::token_constraint> constraint;
  clock_type::time_point start = clock_type::now();

  void on_delta(uint32_t p, const stream_delta& d) {
    std::lock_guard lock{mutex};
    if (!d.token_ids.empty()) {
      const auto now = clock_type::now();
      if (!got_token[p])
        metrics->observe_time_to_first_token(std::chrono::duration<double>(now - start).count());
      else
        metrics->observe_inter_token_latency(std::chrono::duration<double>(now - last_token[p]).count());
      got_token[p] = true;
      last_token[p] = now;
    }
    if (!stream || failed)
      return;
    std::string chunk = chat ? chat_chunks->on_delta(d) : completion_chunks->on_delta(p, d);
    if (!chunk.empty())
      channel->send_chunk(std::move(chunk));
  }

  void on_output(uint32_t p, request_output out) {
    std::lock_guard lock{mutex};
    finish_reason reason = finish_reason::length;
    int64_t generated = 0;
    for (const completion_output& c : out.outputs) {
      if (c.finish_reason)
        reason = *c.finish_reason;
      generated += static_cast<int64_t>(c.token_ids.size());
    }
    metrics->observe_finished(reason, static_cast<int64_t>(out.prompt_token_ids.size()), generated,
                              seconds_since(start));
    outputs[p] = std::move(out);
    if (--remaining == 0)
      slot.release();
    if (remaining > 0 || failed)
      return;
    usage_info usage;
    for (const request_output& o : outputs) {
      usage.prompt_tokens += o.usage.prompt_tokens;
      usage.completion_tokens += o.usage.completion_tokens;
      usage.cached_tokens += o.usage.cached_tokens;
    }
    if (stream) {
      // end() writes the usage chunk (when asked for) and `data: [DONE]`.
      channel->send_chunk(chat ? chat_chunks->end(usage) : completion_chunks->end(usage));
      channel->close();
    } else {
      std::string body = chat_batch ? openai::chat_batch_response_json(outputs, ctx, echo_texts)
                         : chat     ? openai::chat_response_json(outputs.front(), ctx)
                                    : openai::completion_response_json(outputs, ctx);
      channel->respond(json_response(200, std::move(body)));
    }
  }

  void on_error(const error& e) {
    std::lock_guard lock{mutex};
    if (remaining > 0)
      --remaining;
    if (remaining == 0)
      slot.release();
    if (failed)
      return;
    failed = true;
    fail_locked(openai::from_engine_error(e));
  }

  void fail_locked(const openai::api_error& e) {
    // A started event stream ends with an error event; otherwise the answer is the error itself.
    channel->fail(error_response(e), openai::sse_event(openai::to_json(e)) + std::string{openai::sse_done()});
  }
};

std::shared_ptr<response_channel> fail(const openai::api_error& e) { return reply(error_response(e)); }

/// What a handler answers once handler_pool::cancelled() says its request is cancelled: nobody reads it when the
/// client hung up; a client of a server that stops gets this 503.
openai::api_error cancelled_request() {
  return openai::api_error::unavailable("the request was cancelled: the server is shutting down");
}

/// Submits every prompt of `j` (its channel, contexts and stream encoders set) and returns its channel.
std::shared_ptr<response_channel> start(const std::shared_ptr<job>& j, std::vector<prompt> prompts,
                                        const sampling_params& params, int32_t priority,
                                        const std::optional<std::string>& cache_salt,
                                        std::span<const request_output> echo_prompts) {
  for (prompt& p : prompts) {
    if (cache_salt)
      p.with_cache_salt(*cache_salt);
    if (j->lora)
      p.with_lora(*j->lora);
  }
  j->outputs.resize(prompts.size());
  j->last_token.resize(prompts.size());
  j->got_token.assign(prompts.size(), false);
  j->remaining = prompts.size();
  std::weak_ptr<job> weak = j;
  // The client is gone: every engine request of the job (each prompt of a list, with its n sequences) is aborted.
  // abort_async only sends the aborts, so thousands of them cost no round trip each to an engine that may be busy
  // (they used to queue one by one on the engine worker, ahead of /health and /metrics).
  j->channel->on_cancel([weak] {
    auto self = weak.lock();
    if (!self)
      return;
    std::vector<uint64_t> ids;
    {
      std::lock_guard lock{self->mutex};
      ids = self->ids;
    }
    for (uint64_t id : ids)
      self->llm->abort_async(id);
  });
  std::vector<uint64_t> to_abort;
  {
    std::lock_guard lock{j->mutex};  // callbacks wait for the ids (submit only sends a message; this is brief)
    if (j->stream) {
      std::string first = j->chat ? j->chat_chunks->begin() : j->completion_chunks->begin(echo_prompts);
      if (!first.empty())
        j->channel->send_chunk(std::move(first));
    }
    for (std::size_t p = 0; p < prompts.size(); ++p) {
      if (handler_pool::cancelled()) {  // the client left (or the server stops): submit nothing more for it
        to_abort = j->ids;
        j->remaining = j->ids.size();
        if (j->remaining == 0)
          j->slot.release();
        j->failed = true;
        j->fail_locked(cancelled_request());
        break;
      }
      const auto index = static_cast<uint32_t>(p);
      stream_callbacks cb;
      cb.on_delta = [j, index](const stream_delta& d) { j->on_delta(index, d); };
      cb.on_output = [j, index](request_output out) { j->on_output(index, std::move(out)); };
      cb.on_error = [j](const error& e) { j->on_error(e); };
      try {
        j->ids.push_back(j->llm->submit(prompts[p], params, std::move(cb), priority));
      } catch (const error& e) {
        to_abort = j->ids;
        j->remaining = j->ids.size();  // only the submitted ones will report back
        if (j->remaining == 0)
          j->slot.release();
        j->failed = true;
        j->fail_locked(openai::from_engine_error(e));
        break;
      }
    }
  }
  for (uint64_t id : to_abort)
    j->llm->abort_async(id);
  return j->channel;
}

/// --chat-template's value: a file's path, or (when no such file exists) the template itself if it looks like
/// Jinja. Throws std::runtime_error naming the problem.
text::chat_template load_chat_template(const std::string& value) {
  std::string source;
  std::string origin;
  std::error_code ec;
  if (std::filesystem::is_regular_file(value, ec)) {
    std::ifstream in{value, std::ios::binary};
    std::stringstream ss;
    ss << in.rdbuf();
    if (!in && !in.eof())
      throw std::runtime_error(fmt::format("--chat-template: cannot read {}", value));
    source = ss.str();
    origin = value;
  } else if (value.find("{{") != std::string::npos || value.find("{%") != std::string::npos) {
    source = value;
    origin = "the inline template";
  } else {
    throw std::runtime_error(
        fmt::format("--chat-template: '{}' is neither a file nor a Jinja template (no {{{{ or {{% in it)", value));
  }
  try {
    return text::chat_template::parse(std::move(source));
  } catch (const std::exception& e) {
    throw std::runtime_error(fmt::format("--chat-template: {} does not parse: {}", origin, e.what()));
  }
}

/// The 429 for a full queue (OpenAI's rate-limit shape: code rate_limit_exceeded, Retry-After).
openai::api_error queue_full(int64_t limit) {
  openai::api_error e = openai::api_error::too_many_requests(
      fmt::format("The server is busy: {} sequences of generation requests are running or queued (max_num_seqs + "
                  "max_queued_requests). Retry later.",
                  limit),
      1);
  e.code = "rate_limit_exceeded";
  return e;
}

/// The sequences a request asks for (n × prompts) against the most the engine can hold at all (max_num_seqs per
/// replica + --max-queued-requests): more could never be admitted, so the answer is a 400 rather than a 429.
std::optional<openai::api_error> check_capacity(int64_t sequences, int32_t n, std::size_t prompts,
                                                const admission_gate& gate, const model_info& info, int64_t max_queued,
                                                std::string_view noun = "prompt", std::string_view param = "n") {
  if (gate.limit() < 0 || sequences <= gate.limit())
    return std::nullopt;
  return openai::api_error::bad_request(
      fmt::format("n × {}s: {} {}{} × n={} = {} sequences, more than the server can hold (--max-num-seqs {}{} + "
                  "--max-queued-requests {} = {})",
                  noun, prompts, noun, prompts == 1 ? "" : "s", n, sequences, info.max_num_seqs,
                  info.data_parallel_size > 1 ? fmt::format(" × {} replicas", info.data_parallel_size) : "", max_queued,
                  gate.limit()),
      std::string{param});
}

/// GET /v1/models/{model}.
constexpr std::string_view model_path_prefix = "/v1/models/";

openai::token_decoder make_decoder(const text::tokenizer* tok, bool tokens_as_ids) {
  openai::token_decoder d;
  if (tok == nullptr)
    return d;
  if (tokens_as_ids)  // vLLM's return_tokens_as_token_ids: a token that is not valid UTF-8 alone stays exact
    d.token = [](int32_t id) { return "token_id:" + std::to_string(id); };
  else
    d.token = [tok](int32_t id) { return text::token_text_in_context(*tok, id); };
  d.detokenize = [tok](std::span<const int32_t> ids) { return tok->decode(ids); };
  return d;
}

/// vLLM answers a body that is not declared JSON with a 400 before reading it.
std::optional<openai::api_error> check_json_content_type(const http_request& req) {
  std::string type = req.header("content-type").value_or("");
  type = type.substr(0, type.find(';'));
  while (!type.empty() && (type.back() == ' ' || type.back() == '\t'))
    type.pop_back();
  for (auto& c : type)
    c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (type == "application/json")
    return std::nullopt;
  return openai::api_error::bad_request(
      "Unsupported Media Type: Only 'application/json' is allowed" +
          (type.empty() ? std::string{" (no Content-Type header)"} : " (got '" + type + "')"),
      "Content-Type");
}

/// Token ids a request names (logit_bias, allowed_token_ids, stop_token_ids, logprob_token_ids) must be in the
/// vocabulary: a 400 naming the field.
std::optional<openai::api_error> check_token_ids(const sampling_params& p, int64_t n_vocab) {
  // Lists the sampler walks for every token of every sequence: never longer than the vocabulary (a list that is
  // longer repeats ids, and costs each step more than the vocabulary-wide pass the sampler makes anyway).
  auto too_long = [&](std::size_t size, const char* field) -> std::optional<openai::api_error> {
    if (static_cast<int64_t>(size) <= n_vocab)
      return std::nullopt;
    return openai::api_error::bad_request(
        fmt::format("{}: {} entries, more than the vocabulary ({} tokens): list each token once", field, size, n_vocab),
        field);
  };
  if (auto e = too_long(p.logit_bias.size(), "logit_bias"))
    return e;
  if (auto e = too_long(p.allowed_token_ids.size(), "allowed_token_ids"))
    return e;
  if (auto e = too_long(p.stop_token_ids.size(), "stop_token_ids"))
    return e;
  for (const auto& [id, bias] : p.logit_bias)
    if (id >= n_vocab)
      return openai::api_error::bad_request(
          fmt::format("logit_bias token id {} is outside the vocabulary (size {})", id, n_vocab), "logit_bias");
  for (int32_t id : p.allowed_token_ids)
    if (id >= n_vocab)
      return openai::api_error::bad_request(
          fmt::format("allowed_token_ids: token id {} is outside the vocabulary (size {})", id, n_vocab),
          "allowed_token_ids");
  for (int32_t id : p.stop_token_ids)
    if (id >= n_vocab)
      return openai::api_error::bad_request(
          fmt::format("stop_token_ids: token id {} is outside the vocabulary (size {})", id, n_vocab),
          "stop_token_ids");
  std::string outside;  // every listed id outside, as vLLM names them
  for (int32_t id : p.logprob_token_ids) {
    if (id < n_vocab)
      continue;
    if (!outside.empty())
      outside += ", ";
    outside += std::to_string(id);
  }
  if (!outside.empty())
    return openai::api_error::bad_request(
        fmt::format("logprob_token_ids: token id(s) [{}] are outside the vocabulary (size {})", outside, n_vocab),
        "logprob_token_ids");
  return std::nullopt;
}

/// Structured outputs: the pattern compiled here under the --max-structured-output-* limits (once per pattern and
/// process, shared with an in-process sampler; `compiled` keeps it for the request), so that a pattern the engine
/// cannot take is a 400 naming the field that set it and the limit it passes.
std::optional<openai::api_error> check_structured(const openai::common_request& r, const std::string& tokenizer_dir,
                                                  const text::structured::structured_limits& limits,
                                                  std::shared_ptr<const text::structured::token_constraint>& compiled) {
  if (r.params.structured_pattern.empty())
    return std::nullopt;
  try {
    compiled = text::structured::compiled_constraint(tokenizer_dir, r.params.structured_pattern, limits);
  } catch (const text::structured::regex_error& e) {
    return openai::api_error::bad_request(r.structured_param + ": " + e.what(), r.structured_param);
  } catch (const std::exception& e) {
    return openai::api_error::bad_request(
        r.structured_param + ": structured outputs need the model's tokenizer: " + e.what(), r.structured_param);
  }
  return std::nullopt;
}

/// Fields in no schema the server knows are ignored as vLLM ignores them, but never silently.
void log_ignored(const openai::common_request& r) {
  if (r.ignored_fields.empty())
    return;
  std::string names;
  for (const std::string& f : r.ignored_fields)
    names += (names.empty() ? "" : ", ") + f;
  log::warning(where, "The following fields were present in the request but ignored: {}", names);
}

/// truncate_prompt_tokens: the last k ids (k = -1: max_model_len).
void truncate_prompt(std::vector<int32_t>& ids, std::optional<int32_t> k, int32_t max_model_len) {
  if (!k)
    return;
  const auto keep = static_cast<std::size_t>(*k < 0 ? max_model_len : *k);
  if (ids.size() > keep)
    ids.erase(ids.begin(), ids.end() - static_cast<std::ptrdiff_t>(keep));
}

}  // namespace

openai_service::openai_service(LLM& llm, service_config config)
    : llm_(llm),
      config_(std::move(config)),
      worker_(std::make_shared<engine_worker>()),
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
    chat_template_ = std::make_unique<text::chat_template>(load_chat_template(config_.chat_template));
    if (!tokenizer_)
      log::warning(where, "--chat-template is set but {} has no tokenizer.json: /v1/chat/completions answers 400",
                   dir.string());
  } else if (tokenizer_) {
    if (const auto& source = tokenizer_->chat_template())
      chat_template_ = std::make_unique<text::chat_template>(text::chat_template::parse(*source));
  }
  if (!chat_template_)
    log::warning(where, "{} has no chat template: /v1/chat/completions answers 400", dir.string());
  defaults_ = openai::resolve_generation_config(config_.generation_config, config_.model_path);
  if (!defaults_.empty())
    log::info(where,
              "Default sampling parameters have been overridden by the model's Hugging Face generation config: {} "
              "(fields a request sets win; --generation-config vllm ignores the file)",
              openai::describe(defaults_));
  if (admission_.limit() >= 0)
    log::info(where,
              "At most {} sequences of generation requests at once (max_num_seqs {}{} + max_queued_requests {}); more "
              "get 429",
              admission_.limit(), llm.info().max_num_seqs,
              llm.info().data_parallel_size > 1 ? fmt::format(" x {} replicas", llm.info().data_parallel_size) : "",
              config_.max_queued_requests);
  if (config_.log_stats_interval.count() > 0)
    stats_logger_ = std::make_unique<stats_logger>([&llm] { return llm.stats(); }, config_.log_stats_interval);
  loras_ = std::make_unique<lora_service>(llm, config_.enable_lora, config_.served_model_names);
  for (const lora_module& m : config_.lora_modules) {
    auto added = loras_->add(m);
    if (!added)
      throw std::runtime_error("--lora-modules " + m.name + "=" + m.path + ": " + added.error().message);
    log::info(where, "Serving LoRA adapter '{}' from {} (id {})", m.name, m.path, added->id);
  }
  health_worker_ = std::make_shared<engine_worker>();
  preprocess_ = std::make_unique<handler_pool>(config_.preprocess_threads);
}

openai_service::~openai_service() = default;

void openai_service::begin_drain() { draining_ = true; }

bool openai_service::stop_preprocessing(std::chrono::steady_clock::time_point deadline) {
  return preprocess_->stop(deadline);
}

void openai_service::install(router& r) {
  // Parsing, chat rendering, constraint compiling and tokenizing run on the preprocessing threads.
  auto off = [this](router::route_handler h) { return preprocess_->offload(std::move(h)); };
  r.add("POST", "/v1/completions", off([this](const http_request& q) { return completions(q); }));
  r.add("POST", "/v1/chat/completions", off([this](const http_request& q) { return chat_completions(q); }));
  r.add("POST", "/v1/chat/completions/batch", off([this](const http_request& q) { return chat_completions_batch(q); }));
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

std::shared_ptr<response_channel> openai_service::invocations(const http_request& req) {
  if (auto bad = check_json_content_type(req))
    return fail(*bad);
  simdjson::dom::parser parser;
  simdjson::dom::object body;
  if (parser.parse(req.body).get(body) != simdjson::SUCCESS)
    return fail(openai::api_error::bad_request("/invocations takes a JSON object", ""));
  simdjson::dom::element unused;
  if (body["messages"].get(unused) == simdjson::SUCCESS)
    return chat_completions(req);
  if (body["prompt"].get(unused) == simdjson::SUCCESS)
    return completions(req);
  return fail(openai::api_error::bad_request(
      "/invocations takes a chat completions body (with messages) or a completions body (with prompt); this one has "
      "neither",
      ""));
}

std::shared_ptr<response_channel> openai_service::completions(const http_request& req) {
  if (auto bad = check_json_content_type(req))
    return fail(*bad);
  auto parsed = openai::parse_completion_request(req.body, parse_limits(), defaults_);
  if (!parsed)
    return fail(parsed.error());
  const int64_t sequences = int64_t{parsed->params.n} * static_cast<int64_t>(parsed->prompts.size());
  if (auto bad = check_capacity(sequences, parsed->params.n, parsed->prompts.size(), admission_, llm_.info(),
                                config_.max_queued_requests))
    return fail(*bad);
  log_ignored(*parsed);
  std::shared_ptr<const text::structured::token_constraint> constraint;
  if (auto bad = check_generation(*parsed, false, constraint))
    return fail(*bad);
  auto model = loras_->resolve(parsed->model);
  if (!model)
    return fail(model.error());
  const int32_t max_len = llm_.info().max_model_len;
  // A max_tokens from generation_config.json is clamped to the room the prompts leave (vLLM); a given one is not.
  std::optional<int32_t> checked_max = parsed->max_tokens_defaulted ? std::nullopt : parsed->params.max_tokens;
  int64_t room = max_len;
  std::vector<request_output> echo;
  // Text prompts are tokenized here (with add_special_tokens when the request says how, else as the tokenizer's
  // config says) and submitted as ids with their text: tokenized once.
  const bool own_tokens = parsed->add_special_tokens.has_value() || parsed->truncate_prompt_tokens.has_value();
  for (prompt& p : parsed->prompts) {
    if (handler_pool::cancelled())  // polled per prompt: a batch's tokenizing stops once its client is gone
      return fail(cancelled_request());
    request_output e;
    if (p.is_tokens()) {
      e.prompt_token_ids = p.token_ids();
    } else {
      if (!llm_.info().has_tokenizer || (own_tokens && !tokenizer_))
        return fail(
            openai::api_error::bad_request("this model has no tokenizer: give the prompt as token ids", "prompt"));
      e.prompt = p.text();
      e.prompt_token_ids = own_tokens ? tokenizer_->encode(p.text(), parsed->add_special_tokens.value_or(true))
                                      : llm_.tokenize(p.text());
    }
    if (parsed->truncate_prompt_tokens) {
      truncate_prompt(e.prompt_token_ids, parsed->truncate_prompt_tokens, max_len);
      if (!e.prompt.empty() && tokenizer_)
        e.prompt = tokenizer_->decode(e.prompt_token_ids);
    }
    if (own_tokens)
      p = prompt{e.prompt_token_ids};  // truncated, or tokenized as the request said
    else if (!p.is_tokens())
      p = prompt::tokenized(e.prompt, e.prompt_token_ids);
    if (e.prompt_token_ids.empty())
      return fail(openai::api_error::bad_request("prompt must not be empty (it has no tokens)", "prompt"));
    if (auto err = openai::check_context_length(static_cast<int64_t>(e.prompt_token_ids.size()), checked_max, max_len))
      return fail(*err);
    room = std::min(room, max_len - static_cast<int64_t>(e.prompt_token_ids.size()));
    echo.push_back(std::move(e));
  }
  if (parsed->max_tokens_defaulted && parsed->params.max_tokens && *parsed->params.max_tokens > room)
    parsed->params.max_tokens = static_cast<int32_t>(std::max<int64_t>(room, 1));
  if (handler_pool::cancelled())
    return fail(cancelled_request());
  auto slot = admission_.try_enter(sequences);
  if (!slot)
    return fail(queue_full(admission_.limit()));
  auto j = std::make_shared<job>();
  j->llm = &llm_;
  j->worker = worker_;
  j->metrics = metrics_;
  j->channel = std::make_shared<response_channel>();
  j->stream = parsed->stream;
  j->ctx.id = parsed->request_id ? "cmpl-" + *parsed->request_id : openai::make_response_id("cmpl-");
  j->ctx.created = static_cast<int64_t>(std::time(nullptr));
  j->ctx.model = model->name;
  j->lora = model->lora;
  j->ctx.logprobs = parsed->params.logprobs.has_value();
  j->ctx.logprob_token_ids = !parsed->params.logprob_token_ids.empty();
  j->ctx.echo = parsed->echo;
  j->ctx.echo_only = parsed->echo_only;
  j->ctx.include_usage = parsed->include_usage || (parsed->stream && config_.enable_force_include_usage);
  j->ctx.return_token_ids = parsed->return_token_ids;
  j->ctx.continuous_usage = parsed->continuous_usage_stats;
  for (const request_output& e : echo)
    j->ctx.prompt_token_ids.push_back(e.prompt_token_ids);
  j->ctx.prompt_tokens_details = config_.enable_prompt_tokens_details;
  j->ctx.n = parsed->params.n;
  j->ctx.decoder =
      make_decoder(tokenizer_.get(), parsed->return_tokens_as_token_ids || config_.return_tokens_as_token_ids);
  if (j->stream)
    j->completion_chunks.emplace(j->ctx);
  j->slot = std::move(*slot);
  j->constraint = std::move(constraint);
  return start(j, std::move(parsed->prompts), parsed->params, parsed->priority, parsed->cache_salt, echo);
}

namespace {

/// An assistant message's tool_calls as templates read them: each call's `arguments` a dict when it is a JSON
/// object (chat templates write it with tojson, as transformers passes it), else as given.
text::jinja::value template_tool_calls(const std::string& json) {
  simdjson::dom::parser parser;
  simdjson::dom::element root;
  const simdjson::padded_string padded{json};
  if (parser.parse(padded).get(root))
    return text::jinja::parse_json(json);
  std::vector<text::jinja::value> calls;
  for (simdjson::dom::element call : root.get_array()) {
    std::string_view name, args, id;
    if (call["function"]["name"].get(name) != simdjson::SUCCESS)
      name = {};
    text::jinja::value arguments = text::jinja::value::dict();
    simdjson::dom::element args_v;
    if (call["function"]["arguments"].get(args_v) == simdjson::SUCCESS) {
      if (args_v.get(args) == simdjson::SUCCESS) {
        try {
          arguments = text::jinja::parse_json(args);
        } catch (const std::exception&) {
          arguments = text::jinja::value(std::string{args});
        }
      } else {
        arguments = text::jinja::from_json(args_v);
      }
    }
    if (call["id"].get(id) != simdjson::SUCCESS)
      id = {};
    std::vector<std::pair<std::string, text::jinja::value>> fn;
    fn.reserve(2);
    fn.emplace_back("name", std::string{name});
    fn.emplace_back("arguments", std::move(arguments));
    std::vector<std::pair<std::string, text::jinja::value>> entry;
    entry.reserve(3);
    entry.emplace_back("id", std::string{id});
    entry.emplace_back("type", std::string{"function"});
    entry.emplace_back("function", text::jinja::value::dict(std::move(fn)));
    calls.push_back(text::jinja::value::dict(std::move(entry)));
  }
  return text::jinja::value::list(std::move(calls));
}

/// The chat template's text for `messages` (r.messages, or one conversation of a batch) with the request's other
/// template inputs, or the reason it cannot be rendered.
openai::result<std::string> render_chat(const text::chat_template* server_template, const text::tokenizer& tok,
                                        const openai::chat_request& r, bool content_as_parts,
                                        std::span<const openai::chat_message> messages) {
  std::optional<text::chat_template> own;
  if (r.chat_template) {
    try {
      own = text::chat_template::parse(*r.chat_template);
    } catch (const std::exception& e) {
      return openai::api_error::bad_request(std::string{"chat_template does not parse: "} + e.what(), "chat_template");
    }
  }
  const text::chat_template* tmpl = own ? &*own : server_template;
  if (tmpl == nullptr)
    return openai::api_error::bad_request("this model has no chat template", "messages");
  text::chat_template_inputs in;
  std::vector<text::jinja::value> list;
  for (const openai::chat_message& m : messages) {
    std::vector<std::pair<std::string, text::jinja::value>> entries{{"role", m.role}, {"content", m.content}};
    if (content_as_parts && !m.parts.empty()) {  // --chat-template-content-format openai
      std::vector<text::jinja::value> parts;
      for (const std::string& p : m.parts)
        parts.push_back(text::jinja::value::dict({{"type", "text"}, {"text", p}}));
      entries[1].second = text::jinja::value::list(std::move(parts));
    }
    if (m.name)
      entries.emplace_back("name", *m.name);
    if (m.tool_call_id)
      entries.emplace_back("tool_call_id", *m.tool_call_id);
    if (!m.tool_calls_json.empty())
      entries.emplace_back("tool_calls", template_tool_calls(m.tool_calls_json));
    list.push_back(text::jinja::value::dict(std::move(entries)));
  }
  in.messages = text::jinja::value::list(std::move(list));
  in.add_generation_prompt = r.add_generation_prompt;
  in.bos_token = tok.bos_token();
  in.eos_token = tok.eos_token();
  for (const auto& [name, json] : r.template_vars)
    in.extra.emplace_back(name, text::jinja::parse_json(json));
  if (!r.tools.empty() && r.tool_choice != "none")
    in.tools = text::jinja::parse_json(r.tools_json);
  std::string out;
  try {
    out = tmpl->render(in);
  } catch (const std::exception& e) {
    return openai::api_error::bad_request(std::string{"chat template failed: "} + e.what(), "messages");
  }
  if (r.continue_final_message) {
    // As vLLM: cut what the template wrote after the last message's content (its end-of-turn), so that the output
    // continues that message.
    const std::string& last = messages.back().content;
    const auto at = last.empty() ? std::string::npos : out.rfind(last);
    if (at == std::string::npos)
      return openai::api_error::bad_request(
          "continue_final_message: the rendered template does not contain the final message's content",
          "continue_final_message");
    out.resize(at + last.size());
  }
  return out;
}

openai::result<std::string> render_chat(const text::chat_template* server_template, const text::tokenizer& tok,
                                        const openai::chat_request& r, bool content_as_parts) {
  return render_chat(server_template, tok, r, content_as_parts, r.messages);
}

/// vLLM's chat echo: the last message's content starts the reply when it is the reply's role (always when no
/// generation prompt is added: then the reply continues that message).
std::string chat_echo_text(const openai::chat_request& r, std::span<const openai::chat_message> messages) {
  if (r.echo && (!r.add_generation_prompt || messages.back().role == "assistant"))
    return messages.back().content;
  return {};
}

}  // namespace

std::optional<openai::api_error> openai_service::check_generation(
    openai::common_request& r, bool chat, std::shared_ptr<const text::structured::token_constraint>& constraint) {
  if (auto bad = check_token_ids(r.params, llm_.info().n_vocab))
    return bad;
  if (chat)  // with a reasoning parser, structure and tool calls hold after </think>
    if (auto bad = openai::constrain_after_reasoning(r, tokenizer_.get(), config_.reasoning_parser))
      return bad;
  return check_structured(r, structured_tokenizer_dir(), config_.structured_limits, constraint);
}

std::shared_ptr<response_channel> openai_service::chat_completions(const http_request& req) {
  if (auto bad = check_json_content_type(req))
    return fail(*bad);
  auto parsed = openai::parse_chat_request(req.body, parse_limits(), defaults_);
  if (!parsed)
    return fail(parsed.error());
  log_ignored(*parsed);
  std::shared_ptr<const text::structured::token_constraint> constraint;
  if (auto bad = check_generation(*parsed, true, constraint))
    return fail(*bad);
  using tool_mode = openai::response_context::tool_mode;
  tool_mode tools = tool_mode::none;
  std::optional<openai::tool_parser> parser;
  if (!parsed->tools.empty() && parsed->tool_choice != "none") {
    if (parsed->tool_choice == "required") {
      tools = tool_mode::required;
    } else if (parsed->tool_choice == "function") {
      tools = tool_mode::named;
    } else {
      parser = openai::parse_tool_parser_name(config_.tool_call_parser);
      if (!config_.enable_auto_tool_choice || !parser)
        return fail(openai::api_error::bad_request(
            "\"auto\" tool choice requires --enable-auto-tool-choice and --tool-call-parser to be set", "tool_choice"));
      tools = tool_mode::parse;
    }
  }
  auto model = loras_->resolve(parsed->model);
  if (!model)
    return fail(model.error());
  if (!tokenizer_)
    return fail(openai::api_error::bad_request("this model has no tokenizer", "messages"));
  auto text = render_chat(chat_template_.get(), *tokenizer_, *parsed, config_.chat_template_content_format == "openai");
  if (!text)
    return fail(text.error());
  if (handler_pool::cancelled())
    return fail(cancelled_request());
  // The template writes the special tokens itself (bos_token), so none are added unless the request asks.
  std::vector<int32_t> ids = tokenizer_->encode(*text, parsed->add_special_tokens.value_or(false));
  const int32_t max_len = llm_.info().max_model_len;
  truncate_prompt(ids, parsed->truncate_prompt_tokens, max_len);
  if (ids.empty())
    return fail(openai::api_error::bad_request("the rendered conversation has no tokens", "messages"));
  if (auto err = openai::check_context_length(static_cast<int64_t>(ids.size()),
                                              parsed->max_tokens_defaulted ? std::nullopt : parsed->params.max_tokens,
                                              max_len))
    return fail(*err);
  if (const int64_t room = max_len - static_cast<int64_t>(ids.size());
      parsed->max_tokens_defaulted && parsed->params.max_tokens && *parsed->params.max_tokens > room)
    parsed->params.max_tokens = static_cast<int32_t>(std::max<int64_t>(room, 1));
  if (handler_pool::cancelled())
    return fail(cancelled_request());
  auto slot = admission_.try_enter(parsed->params.n);
  if (!slot)
    return fail(queue_full(admission_.limit()));
  auto j = std::make_shared<job>();
  j->llm = &llm_;
  j->worker = worker_;
  j->metrics = metrics_;
  j->channel = std::make_shared<response_channel>();
  j->chat = true;
  j->stream = parsed->stream;
  j->ctx.id = parsed->request_id ? "chatcmpl-" + *parsed->request_id : openai::make_response_id("chatcmpl-");
  j->ctx.created = static_cast<int64_t>(std::time(nullptr));
  j->ctx.model = model->name;
  j->lora = model->lora;
  j->ctx.logprobs = parsed->logprobs;
  j->ctx.logprob_token_ids = !parsed->params.logprob_token_ids.empty();
  j->ctx.include_usage = parsed->include_usage || (parsed->stream && config_.enable_force_include_usage);
  j->ctx.return_token_ids = parsed->return_token_ids;
  j->ctx.continuous_usage = parsed->continuous_usage_stats;
  j->ctx.prompt_token_ids.push_back(ids);
  j->ctx.echo_text = chat_echo_text(*parsed, parsed->messages);
  j->ctx.tools = tools;
  if (parser)
    j->ctx.parser = *parser;
  j->ctx.named_tool = parsed->tool_choice_name;
  j->ctx.reasoning = openai::parse_reasoning_format(config_.reasoning_parser);
  j->ctx.include_reasoning = parsed->include_reasoning;
  j->ctx.prompt_tokens_details = config_.enable_prompt_tokens_details;
  j->ctx.n = parsed->params.n;
  j->ctx.decoder =
      make_decoder(tokenizer_.get(), parsed->return_tokens_as_token_ids || config_.return_tokens_as_token_ids);
  if (j->stream)
    j->chat_chunks.emplace(j->ctx);
  j->slot = std::move(*slot);
  j->constraint = std::move(constraint);
  return start(j, {prompt{std::move(ids)}}, parsed->params, parsed->priority, parsed->cache_salt, {});
}

std::shared_ptr<response_channel> openai_service::chat_completions_batch(const http_request& req) {
  if (auto bad = check_json_content_type(req))
    return fail(*bad);
  auto parsed = openai::parse_chat_batch_request(req.body, parse_limits(), defaults_);
  if (!parsed)
    return fail(parsed.error());
  const std::size_t conversations = parsed->conversations.size();
  if (auto bad = check_capacity(static_cast<int64_t>(conversations), 1, conversations, admission_, llm_.info(),
                                config_.max_queued_requests, "conversation", "messages"))
    return fail(*bad);
  log_ignored(*parsed);
  // One constraint for every conversation: compiled once.
  std::shared_ptr<const text::structured::token_constraint> constraint;
  if (auto bad = check_generation(*parsed, true, constraint))
    return fail(*bad);
  auto model = loras_->resolve(parsed->model);
  if (!model)
    return fail(model.error());
  if (!tokenizer_)
    return fail(openai::api_error::bad_request("this model has no tokenizer", "messages"));
  // The request's own template is parsed once, then renders every conversation.
  std::optional<text::chat_template> own;
  if (parsed->chat_template) {
    try {
      own = text::chat_template::parse(*parsed->chat_template);
    } catch (const std::exception& e) {
      return fail(
          openai::api_error::bad_request(std::string{"chat_template does not parse: "} + e.what(), "chat_template"));
    }
    parsed->chat_template.reset();
  }
  const text::chat_template* tmpl = own ? &*own : chat_template_.get();
  if (tmpl == nullptr)
    return fail(openai::api_error::bad_request("this model has no chat template", "messages"));
  const int32_t max_len = llm_.info().max_model_len;
  const std::optional<int32_t> checked_max = parsed->max_tokens_defaulted ? std::nullopt : parsed->params.max_tokens;
  int64_t room = max_len;
  std::vector<prompt> prompts;
  prompts.reserve(conversations);
  auto j = std::make_shared<job>();
  // Each conversation as a chat request of its own: rendered and checked alike; an error names the conversation.
  for (std::size_t c = 0; c < conversations; ++c) {
    if (handler_pool::cancelled())
      return fail(cancelled_request());
    const std::span<const openai::chat_message> messages = parsed->conversations[c];
    const std::string where = fmt::format("messages[{}]", c);
    auto named = [&](openai::api_error e) {
      e.message = where + ": " + e.message;
      if (e.param == "messages")
        e.param = where;
      return fail(e);
    };
    auto text = render_chat(tmpl, *tokenizer_, *parsed, config_.chat_template_content_format == "openai", messages);
    if (!text)
      return named(text.error());
    std::vector<int32_t> ids = tokenizer_->encode(*text, parsed->add_special_tokens.value_or(false));
    truncate_prompt(ids, parsed->truncate_prompt_tokens, max_len);
    if (ids.empty())
      return named(openai::api_error::bad_request("the rendered conversation has no tokens", "messages"));
    if (auto err = openai::check_context_length(static_cast<int64_t>(ids.size()), checked_max, max_len))
      return named(*err);
    room = std::min(room, max_len - static_cast<int64_t>(ids.size()));
    j->ctx.prompt_token_ids.push_back(ids);
    j->echo_texts.push_back(chat_echo_text(*parsed, messages));
    prompts.emplace_back(std::move(ids));
  }
  if (parsed->max_tokens_defaulted && parsed->params.max_tokens && *parsed->params.max_tokens > room)
    parsed->params.max_tokens = static_cast<int32_t>(std::max<int64_t>(room, 1));
  if (handler_pool::cancelled())
    return fail(cancelled_request());
  auto slot = admission_.try_enter(static_cast<int64_t>(conversations));
  if (!slot)
    return fail(queue_full(admission_.limit()));
  j->llm = &llm_;
  j->worker = worker_;
  j->metrics = metrics_;
  j->channel = std::make_shared<response_channel>();
  j->chat = true;
  j->chat_batch = true;
  j->ctx.id = parsed->request_id ? "chatcmpl-" + *parsed->request_id : openai::make_response_id("chatcmpl-");
  j->ctx.created = static_cast<int64_t>(std::time(nullptr));
  j->ctx.model = model->name;
  j->lora = model->lora;
  j->ctx.logprobs = parsed->logprobs;
  j->ctx.logprob_token_ids = !parsed->params.logprob_token_ids.empty();
  j->ctx.return_token_ids = parsed->return_token_ids;
  j->ctx.reasoning = openai::parse_reasoning_format(config_.reasoning_parser);
  j->ctx.include_reasoning = parsed->include_reasoning;
  j->ctx.prompt_tokens_details = config_.enable_prompt_tokens_details;
  j->ctx.decoder =
      make_decoder(tokenizer_.get(), parsed->return_tokens_as_token_ids || config_.return_tokens_as_token_ids);
  j->slot = std::move(*slot);
  j->constraint = std::move(constraint);
  return start(j, std::move(prompts), parsed->params, parsed->priority, parsed->cache_salt, {});
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

std::string openai_service::structured_tokenizer_dir() const {
  const std::filesystem::path dir = config_.tokenizer_path.empty() ? config_.model_path : config_.tokenizer_path;
  return std::filesystem::absolute(dir).string();
}

std::shared_ptr<response_channel> openai_service::tokenize(const http_request& req) {
  if (auto bad = check_json_content_type(req))
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
    auto text =
        render_chat(chat_template_.get(), *tokenizer_, *parsed, config_.chat_template_content_format == "openai");
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
  if (auto bad = check_json_content_type(req))
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
  if (draining_)
    return fail(openai::api_error::unavailable("the server is shutting down"));
  auto ch = std::make_shared<response_channel>();
  health_worker_->post([ch, &llm = llm_, &draining = draining_] {
    try {
      const engine_stats s = llm.stats();
      if (draining)
        ch->respond(error_response(openai::api_error::unavailable("the server is shutting down")));
      else if (s.healthy)
        ch->respond(json_response(200, openai::health_json(s)));
      else
        ch->respond(error_response(openai::api_error::unavailable("engine unhealthy: " + s.failure)));
    } catch (const std::exception& e) {  // the engine is being replaced or is gone: not healthy, and say why
      ch->respond(error_response(openai::api_error::unavailable(std::string{"engine unhealthy: "} + e.what())));
    }
  });
  return ch;
}

std::shared_ptr<response_channel> openai_service::reset_prefix_cache() {
  auto ch = std::make_shared<response_channel>();
  worker_->post([ch, &llm = llm_] {
    try {
      llm.reset_prefix_cache();
    } catch (const std::exception& e) {
      ch->respond(error_response(openai::api_error::unavailable(std::string{"engine unavailable: "} + e.what())));
      return;
    }
    // vLLM answers 200 with an empty body.
    ch->respond(http_response{200, "text/plain; charset=utf-8", "", {}});
  });
  return ch;
}

std::shared_ptr<response_channel> openai_service::metrics() {
  auto ch = std::make_shared<response_channel>();
  worker_->post([ch, &llm = llm_, m = metrics_] {
    try {
      m->update(llm.stats());
    } catch (const std::exception& e) {
      ch->respond(error_response(openai::api_error::unavailable(std::string{"engine unavailable: "} + e.what())));
      return;
    }
    ch->respond(http_response{200, "text/plain; version=0.0.4; charset=utf-8", m->render(), {}});
  });
  return ch;
}

}  // namespace actorllm::net
