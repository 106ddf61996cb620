// The decisions of a device communicator's watchdog, as a pure state machine. A device collective (NCCL) returns to
// the host as soon as it is queued; a peer that died leaves its kernel spinning on the GPU, and the next stream
// synchronisation would then wait forever. A watchdog thread polls the oldest queued operation and the
// communicator's asynchronous error, and this class decides when to give up: on an error, when an operation takes
// longer than the timeout, or when another thread asked (the engine declared a peer dead). What it decides the
// communicator carries out (ncclCommAbort); keeping the decision here lets it be tested without CUDA.
#pragma once

#include <chrono>
#include <cstddef>
#include <deque>
#include <string>
#include <string_view>

namespace actorllm {

/// What the watchdog does after one poll.
enum class watchdog_action {
  wait,   ///< nothing finished, nothing is wrong: poll again later
  done,   ///< the oldest operation finished and was retired
  abort,  ///< give up on the communicator now (the first time only; reason() says why)
};

/// The watchdog's bookkeeping for one communicator. Not thread-safe: the communicator guards it with its mutex.
class collective_watchdog {
 public:
  using clock = std::chrono::steady_clock;

  /// An operation that has not finished after `timeout` breaks the communicator.
  explicit collective_watchdog(std::chrono::milliseconds timeout) : timeout_(timeout) {}

  /// Operation `call` (a name for messages, e.g. "ncclAllReduce") was queued at `now`.
  void started(std::string call, clock::time_point now);
  /// Another party asked for an abort (a peer declared dead); the next poll() aborts, whatever is pending.
  void request_abort(std::string reason);

  /// One poll at `now`. `oldest_done`: whether the oldest pending operation has finished (ignored when none is
  /// pending). `async_error`: the communicator's asynchronous error, empty when there is none. The order of the
  /// checks: an abort request, then an error, then completion, then the timeout. An operation's time starts when it
  /// becomes the oldest (queued work ahead of it on the stream is not its fault), or when it was queued if later.
  watchdog_action poll(clock::time_point now, bool oldest_done, std::string_view async_error);

  /// Operations queued and not yet seen finished.
  size_t pending() const { return pending_.size(); }
  /// The oldest pending operation's name (empty when none).
  std::string oldest() const { return pending_.empty() ? std::string{} : pending_.front().call; }
  /// Whether poll() has decided to abort (final: every later poll answers wait, and nothing is retired).
  bool aborted() const { return aborted_; }
  /// Why it aborted, naming the operation when one was pending.
  const std::string& reason() const { return reason_; }
  std::chrono::milliseconds timeout() const { return timeout_; }

 private:
  struct operation {
    std::string call;
    clock::time_point since;  // when its timeout started counting
  };
  watchdog_action give_up(std::string reason);

  std::chrono::milliseconds timeout_;
  std::deque<operation> pending_;
  std::string abort_request_;
  bool abort_requested_ = false;
  bool aborted_ = false;
  std::string reason_;
};

}  // namespace actorllm
