// The watchdog's state machine.
#include "comm/collective_watchdog.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <utility>

namespace actorllm {

void collective_watchdog::started(std::string call, clock::time_point now) {
  pending_.push_back(operation{std::move(call), now});
}

void collective_watchdog::request_abort(std::string reason) {
  if (abort_requested_)
    return;  // the first reason is the cause; later ones are its echoes
  abort_requested_ = true;
  abort_request_ = std::move(reason);
}

watchdog_action collective_watchdog::give_up(std::string reason) {
  aborted_ = true;
  reason_ = std::move(reason);
  return watchdog_action::abort;
}

watchdog_action collective_watchdog::poll(clock::time_point now, bool oldest_done, std::string_view async_error) {
  if (aborted_)
    return watchdog_action::wait;
  // Formatted only when giving up: poll runs every few hundred microseconds while collectives are queued.
  auto during = [this] { return pending_.empty() ? std::string{} : fmt::format(" during {}", pending_.front().call); };
  if (abort_requested_)
    return give_up(fmt::format("aborted{}: {}", during(), abort_request_));
  if (!async_error.empty())
    return give_up(fmt::format("asynchronous error{}: {}", during(), async_error));
  if (pending_.empty())
    return watchdog_action::wait;
  if (oldest_done) {
    pending_.pop_front();
    if (!pending_.empty())
      pending_.front().since = std::max(pending_.front().since, now);
    return watchdog_action::done;
  }
  const auto waited = std::chrono::duration_cast<std::chrono::milliseconds>(now - pending_.front().since);
  if (waited > timeout_)
    return give_up(fmt::format("{} did not complete within {} ms (a peer is gone or stalled)", pending_.front().call,
                               timeout_.count()));
  return watchdog_action::wait;
}

}  // namespace actorllm
