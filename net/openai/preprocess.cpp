// The generating requests' one preprocessing path: see preprocess.hpp.
#include "net/openai/preprocess.hpp"

#include "net/handler_pool.hpp"
#include "net/lora_service.hpp"
#include "net/openai/chat_render.hpp"
#include "net/openai/reasoning_parser.hpp"
#include "net/openai/tool_calls.hpp"
#include "text/structured/constraint_cache.hpp"
#include "text/token_text.hpp"
#include "text/tokenizer.hpp"
#include "util/log.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <ctime>
#include <exception>
#include <string_view>
#include <utility>

namespace actorllm::net::openai {

namespace {

constexpr std::string_view where = "openai";

/// The 429 for a full queue (OpenAI's rate-limit shape: code rate_limit_exceeded, Retry-After).
api_error queue_full(int64_t limit) {
  api_error e = api_error::too_many_requests(
      fmt::format("The server is busy: {} sequences of generation requests are running or queued (max_num_seqs + "
                  "max_queued_requests). Retry later.",
                  limit),
      1);
  e.code = "rate_limit_exceeded";
  return e;
}

/// The sequences a request asks for (n × prompts) against the most the engine can hold at all (max_num_seqs per
/// replica + --max-queued-requests): more could never be admitted, so the answer is a 400 rather than a 429.
std::optional<api_error> check_capacity(int64_t sequences, int32_t n, std::size_t prompts, const admission_gate& gate,
                                        const model_info& info, int64_t max_queued, std::string_view noun,
                                        std::string_view param) {
  if (gate.limit() < 0 || sequences <= gate.limit())
    return std::nullopt;
  return api_error::bad_request(
      fmt::format("n × {}s: {} {}{} × n={} = {} sequences, more than the server can hold (--max-num-seqs {}{} + "
                  "--max-queued-requests {} = {})",
                  noun, prompts, noun, prompts == 1 ? "" : "s", n, sequences, info.max_num_seqs,
                  info.data_parallel_size > 1 ? fmt::format(" × {} replicas", info.data_parallel_size) : "", max_queued,
                  gate.limit()),
      std::string{param});
}

/// Token ids a request names (logit_bias, allowed_token_ids, stop_token_ids, logprob_token_ids) must be in the
/// vocabulary: a 400 naming the field.
std::optional<api_error> check_token_ids(const sampling_params& p, int64_t n_vocab) {
  // Lists the sampler walks for every token of every sequence: never longer than the vocabulary (a list that is
  // longer repeats ids, and costs each step more than the vocabulary-wide pass the sampler makes anyway).
  auto too_long = [&](std::size_t size, const char* field) -> std::optional<api_error> {
    if (static_cast<int64_t>(size) <= n_vocab)
      return std::nullopt;
    return api_error::bad_request(
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
      return api_error::bad_request(
          fmt::format("logit_bias token id {} is outside the vocabulary (size {})", id, n_vocab), "logit_bias");
  for (int32_t id : p.allowed_token_ids)
    if (id >= n_vocab)
      return api_error::bad_request(
          fmt::format("allowed_token_ids: token id {} is outside the vocabulary (size {})", id, n_vocab),
          "allowed_token_ids");
  for (int32_t id : p.stop_token_ids)
    if (id >= n_vocab)
      return api_error::bad_request(
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
    return api_error::bad_request(
        fmt::format("logprob_token_ids: token id(s) [{}] are outside the vocabulary (size {})", outside, n_vocab),
        "logprob_token_ids");
  return std::nullopt;
}

/// Structured outputs: the pattern compiled here under the --max-structured-output-* limits (once per pattern and
/// process, shared with an in-process sampler; `compiled` keeps it for the request), so that a pattern the engine
/// cannot take is a 400 naming the field that set it and the limit it passes.
std::optional<api_error> check_structured(const common_request& r, const std::string& tokenizer_dir,
                                          const text::structured::structured_limits& limits,
                                          std::shared_ptr<const text::structured::token_constraint>& compiled) {
  if (r.params.structured_pattern.empty())
    return std::nullopt;
  try {
    compiled = text::structured::compiled_constraint(tokenizer_dir, r.params.structured_pattern, limits);
  } catch (const text::structured::regex_error& e) {
    return api_error::bad_request(r.structured_param + ": " + e.what(), r.structured_param);
  } catch (const std::exception& e) {
    return api_error::bad_request(r.structured_param + ": structured outputs need the model's tokenizer: " + e.what(),
                                  r.structured_param);
  }
  return std::nullopt;
}

/// Fields in no schema the server knows are ignored as vLLM ignores them, but never silently.
void log_ignored(const common_request& r) {
  if (r.ignored_fields.empty())
    return;
  std::string names;
  for (const std::string& f : r.ignored_fields)
    names += (names.empty() ? "" : ", ") + f;
  log::warning(where, "The following fields were present in the request but ignored: {}", names);
}

/// truncate_prompt_tokens: the last k ids (k = -1: the whole context, `context_tokens`).
void truncate_prompt(std::vector<int32_t>& ids, std::optional<int32_t> k, int32_t context_tokens) {
  if (!k)
    return;
  const auto keep = static_cast<std::size_t>(*k >= 0 ? *k : context_tokens);
  if (ids.size() > keep)
    ids.erase(ids.begin(), ids.end() - static_cast<std::ptrdiff_t>(keep));
}

token_decoder make_decoder(const text::tokenizer* tok, bool tokens_as_ids) {
  token_decoder d;
  if (tok == nullptr)
    return d;
  if (tokens_as_ids)  // vLLM's return_tokens_as_token_ids: a token that is not valid UTF-8 alone stays exact
    d.token = [](int32_t id) { return "token_id:" + std::to_string(id); };
  else
    d.token = [tok](int32_t id) { return text::token_text_in_context(*tok, id); };
  d.detokenize = [tok](std::span<const int32_t> ids) { return tok->decode(ids); };
  return d;
}

/// How a chat's output becomes tool calls (tool_choice), or the 400 for "auto" without a parser configured.
result<std::pair<response_context::tool_mode, std::optional<tool_parser>>> tool_mode_of(const chat_request& r,
                                                                                        const preprocess_settings& s) {
  using tool_mode = response_context::tool_mode;
  if (r.tools.empty() || r.tool_choice == "none")
    return std::pair{tool_mode::none, std::optional<tool_parser>{}};
  if (r.tool_choice == "required")
    return std::pair{tool_mode::required, std::optional<tool_parser>{}};
  if (r.tool_choice == "function")
    return std::pair{tool_mode::named, std::optional<tool_parser>{}};
  auto parser = parse_tool_parser_name(s.tool_call_parser);
  if (!s.enable_auto_tool_choice || !parser)
    return api_error::bad_request(
        "\"auto\" tool choice requires --enable-auto-tool-choice and --tool-call-parser to be set", "tool_choice");
  return std::pair{tool_mode::parse, parser};
}

}  // namespace

std::optional<api_error> check_json_content_type(const http_request& req) {
  std::string type = req.header("content-type").value_or("");
  type = type.substr(0, type.find(';'));
  while (!type.empty() && (type.back() == ' ' || type.back() == '\t'))
    type.pop_back();
  for (auto& c : type)
    c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (type == "application/json")
    return std::nullopt;
  return api_error::bad_request("Unsupported Media Type: Only 'application/json' is allowed" +
                                    (type.empty() ? std::string{" (no Content-Type header)"} : " (got '" + type + "')"),
                                "Content-Type");
}

api_error cancelled_request() {
  return api_error::unavailable("the request was cancelled: the server is shutting down");
}

preprocessor::preprocessor(const LLM& llm, const text::tokenizer* tok, const text::chat_template* chat_template,
                           const lora_service& loras, admission_gate& admission, preprocess_settings settings)
    : llm_(llm),
      tok_(tok),
      chat_template_(chat_template),
      loras_(loras),
      admission_(admission),
      s_(std::move(settings)) {}

result<prepared_request> preprocessor::prepare(endpoint kind, const http_request& req) const {
  if (auto bad = check_json_content_type(req))
    return *bad;
  if (kind == endpoint::completions) {
    auto parsed = parse_completion_request(req.body, s_.limits, s_.defaults);
    if (!parsed)
      return parsed.error();
    return prepare_parsed(kind, *parsed, &*parsed, nullptr);
  }
  // A chat request is a batch of one conversation: the batch's path, with the single answer's shape.
  chat_batch_request chat;
  if (kind == endpoint::chat_batch) {
    auto parsed = parse_chat_batch_request(req.body, s_.limits, s_.defaults);
    if (!parsed)
      return parsed.error();
    chat = std::move(*parsed);
  } else {
    auto parsed = parse_chat_request(req.body, s_.limits, s_.defaults);
    if (!parsed)
      return parsed.error();
    static_cast<chat_request&>(chat) = std::move(*parsed);
    chat.conversations.push_back(std::move(chat.messages));
    chat.messages.clear();
  }
  return prepare_parsed(kind, chat, nullptr, &chat);
}

result<prepared_request> preprocessor::prepare_parsed(endpoint kind, common_request& r, completion_request* completion,
                                                      chat_batch_request* chat) const {
  prepared_request out;
  out.kind = kind;
  const std::size_t n_prompts = completion ? completion->prompts.size() : chat->conversations.size();
  const int64_t sequences = int64_t{r.params.n} * static_cast<int64_t>(n_prompts);
  const bool batch = kind == endpoint::chat_batch;
  if (auto bad = check_capacity(sequences, r.params.n, n_prompts, admission_, llm_.info(), s_.max_queued_requests,
                                batch ? "conversation" : "prompt", batch ? "messages" : "n"))
    return *bad;
  log_ignored(r);
  // One constraint for every prompt: compiled once.
  if (auto bad = check_generation(r, chat != nullptr, out.constraint))
    return *bad;
  if (chat) {
    auto tools = tool_mode_of(*chat, s_);
    if (!tools)
      return tools.error();
    out.ctx.tools = tools->first;
    if (tools->second)
      out.ctx.parser = *tools->second;
  }
  auto model = loras_.resolve(r.model);
  if (!model)
    return model.error();
  if (auto bad = completion ? tokenize_prompts(*completion, out) : render_conversations(*chat, out))
    return *bad;
  // A max_tokens from generation_config.json is clamped to the room the prompts leave (vLLM); a given one is not.
  // Whether a prompt and its max_tokens fit at all is the engine's check (errc::exceeds_max_model_len).
  out.requested_max_tokens = r.max_tokens_defaulted ? std::nullopt : r.params.max_tokens;
  if (r.max_tokens_defaulted && r.params.max_tokens) {
    std::size_t longest = 0;
    for (const auto& ids : out.ctx.prompt_token_ids)
      longest = std::max(longest, ids.size());
    const int64_t context_tokens = llm_.info().max_model_len;
    const int64_t room = context_tokens - static_cast<int64_t>(longest);
    if (*r.params.max_tokens > room)
      r.params.max_tokens = static_cast<int32_t>(std::max<int64_t>(room, 1));
  }
  for (prompt& p : out.prompts) {
    if (r.cache_salt)
      p.with_cache_salt(*r.cache_salt);
    if (model->lora)
      p.with_lora(*model->lora);
  }
  if (handler_pool::cancelled())
    return cancelled_request();
  auto slot = admission_.try_enter(sequences);
  if (!slot)
    return queue_full(admission_.limit());
  out.slot = std::move(*slot);
  out.ctx.model = model->name;
  shape_response(r, completion, chat, out);
  out.params = std::move(r.params);
  out.priority = r.priority;
  out.stream = r.stream;
  return out;
}

std::optional<api_error> preprocessor::tokenize_prompts(completion_request& r, prepared_request& out) const {
  // Text prompts are tokenized here (with add_special_tokens when the request says how, else as the engine would)
  // and submitted as ids with their text: tokenized once.
  const bool own_tokens = r.add_special_tokens.has_value() || r.truncate_prompt_tokens.has_value();
  for (prompt& p : r.prompts) {
    if (handler_pool::cancelled())  // polled per prompt: a batch's tokenizing stops once its client is gone
      return cancelled_request();
    request_output e;
    if (p.is_tokens()) {
      e.prompt_token_ids = p.token_ids();
    } else {
      if (!llm_.info().has_tokenizer || (own_tokens && tok_ == nullptr))
        return api_error::bad_request("this model has no tokenizer: give the prompt as token ids", "prompt");
      e.prompt = p.text();
      e.prompt_token_ids =
          own_tokens ? tok_->encode(p.text(), r.add_special_tokens.value_or(true)) : llm_.tokenize(p.text());
    }
    if (r.truncate_prompt_tokens) {
      truncate_prompt(e.prompt_token_ids, r.truncate_prompt_tokens, llm_.info().max_model_len);
      if (!e.prompt.empty() && tok_ != nullptr)
        e.prompt = tok_->decode(e.prompt_token_ids);
    }
    if (e.prompt_token_ids.empty())
      return api_error::bad_request("prompt must not be empty (it has no tokens)", "prompt");
    out.prompts.push_back(own_tokens || p.is_tokens() ? prompt{e.prompt_token_ids}
                                                      : prompt::tokenized(e.prompt, e.prompt_token_ids));
    out.ctx.prompt_token_ids.push_back(e.prompt_token_ids);
    out.echo.push_back(std::move(e));
  }
  return std::nullopt;
}

std::optional<api_error> preprocessor::render_conversations(chat_batch_request& r, prepared_request& out) const {
  if (tok_ == nullptr)
    return api_error::bad_request("this model has no tokenizer", "messages");
  // The request's own template is parsed once, then renders every conversation.
  std::optional<text::chat_template> own;
  auto tmpl = chat_template_for(r, chat_template_, own);
  if (!tmpl)
    return tmpl.error();
  const bool batch = out.kind == endpoint::chat_batch;
  for (std::size_t c = 0; c < r.conversations.size(); ++c) {
    if (handler_pool::cancelled())
      return cancelled_request();
    const std::span<const chat_message> messages = r.conversations[c];
    // A batch's errors name the conversation.
    auto named = [&](api_error e) {
      if (!batch)
        return e;
      const std::string at = fmt::format("messages[{}]", c);
      e.message = at + ": " + e.message;
      if (e.param == "messages")
        e.param = at;
      return e;
    };
    auto text = render_chat(**tmpl, *tok_, r, s_.content_as_parts, messages);
    if (!text)
      return named(text.error());
    // The template writes the special tokens itself (bos_token), so none are added unless the request asks.
    std::vector<int32_t> ids = tok_->encode(*text, r.add_special_tokens.value_or(false));
    truncate_prompt(ids, r.truncate_prompt_tokens, llm_.info().max_model_len);
    if (ids.empty())
      return named(api_error::bad_request("the rendered conversation has no tokens", "messages"));
    out.ctx.prompt_token_ids.push_back(ids);
    out.echo_texts.push_back(chat_echo_text(r, messages));
    out.prompts.emplace_back(std::move(ids));
  }
  return std::nullopt;
}

void preprocessor::shape_response(const common_request& r, const completion_request* completion,
                                  const chat_batch_request* chat, prepared_request& out) const {
  response_context& ctx = out.ctx;
  const std::string_view prefix = completion ? "cmpl-" : "chatcmpl-";
  ctx.id = r.request_id ? std::string{prefix} + *r.request_id : make_response_id(prefix);
  ctx.created = static_cast<int64_t>(std::time(nullptr));
  ctx.logprob_token_ids = !r.params.logprob_token_ids.empty();
  ctx.include_usage = r.include_usage || (r.stream && s_.enable_force_include_usage);
  ctx.return_token_ids = r.return_token_ids;
  ctx.continuous_usage = r.continuous_usage_stats;
  ctx.prompt_tokens_details = s_.enable_prompt_tokens_details;
  ctx.n = r.params.n;
  ctx.decoder = make_decoder(tok_, r.return_tokens_as_token_ids || s_.return_tokens_as_token_ids);
  if (completion) {
    ctx.logprobs = r.params.logprobs.has_value();
    ctx.echo = completion->echo;
    ctx.echo_only = completion->echo_only;
    return;
  }
  ctx.logprobs = chat->logprobs;
  if (out.kind == endpoint::chat)
    ctx.echo_text = out.echo_texts.front();
  ctx.named_tool = chat->tool_choice_name;
  ctx.reasoning = parse_reasoning_format(s_.reasoning_parser);
  ctx.include_reasoning = chat->include_reasoning;
}

std::optional<api_error> preprocessor::check_generation(
    common_request& r, bool chat, std::shared_ptr<const text::structured::token_constraint>& constraint) const {
  if (auto bad = check_token_ids(r.params, llm_.info().n_vocab))
    return bad;
  if (chat)  // with a reasoning parser, structure and tool calls hold after </think>
    if (auto bad = constrain_after_reasoning(r, tok_, s_.reasoning_parser))
      return bad;
  return check_structured(r, s_.structured_tokenizer_dir, s_.structured_limits, constraint);
}

}  // namespace actorllm::net::openai
