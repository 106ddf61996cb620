// Many requests streamed at once through actorllm::LLM::submit: each stream's deltas (ids and text), its final output
// or error, as the callbacks deliver them on the delivery thread, and the tokens and ended streams counted over all,
// for tests that disturb the engine while the streams run (kill a worker) and then check every stream.
#pragma once

#include "actorllm/llm.hpp"

#include <atomic>
#include <deque>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

namespace actorllm::test {

/// What one stream received. Lock `mutex` to read it while streams may still run.
struct recorded_stream {
  std::mutex mutex;
  std::string text;
  std::vector<int32_t> ids;
  std::optional<request_output> output;
  std::optional<std::string> error;
};

class stream_recorder {
 public:
  /// The callbacks of a new stream, recording into stream(index) where index counts the calls from 0.
  stream_callbacks add() {
    recorded_stream& r = streams_.emplace_back();
    stream_callbacks cb;
    cb.on_delta = [&r, this](const stream_delta& d) {
      std::lock_guard lock{r.mutex};
      r.text += d.text;
      r.ids.insert(r.ids.end(), d.token_ids.begin(), d.token_ids.end());
      tokens_ += static_cast<int>(d.token_ids.size());
    };
    cb.on_output = [&r, this](request_output o) {
      std::lock_guard lock{r.mutex};
      r.output = std::move(o);
      ++ended_;
    };
    cb.on_error = [&r, this](const error& e) {
      std::lock_guard lock{r.mutex};
      r.error = e.what();
      ++ended_;
    };
    return cb;
  }

  recorded_stream& stream(size_t index) { return streams_.at(index); }
  /// Tokens delivered so far, over every stream.
  int tokens() const { return tokens_.load(); }
  /// Streams that ended (an output or an error).
  int ended() const { return ended_.load(); }

 private:
  std::deque<recorded_stream> streams_;  // a deque: the callbacks hold references that must stay put
  std::atomic<int> tokens_{0};
  std::atomic<int> ended_{0};
};

}  // namespace actorllm::test
