// One HTTP request's exchange with the engine: its engine requests (one per prompt or conversation), their progress
// turned into the response (whole, or Server-Sent Events as it comes), the metrics they feed, the admission slot they
// hold, and the aborts when the client leaves or one of several requests fails. The engine's callbacks run on
// actorllm's delivery thread; they only lock the exchange and feed its channel, and never wait.
#pragma once

#include "net/http_server.hpp"
#include "net/openai/metrics.hpp"
#include "net/openai/preprocess.hpp"
#include "net/openai/responses.hpp"

#include <actorllm/llm.hpp>

#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

namespace actorllm::net::openai {

class exchange : public std::enable_shared_from_this<exchange> {
 public:
  /// Submits every prompt of `request` to `llm` and returns the channel the answer goes to. A streamed answer starts
  /// with the engine's first news of the request, so that a request the engine refuses at once (a prompt longer than
  /// the context, say) is answered with its error status, not an event stream. `llm` must outlive the exchange's
  /// engine requests (the callbacks abort through it).
  static std::shared_ptr<response_channel> start(LLM& llm, std::shared_ptr<engine_metrics> metrics,
                                                 prepared_request request);

  /// Use start(); public for make_shared.
  exchange(LLM& llm, std::shared_ptr<engine_metrics> metrics, prepared_request request);

 private:
  using clock = std::chrono::steady_clock;

  std::shared_ptr<response_channel> submit_all();
  void on_delta(uint32_t p, const stream_delta& d);
  void on_output(uint32_t p, request_output out);
  void on_error(uint32_t p, const error& e);
  /// The client is gone: every engine request (each prompt, with its n sequences) is aborted.
  void on_cancel();
  /// Ends the exchange with `e` (a started stream gets an error event). Under mutex_; returns the ids to abort.
  std::vector<uint64_t> fail_locked(const api_error& e, std::optional<uint32_t> except = std::nullopt);
  /// The answer for an engine error of prompt `p`: a context-length refusal in vLLM's words, a batch's errors naming
  /// the conversation.
  api_error answer_for(uint32_t p, const error& e) const;
  /// Sends the held start of a stream once the engine has news of the request. Under mutex_.
  void start_stream_locked(std::string& chunk);

  std::mutex mutex_;
  LLM& llm_;
  std::shared_ptr<engine_metrics> metrics_;
  std::shared_ptr<response_channel> channel_ = std::make_shared<response_channel>();
  prepared_request request_;
  std::optional<completion_stream> completion_chunks_;
  std::optional<chat_stream> chat_chunks_;
  std::string held_;      // a stream's first chunk (role, or echo), sent with the engine's first news
  bool flowing_ = false;  // the stream has started
  std::vector<request_output> outputs_;
  std::vector<uint64_t> ids_;
  std::vector<clock::time_point> last_token_;  // per prompt
  std::vector<bool> got_token_;
  std::size_t remaining_ = 0;
  bool failed_ = false;
  clock::time_point start_ = clock::now();
};

}  // namespace actorllm::net::openai
