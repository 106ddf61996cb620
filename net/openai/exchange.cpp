// One HTTP request's exchange with the engine: see exchange.hpp.
#include "net/openai/exchange.hpp"

#include "net/handler_pool.hpp"
#include "net/openai/requests.hpp"

#include <fmt/format.h>

#include <utility>

namespace actorllm::net::openai {

namespace {

double seconds_between(std::chrono::steady_clock::time_point a, std::chrono::steady_clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

}  // namespace

std::shared_ptr<response_channel> exchange::start(LLM& llm, std::shared_ptr<engine_metrics> metrics,
                                                  prepared_request request) {
  return std::make_shared<exchange>(llm, std::move(metrics), std::move(request))->submit_all();
}

exchange::exchange(LLM& llm, std::shared_ptr<engine_metrics> metrics, prepared_request request)
    : llm_(llm), metrics_(std::move(metrics)), request_(std::move(request)) {
  const std::size_t n = request_.prompts.size();
  outputs_.resize(n);
  last_token_.resize(n);
  got_token_.assign(n, false);
  remaining_ = n;
  if (request_.stream) {
    if (request_.kind == endpoint::completions) {
      completion_chunks_.emplace(request_.ctx);
      held_ = completion_chunks_->begin(request_.echo);
    } else {
      chat_chunks_.emplace(request_.ctx);
      held_ = chat_chunks_->begin();
    }
  }
}

std::shared_ptr<response_channel> exchange::submit_all() {
  std::weak_ptr<exchange> weak = weak_from_this();
  // abort_async only sends the aborts, so the thousands of a prompt list cost no round trip each to an engine that
  // may be busy.
  channel_->on_cancel([weak] {
    if (auto self = weak.lock())
      self->on_cancel();
  });
  std::vector<uint64_t> to_abort;
  {
    std::lock_guard lock{mutex_};  // callbacks wait for the ids (submit only sends a message; this is brief)
    auto self = shared_from_this();
    for (std::size_t p = 0; p < request_.prompts.size(); ++p) {
      if (handler_pool::cancelled()) {  // the client left (or the server stops): submit nothing more for it
        remaining_ = ids_.size();       // only the submitted ones will report back
        to_abort = fail_locked(cancelled_request());
        break;
      }
      const auto index = static_cast<uint32_t>(p);
      stream_callbacks cb;
      cb.on_delta = [self, index](const stream_delta& d) { self->on_delta(index, d); };
      cb.on_output = [self, index](request_output out) { self->on_output(index, std::move(out)); };
      cb.on_error = [self, index](const error& e) { self->on_error(index, e); };
      try {
        ids_.push_back(llm_.submit(request_.prompts[p], request_.params, std::move(cb), request_.priority));
      } catch (const error& e) {
        remaining_ = ids_.size();
        to_abort = fail_locked(from_engine_error(e));
        break;
      }
    }
    if (remaining_ == 0)
      request_.slot.release();
  }
  for (uint64_t id : to_abort)
    llm_.abort_async(id);
  return channel_;
}

void exchange::start_stream_locked(std::string& chunk) {
  if (flowing_)
    return;
  flowing_ = true;
  chunk = std::move(held_) + chunk;
  held_.clear();
}

void exchange::on_delta(uint32_t p, const stream_delta& d) {
  std::lock_guard lock{mutex_};
  if (!d.token_ids.empty()) {
    const auto now = clock::now();
    if (!got_token_[p])
      metrics_->observe_time_to_first_token(seconds_between(start_, now));
    else
      metrics_->observe_inter_token_latency(seconds_between(last_token_[p], now));
    got_token_[p] = true;
    last_token_[p] = now;
  }
  if (!request_.stream || failed_)
    return;
  std::string chunk = chat_chunks_ ? chat_chunks_->on_delta(d) : completion_chunks_->on_delta(p, d);
  start_stream_locked(chunk);
  if (!chunk.empty())
    channel_->send_chunk(std::move(chunk));
}

void exchange::on_output(uint32_t p, request_output out) {
  std::lock_guard lock{mutex_};
  finish_reason reason = finish_reason::length;
  int64_t generated = 0;
  for (const completion_output& c : out.outputs) {
    if (c.finish_reason)
      reason = *c.finish_reason;
    generated += static_cast<int64_t>(c.token_ids.size());
  }
  metrics_->observe_finished(reason, static_cast<int64_t>(out.prompt_token_ids.size()), generated,
                             seconds_between(start_, clock::now()));
  outputs_[p] = std::move(out);
  if (--remaining_ == 0)
    request_.slot.release();
  if (remaining_ > 0 || failed_)
    return;
  usage_info usage;
  for (const request_output& o : outputs_) {
    usage.prompt_tokens += o.usage.prompt_tokens;
    usage.completion_tokens += o.usage.completion_tokens;
    usage.cached_tokens += o.usage.cached_tokens;
  }
  if (request_.stream) {
    // end() writes the usage chunk (when asked for) and `data: [DONE]`.
    std::string chunk = chat_chunks_ ? chat_chunks_->end(usage) : completion_chunks_->end(usage);
    start_stream_locked(chunk);
    channel_->send_chunk(std::move(chunk));
    channel_->close();
    return;
  }
  const response_context& ctx = request_.ctx;
  switch (request_.kind) {
    case endpoint::completions:
      channel_->respond(json_response(200, completion_response_json(outputs_, ctx)));
      break;
    case endpoint::chat:
      channel_->respond(json_response(200, chat_response_json(outputs_.front(), ctx)));
      break;
    case endpoint::chat_batch:
      channel_->respond(json_response(200, chat_batch_response_json(outputs_, ctx, request_.echo_texts)));
      break;
  }
}

void exchange::on_error(uint32_t p, const error& e) {
  std::vector<uint64_t> to_abort;
  {
    std::lock_guard lock{mutex_};
    if (remaining_ > 0)
      --remaining_;
    if (remaining_ == 0)
      request_.slot.release();
    if (failed_)
      return;
    // The answer is this error: the request's other prompts would run for nobody.
    to_abort = fail_locked(answer_for(p, e), p);
  }
  for (uint64_t id : to_abort)
    llm_.abort_async(id);
}

void exchange::on_cancel() {
  std::vector<uint64_t> ids;
  {
    std::lock_guard lock{mutex_};
    ids = ids_;
  }
  for (uint64_t id : ids)
    llm_.abort_async(id);
}

std::vector<uint64_t> exchange::fail_locked(const api_error& e, std::optional<uint32_t> except) {
  failed_ = true;
  // A started event stream ends with an error event; otherwise the answer is the error itself.
  channel_->fail(error_response(e), sse_event(to_json(e)) + std::string{sse_done()});
  std::vector<uint64_t> others;
  for (std::size_t i = 0; i < ids_.size(); ++i)
    if (!except || i != *except)
      others.push_back(ids_[i]);
  return others;
}

api_error exchange::answer_for(uint32_t p, const error& e) const {
  // The engine alone decides that a prompt and its max_tokens exceed the context; the answer says so in vLLM's words,
  // with the numbers of this request.
  api_error out = e.code() == errc::exceeds_max_model_len
                      ? context_length_error(static_cast<int64_t>(request_.ctx.prompt_token_ids.at(p).size()),
                                             request_.requested_max_tokens, llm_.info().max_model_len)
                      : from_engine_error(e);
  if (request_.kind == endpoint::chat_batch && out.status == 400) {
    const std::string at = fmt::format("messages[{}]", p);
    out.message = at + ": " + out.message;
    if (out.param == "messages")
      out.param = at;
  }
  return out;
}

}  // namespace actorllm::net::openai
