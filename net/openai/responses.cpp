// Response bodies with util/json_writer: compact one-line JSON, so every body is also a valid SSE data line.
#include "net/openai/responses.hpp"

#include <actorllm/version.hpp>

#include <algorithm>
#include <random>

#include "util/json_writer.hpp"

namespace actorllm::net::openai {

namespace {

// -inf logprobs (a token the sampler could never pick) have no JSON number; vLLM clamps them to -9999.
double json_logprob(float lp) { return std::max(static_cast<double>(lp), -9999.0); }

void write_usage(json_writer& w, const usage_info& u, const response_context& ctx) {
  w.begin_object();
  w.key("prompt_tokens").value(u.prompt_tokens);
  w.key("completion_tokens").value(u.completion_tokens);
  w.key("total_tokens").value(u.total_tokens());
  if (ctx.prompt_tokens_details) {
    w.key("prompt_tokens_details").begin_object();
    w.key("cached_tokens").value(u.cached_tokens);
    w.end_object();
  }
  w.end_object();
}

void write_header(json_writer& w, const response_context& ctx, std::string_view object) {
  w.key("id").value(ctx.id);
  w.key("object").value(object);
  w.key("created").value(ctx.created);
  w.key("model").value(ctx.model);
}

void write_finish_reason(json_writer& w, const std::optional<finish_reason>& reason) {
  w.key("finish_reason");
  if (reason)
    w.value(finish_reason_name(*reason));
  else
    w.null();
}

// vLLM's stop_reason: the stop string or stop token id that ended the sequence, else null.
void write_stop_reason(json_writer& w, const completion_output& out) {
  w.key("stop_reason");
  if (out.stop_string)
    w.value(*out.stop_string);
  else if (out.stop_token_id)
    w.value(*out.stop_token_id);
  else
    w.null();
}

// Completions' logprobs: tokens, token_logprobs, top_logprobs (token text -> logprob) and text_offset, the
// offset of each token's text in the choice's text starting at 0. With echo, the prompt's tokens come first:
// `leading` (>= 0) is the first prompt token (null logprob and top_logprobs, as vLLM), the rest are in `lps`.
void write_completion_logprobs(json_writer& w, std::span<const sample_logprobs> lps, const token_decoder& dec,
                               int64_t offset, int32_t leading = -1) {
  std::vector<std::string> texts;
  texts.reserve(lps.size() + 1);
  if (leading >= 0)
    texts.push_back(dec.token_text(leading));
  for (const auto& lp : lps)
    texts.push_back(dec.token_text(lp.token));
  const std::size_t skip = leading >= 0 ? 1 : 0;
  w.begin_object();
  w.key("tokens").begin_array();
  for (const auto& t : texts)
    w.value(t);
  w.end_array();
  w.key("token_logprobs").begin_array();
  if (leading >= 0)
    w.null();
  for (const auto& lp : lps)
    w.value(json_logprob(lp.logprob));
  w.end_array();
  // Legacy completions' `logprobs: k`: the top k, plus the sampled token when it is not among them (vLLM, OpenAI).
  std::vector<int32_t> written;
  w.key("top_logprobs").begin_array();
  if (leading >= 0)
    w.null();
  for (std::size_t i = 0; i < lps.size(); ++i) {
    const auto& lp = lps[i];
    const std::string& text = texts[i + skip];
    // With logprob_token_ids, `top` holds the listed tokens as given: one listed twice is written once.
    w.begin_object();
    written.clear();
    for (const auto& alt : lp.top) {
      if (std::find(written.begin(), written.end(), alt.token) != written.end())
        continue;
      written.push_back(alt.token);
      w.key(dec.token_text(alt.token)).value(json_logprob(alt.logprob));
    }
    if (std::find(written.begin(), written.end(), lp.token) == written.end())
      w.key(text).value(json_logprob(lp.logprob));
    w.end_object();
  }
  w.end_array();
  w.key("text_offset").begin_array();
  for (const auto& t : texts) {
    w.value(offset);
    offset += static_cast<int64_t>(t.size());
  }
  w.end_array();
  w.end_object();
}

// vLLM's prompt_logprobs: null for the first prompt token, then per token {"<id>": {logprob, rank, decoded_token}}
// for the prompt token and the top k (the prompt token first; listed once when it is among the top).
void write_prompt_logprobs(json_writer& w, const request_output& ro, const token_decoder& dec) {
  if (ro.prompt_logprobs.empty()) {
    w.null();
    return;
  }
  auto entry = [&](int32_t token, float logprob, int32_t rank) {
    w.key(std::to_string(token)).begin_object();
    w.key("logprob").value(json_logprob(logprob));
    w.key("rank").value(static_cast<int64_t>(rank));
    w.key("decoded_token").value(dec.token_text(token));
    w.end_object();
  };
  w.begin_array();
  w.null();
  for (const prompt_logprob& p : ro.prompt_logprobs) {
    w.begin_object();
    entry(p.token, p.logprob, p.rank);
    for (std::size_t i = 0; i < p.top.size(); ++i)
      if (p.top[i].token != p.token)
        entry(p.top[i].token, p.top[i].logprob, static_cast<int32_t>(i + 1));
    w.end_object();
  }
  w.end_array();
}

// The prompt's tokens as completions' logprobs entries (echo with logprobs): token i + 1 from prompt_logprobs[i].
std::vector<sample_logprobs> prompt_entries(const request_output& ro) {
  std::vector<sample_logprobs> out;
  out.reserve(ro.prompt_logprobs.size());
  for (const prompt_logprob& p : ro.prompt_logprobs)
    out.push_back({p.token, p.logprob, p.top});
  return out;
}

void write_bytes(json_writer& w, std::string_view text) {
  w.key("bytes").begin_array();
  for (char c : text)
    w.value(static_cast<int64_t>(static_cast<unsigned char>(c)));
  w.end_array();
}

// Chat logprobs: {"content":[{token, logprob, bytes, top_logprobs:[{token, logprob, bytes}]}], "refusal":null}.
// `listed` (logprob_token_ids): top_logprobs are the sampled token, then the listed tokens other than it, each once
// (vLLM's dict of the sampled token and the listed ones, in that order); else the top k as sampled.
void write_chat_logprobs(json_writer& w, std::span<const sample_logprobs> lps, const token_decoder& dec, bool listed) {
  auto entry = [&](int32_t token, float logprob) {
    std::string text = dec.token_text(token);
    w.begin_object();
    w.key("token").value(text);
    w.key("logprob").value(json_logprob(logprob));
    write_bytes(w, text);
    w.end_object();
  };
  std::vector<int32_t> written;
  w.begin_object();
  w.key("content").begin_array();
  for (const auto& lp : lps) {
    std::string text = dec.token_text(lp.token);
    w.begin_object();
    w.key("token").value(text);
    w.key("logprob").value(json_logprob(lp.logprob));
    write_bytes(w, text);
    w.key("top_logprobs").begin_array();
    if (listed) {
      written.assign(1, lp.token);
      entry(lp.token, lp.logprob);
      for (const auto& alt : lp.top) {
        if (std::find(written.begin(), written.end(), alt.token) != written.end())
          continue;
        written.push_back(alt.token);
        entry(alt.token, alt.logprob);
      }
    } else {
      for (const auto& alt : lp.top)
        entry(alt.token, alt.logprob);
    }
    w.end_array();
    w.end_object();
  }
  w.end_array();
  w.key("refusal").null();
  w.end_object();
}

std::string prompt_text(const request_output& out, const token_decoder& dec) {
  if (!out.prompt.empty() || out.prompt_token_ids.empty() || !dec.detokenize)
    return out.prompt;
  return dec.detokenize(out.prompt_token_ids);
}

int64_t choice_index(const response_context& ctx, uint32_t prompt_index, uint32_t seq_index) {
  return static_cast<int64_t>(prompt_index) * ctx.n + seq_index;
}

// The calls in a choice's text under ctx.tools, and the content left beside them.
parsed_tool_output tool_output(const response_context& ctx, const std::string& text) {
  using mode = response_context::tool_mode;
  parsed_tool_output out;
  switch (ctx.tools) {
    case mode::none:
      out.content = text;
      break;
    case mode::parse:
      out = parse_tool_output(ctx.parser, text);
      break;
    case mode::required:
      out.calls = parse_required_output(text);
      if (out.calls.empty())
        out.content = text;
      break;
    case mode::named:
      out.calls.push_back({ctx.named_tool, text});
      break;
  }
  return out;
}

// [{"id", "type": "function", "function": {"name", "arguments"}}, ...]; `with_index`: stream deltas' form.
void write_tool_calls(json_writer& w, const std::vector<tool_call>& calls, bool with_index) {
  w.begin_array();
  for (std::size_t i = 0; i < calls.size(); ++i) {
    w.begin_object();
    if (with_index)
      w.key("index").value(static_cast<int64_t>(i));
    w.key("id").value(make_response_id("chatcmpl-tool-"));
    w.key("type").value("function");
    w.key("function").begin_object();
    w.key("name").value(calls[i].name);
    w.key("arguments").value(calls[i].arguments);
    w.end_object();
    w.end_object();
  }
  w.end_array();
}

// `key`: the ids with return_token_ids, else null (vLLM clients read the key either way).
void write_ids_or_null(json_writer& w, std::string_view key, const response_context& ctx,
                       std::span<const int32_t> ids) {
  w.key(key);
  if (ctx.return_token_ids)
    w.array(ids);
  else
    w.null();
}

std::span<const int32_t> prompt_ids_of(const response_context& ctx, std::size_t prompt_index) {
  if (prompt_index < ctx.prompt_token_ids.size())
    return ctx.prompt_token_ids[prompt_index];
  return {};
}

int64_t total_prompt_tokens(const response_context& ctx) {
  int64_t n = 0;
  for (const auto& ids : ctx.prompt_token_ids)
    n += static_cast<int64_t>(ids.size()) * ctx.n;
  return n;
}

// continuous_usage_stats: the usage so far on a streamed chunk.
void write_running_usage(json_writer& w, const response_context& ctx, int64_t completion_tokens) {
  usage_info u;
  u.prompt_tokens = total_prompt_tokens(ctx) / std::max(ctx.n, 1);
  u.completion_tokens = completion_tokens;
  w.key("usage");
  write_usage(w, u, ctx);
}

}  // namespace

std::string make_response_id(std::string_view prefix) {
  thread_local std::mt19937_64 gen{std::random_device{}()};
  static constexpr char hex[] = "0123456789abcdef";
  std::string id{prefix};
  for (int half = 0; half < 2; ++half) {
    uint64_t bits = gen();
    for (int i = 0; i < 16; ++i, bits >>= 4)
      id += hex[bits & 0xF];
  }
  return id;
}

std::string_view finish_reason_name(finish_reason reason) { return to_string(reason); }

std::string completion_response_json(std::span<const request_output> outputs, const response_context& ctx) {
  json_writer w;
  w.begin_object();
  write_header(w, ctx, "text_completion");
  usage_info usage;
  w.key("choices").begin_array();
  for (std::size_t p = 0; p < outputs.size(); ++p) {
    const request_output& ro = outputs[p];
    usage.prompt_tokens += ro.usage.prompt_tokens;
    usage.completion_tokens += ro.usage.completion_tokens;
    usage.cached_tokens += ro.usage.cached_tokens;
    if (ctx.echo_only)  // the one token the engine ran is not part of the answer
      usage.completion_tokens -= ro.usage.completion_tokens;
    std::string prefix = ctx.echo ? prompt_text(ro, ctx.decoder) : std::string{};
    // echo with logprobs: the prompt's tokens lead the logprobs (their offsets start at 0, the text's start).
    const bool prompt_in_logprobs = ctx.echo && ctx.logprobs && !ro.prompt_token_ids.empty() &&
                                    ro.prompt_logprobs.size() + 1 == ro.prompt_token_ids.size();
    std::vector<sample_logprobs> lps;
    for (const completion_output& out : ro.outputs) {
      w.begin_object();
      w.key("index").value(choice_index(ctx, static_cast<uint32_t>(p), out.index));
      w.key("text").value(ctx.echo_only ? prefix : prefix + out.text);
      w.key("logprobs");
      if (ctx.logprobs) {
        lps.clear();
        if (prompt_in_logprobs)
          lps = prompt_entries(ro);
        if (!ctx.echo_only)
          lps.insert(lps.end(), out.logprobs.begin(), out.logprobs.end());
        const int32_t leading = prompt_in_logprobs ? ro.prompt_token_ids.front() : -1;
        write_completion_logprobs(w, lps, ctx.decoder, prompt_in_logprobs ? 0 : static_cast<int64_t>(prefix.size()),
                                  leading);
      } else {
        w.null();
      }
      write_finish_reason(w, out.finish_reason);
      write_stop_reason(w, out);
      w.key("prompt_logprobs");
      write_prompt_logprobs(w, ro, ctx.decoder);
      w.key("prompt_token_ids");
      if (ctx.return_token_ids)
        w.array(ro.prompt_token_ids);
      else
        w.null();
      write_ids_or_null(w, "token_ids", ctx, ctx.echo_only ? std::span<const int32_t>{} : out.token_ids);
      w.end_object();
    }
  }
  w.end_array();
  w.key("usage");
  write_usage(w, usage, ctx);
  w.end_object();
  return w.take();
}

namespace {

// One choice of a chat completion: its message (reasoning, content after `echo_text`, tool calls), logprobs, finish.
void write_chat_choice(json_writer& w, const completion_output& out, int64_t index, const response_context& ctx,
                       const std::string& echo_text) {
  w.begin_object();
  w.key("index").value(index);
  w.key("message").begin_object();
  w.key("role").value("assistant");
  std::optional<reasoning_split> split;
  if (ctx.reasoning)
    split = split_reasoning(*ctx.reasoning, out.text);
  const parsed_tool_output parsed = tool_output(ctx, split ? split->content : out.text);
  if (split) {
    const bool shown = split->reasoning && ctx.include_reasoning;
    w.key("reasoning_content");
    if (shown)
      w.value(*split->reasoning);
    else
      w.null();
    w.key("reasoning");
    if (shown)
      w.value(*split->reasoning);
    else
      w.null();
  }
  w.key("content");
  using mode = response_context::tool_mode;
  // vLLM's shapes: a named or required tool choice answers content "" beside its calls, and "" with no call when
  // the output was cut before the calls parsed; with a reasoning parser, a reply that is all reasoning has null
  // content; a parsed (auto) reply with calls and no other text has null content.
  const bool forced = ctx.tools == mode::named || ctx.tools == mode::required;
  const bool no_content = split && parsed.content.empty() && echo_text.empty();
  if (forced)
    w.value(parsed.calls.empty() && out.finish_reason != finish_reason::length ? echo_text + parsed.content
                                                                               : echo_text);
  else if ((parsed.calls.empty() && !no_content) || !parsed.content.empty())
    w.value(echo_text + parsed.content);
  else
    w.null();
  w.key("refusal").null();
  w.key("tool_calls");  // always a list, empty without calls (vLLM's ChatMessage)
  write_tool_calls(w, parsed.calls, false);
  w.end_object();
  w.key("logprobs");
  if (ctx.logprobs)
    write_chat_logprobs(w, out.logprobs, ctx.decoder, ctx.logprob_token_ids);
  else
    w.null();
  if (!parsed.calls.empty() && out.finish_reason == finish_reason::stop)
    w.key("finish_reason").value("tool_calls");
  else
    write_finish_reason(w, out.finish_reason);
  write_stop_reason(w, out);
  write_ids_or_null(w, "token_ids", ctx, out.token_ids);
  w.end_object();
}

}  // namespace

std::string chat_response_json(const request_output& output, const response_context& ctx) {
  json_writer w;
  w.begin_object();
  write_header(w, ctx, "chat.completion");
  w.key("choices").begin_array();
  for (const completion_output& out : output.outputs)
    write_chat_choice(w, out, static_cast<int64_t>(out.index), ctx, ctx.echo_text);
  w.end_array();
  w.key("usage");
  write_usage(w, output.usage, ctx);
  w.key("prompt_logprobs");
  write_prompt_logprobs(w, output, ctx.decoder);
  w.key("prompt_token_ids");
  if (ctx.return_token_ids)
    w.array(output.prompt_token_ids);
  else
    w.null();
  w.end_object();
  return w.take();
}

std::string chat_batch_response_json(std::span<const request_output> outputs, const response_context& ctx,
                                     std::span<const std::string> echo_texts) {
  json_writer w;
  w.begin_object();
  write_header(w, ctx, "chat.completion");
  usage_info usage;
  w.key("choices").begin_array();
  const std::string no_echo;
  for (std::size_t c = 0; c < outputs.size(); ++c) {
    const request_output& ro = outputs[c];
    usage.prompt_tokens += ro.usage.prompt_tokens;
    usage.completion_tokens += ro.usage.completion_tokens;
    usage.cached_tokens += ro.usage.cached_tokens;
    for (const completion_output& out : ro.outputs)
      write_chat_choice(w, out, choice_index(ctx, static_cast<uint32_t>(c), out.index), ctx,
                        c < echo_texts.size() ? echo_texts[c] : no_echo);
  }
  w.end_array();
  w.key("usage");
  write_usage(w, usage, ctx);
  w.key("prompt_logprobs").null();
  w.key("prompt_token_ids").null();
  w.end_object();
  return w.take();
}

std::string sse_event(std::string_view json) {
  std::string out;
  out.reserve(json.size() + 8);
  out += "data: ";
  out += json;
  out += "\n\n";
  return out;
}

std::string_view sse_done() { return "data: [DONE]\n\n"; }

namespace {

// The usage-only last chunk of a stream: "choices": [] and the request's usage.
std::string usage_chunk(const response_context& ctx, std::string_view object, const usage_info& usage) {
  json_writer w;
  w.begin_object();
  write_header(w, ctx, object);
  w.key("choices").begin_array().end_array();
  w.key("usage");
  write_usage(w, usage, ctx);
  w.end_object();
  return sse_event(w.str());
}

std::string stream_end(const response_context& ctx, std::string_view object, const usage_info& usage) {
  std::string out = ctx.include_usage ? usage_chunk(ctx, object, usage) : std::string{};
  out += sse_done();
  return out;
}

}  // namespace

std::string completion_stream::begin(std::span<const request_output> prompts) {
  if (!ctx_.echo)
    return {};
  std::string out;
  for (std::size_t p = 0; p < prompts.size(); ++p) {
    std::string text = prompt_text(prompts[p], ctx_.decoder);
    for (int32_t s = 0; s < ctx_.n; ++s) {
      auto index = choice_index(ctx_, static_cast<uint32_t>(p), static_cast<uint32_t>(s));
      if (text_offset_.size() <= static_cast<std::size_t>(index))
        text_offset_.resize(index + 1, 0);
      text_offset_[index] += static_cast<int64_t>(text.size());
      json_writer w;
      w.begin_object();
      write_header(w, ctx_, "text_completion");
      w.key("choices").begin_array().begin_object();
      w.key("index").value(index);
      w.key("text").value(text);
      w.key("logprobs").null();
      w.key("finish_reason").null();
      w.end_object().end_array();
      w.end_object();
      out += sse_event(w.str());
    }
  }
  return out;
}

std::string completion_stream::on_delta(uint32_t prompt_index, const stream_delta& delta) {
  if (delta.text.empty() && !delta.finish_reason && delta.logprobs.empty())
    return {};
  auto index = choice_index(ctx_, prompt_index, delta.index);
  if (text_offset_.size() <= static_cast<std::size_t>(index))
    text_offset_.resize(index + 1, 0);
  json_writer w;
  w.begin_object();
  write_header(w, ctx_, "text_completion");
  w.key("choices").begin_array().begin_object();
  w.key("index").value(index);
  w.key("text").value(delta.text);
  w.key("logprobs");
  if (ctx_.logprobs)
    write_completion_logprobs(w, delta.logprobs, ctx_.decoder, text_offset_[index]);
  else
    w.null();
  write_finish_reason(w, delta.finish_reason);
  if (ctx_.return_token_ids) {
    if (sent_prompt_ids_.size() <= static_cast<std::size_t>(index))
      sent_prompt_ids_.resize(index + 1, false);
    if (!sent_prompt_ids_[index]) {
      sent_prompt_ids_[index] = true;
      w.key("prompt_token_ids").array(prompt_ids_of(ctx_, prompt_index));
    }
    w.key("token_ids").array(delta.token_ids);
  }
  w.end_object().end_array();
  completion_tokens_ += static_cast<int64_t>(delta.token_ids.size());
  if (ctx_.continuous_usage)
    write_running_usage(w, ctx_, completion_tokens_);
  w.end_object();
  text_offset_[index] += static_cast<int64_t>(delta.text.size());
  return sse_event(w.str());
}

std::string completion_stream::end(const usage_info& usage) { return stream_end(ctx_, "text_completion", usage); }

void chat_stream::begin_chunk(json_writer& w, uint32_t index) const {
  w.begin_object();
  write_header(w, ctx_, "chat.completion.chunk");
  w.key("choices").begin_array().begin_object();
  w.key("index").value(static_cast<int64_t>(index));
}

std::string chat_stream::end_chunk(json_writer& w, int64_t completion_tokens) const {
  if (ctx_.continuous_usage)
    write_running_usage(w, ctx_, completion_tokens);
  else if (ctx_.include_usage)
    w.key("usage").null();
  w.end_object();
  return sse_event(w.str());
}

std::string chat_stream::begin() {
  std::string out;
  for (int32_t i = 0; i < ctx_.n; ++i) {
    json_writer w;
    begin_chunk(w, static_cast<uint32_t>(i));
    w.key("delta").begin_object().key("role").value("assistant").key("content").value(ctx_.echo_text).end_object();
    w.key("logprobs").null();
    w.key("finish_reason").null();
    w.end_object().end_array();
    if (ctx_.return_token_ids)
      w.key("prompt_token_ids").array(prompt_ids_of(ctx_, 0));
    out += end_chunk(w, 0);
  }
  return out;
}

std::string chat_stream::named_call_delta(const stream_delta& delta) {
  // A named function's output is its arguments: they stream as argument deltas of one call, as vLLM sends them.
  if (call_started_.size() <= delta.index)
    call_started_.resize(delta.index + 1, false);
  completion_tokens_ += static_cast<int64_t>(delta.token_ids.size());
  json_writer w;
  begin_chunk(w, delta.index);
  w.key("delta").begin_object();
  w.key("tool_calls").begin_array().begin_object();
  w.key("index").value(int64_t{0});
  if (!call_started_[delta.index]) {
    call_started_[delta.index] = true;
    w.key("id").value(make_response_id("chatcmpl-tool-"));
    w.key("type").value("function");
    w.key("function").begin_object().key("name").value(ctx_.named_tool).key("arguments").value(delta.text);
  } else {
    w.key("function").begin_object().key("arguments").value(delta.text);
  }
  w.end_object();
  w.end_object().end_array();
  w.end_object();
  w.key("logprobs").null();
  if (delta.finish_reason == finish_reason::stop)
    w.key("finish_reason").value("tool_calls");
  else
    write_finish_reason(w, delta.finish_reason);
  w.end_object().end_array();
  return end_chunk(w, completion_tokens_);
}

std::string chat_stream::on_delta(const stream_delta& delta) {
  if (!ctx_.reasoning)
    return content_delta(delta);
  // The reasoning part goes out as reasoning deltas; the content part as the content deltas it would be alone.
  while (reasoning_.size() <= delta.index)
    reasoning_.emplace_back(*ctx_.reasoning);
  reasoning_stream::delta split = reasoning_[delta.index].push(delta.text);
  if (delta.finish_reason) {
    reasoning_stream::delta rest = reasoning_[delta.index].finish();
    split.reasoning += rest.reasoning;
    split.content += rest.content;
  }
  std::string out;
  stream_delta content = delta;
  content.text = std::move(split.content);
  // A delta that is all reasoning: its tokens are counted here (content_delta sends nothing for it).
  if (content.text.empty() && !content.finish_reason && content.logprobs.empty())
    completion_tokens_ += static_cast<int64_t>(delta.token_ids.size());
  if (!split.reasoning.empty() && ctx_.include_reasoning) {
    json_writer w;
    begin_chunk(w, delta.index);
    w.key("delta").begin_object();
    w.key("reasoning_content").value(split.reasoning);
    w.key("reasoning").value(split.reasoning);
    w.end_object();
    w.key("logprobs").null();
    w.key("finish_reason").null();
    w.end_object().end_array();
    out += end_chunk(w, completion_tokens_);
  }
  out += content_delta(content);
  return out;
}

std::string chat_stream::content_delta(const stream_delta& delta) {
  if (delta.text.empty() && !delta.finish_reason && delta.logprobs.empty())
    return {};
  if (ctx_.tools == response_context::tool_mode::named)
    return named_call_delta(delta);
  parsed_tool_output held;
  if (ctx_.tools != response_context::tool_mode::none) {
    // The calls are known once the choice's text is whole: hold the text back, then send the calls as one delta.
    // With auto tool choice, the text before a call's marker streams as content meanwhile.
    if (held_.size() <= delta.index) {
      held_.resize(delta.index + 1);
      streamed_.resize(delta.index + 1, 0);
    }
    std::string& text = held_[delta.index];
    std::size_t& sent = streamed_[delta.index];
    text += delta.text;
    completion_tokens_ += static_cast<int64_t>(delta.token_ids.size());
    if (!delta.finish_reason) {
      if (ctx_.tools != response_context::tool_mode::parse)
        return {};
      const std::size_t ready = streamable_prefix(ctx_.parser, text);
      if (ready <= sent)
        return {};
      held.content = text.substr(sent, ready - sent);
      sent = ready;
    } else {
      held = tool_output(ctx_, text);
      if (held.calls.empty())
        held.content = text.substr(std::min(sent, text.size()));  // the rest of the plain text
      else
        held.content.clear();  // the content before the calls went out already
      if (ctx_.tools == response_context::tool_mode::parse && !held.calls.empty() && sent < text.size()) {
        // Text between what was streamed and the marker (a held-back tail that turned out to be no marker).
        const std::size_t marker_at = streamable_prefix(ctx_.parser, text);
        if (marker_at > sent)
          held.content = text.substr(sent, marker_at - sent);
      }
    }
  } else {
    held.content = delta.text;
  }
  json_writer w;
  begin_chunk(w, delta.index);
  w.key("delta").begin_object();
  if (held.calls.empty() || !held.content.empty())
    w.key("content").value(held.content);
  if (!held.calls.empty()) {
    w.key("tool_calls");
    write_tool_calls(w, held.calls, true);
  }
  w.end_object();
  w.key("logprobs");
  if (ctx_.logprobs && ctx_.tools == response_context::tool_mode::none)
    write_chat_logprobs(w, delta.logprobs, ctx_.decoder, ctx_.logprob_token_ids);
  else
    w.null();
  if (!held.calls.empty() && delta.finish_reason == finish_reason::stop)
    w.key("finish_reason").value("tool_calls");
  else
    write_finish_reason(w, delta.finish_reason);
  if (ctx_.return_token_ids)
    w.key("token_ids").array(delta.token_ids);
  w.end_object().end_array();
  if (ctx_.tools == response_context::tool_mode::none)
    completion_tokens_ += static_cast<int64_t>(delta.token_ids.size());
  return end_chunk(w, completion_tokens_);
}

std::string chat_stream::end(const usage_info& usage) { return stream_end(ctx_, "chat.completion.chunk", usage); }

namespace {

void write_model(json_writer& w, const model_card& m) {
  w.begin_object();
  w.key("id").value(m.id);
  w.key("object").value("model");
  w.key("created").value(m.created);
  w.key("owned_by").value(m.owned_by);
  w.key("root").value(m.root.empty() ? m.id : m.root);
  if (m.parent.empty())
    w.key("parent").null();
  else
    w.key("parent").value(m.parent);
  w.key("max_model_len").value(m.max_model_len);
  w.end_object();
}

}  // namespace

std::string models_json(std::span<const model_card> models) {
  json_writer w;
  w.begin_object();
  w.key("object").value("list");
  w.key("data").begin_array();
  for (const model_card& m : models)
    write_model(w, m);
  w.end_array();
  w.end_object();
  return w.take();
}

std::string model_json(const model_card& model) {
  json_writer w;
  write_model(w, model);
  return w.take();
}

std::string health_json(const engine_stats& stats) {
  json_writer w;
  w.begin_object();
  if (stats.replicas.size() > 1) {
    w.key("replicas").begin_array();
    for (const replica_stats& r : stats.replicas)
      w.begin_object().key("replica").value(int64_t{r.rank}).key("healthy").value(r.healthy).end_object();
    w.end_array();
    w.key("degraded").begin_array();
    for (const replica_stats& r : stats.replicas)
      if (!r.healthy)
        w.begin_object()
            .key("replica")
            .value(int64_t{r.rank})
            .key("reason")
            .value(r.failure)
            .key("restarts")
            .value(int64_t{r.restarts})
            .end_object();
    w.end_array();
  }
  w.end_object();
  return w.take();
}

std::string version_json() {
  json_writer w;
  w.begin_object().key("version").value(actorllm::version_string).end_object();
  return w.take();
}

}  // namespace actorllm::net::openai
