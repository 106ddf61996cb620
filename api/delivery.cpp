// Delivery of requests' news to their channels: see delivery.hpp.
#include "api/delivery.hpp"

#include <caf/actor_system.hpp>
#include <caf/typed_event_based_actor.hpp>

namespace actorllm::detail {

void stream_state::wake(std::unique_lock<std::mutex>& lock) {
  auto h = std::exchange(waiter, {});
  auto* loop = std::exchange(waiter_loop, nullptr);
  lock.unlock();
  cv.notify_all();
  if (h)
    resume_on(h, loop);
}

void stream_state::on_delta(stream_delta&& delta) {
  std::unique_lock lock{mutex};
  deltas.push_back(std::move(delta));
  wake(lock);
}

void stream_state::on_output(request_output&& out) {
  std::unique_lock lock{mutex};
  output = std::move(out);
  done = true;
  wake(lock);
}

void stream_state::on_error(error&& err) {
  std::unique_lock lock{mutex};
  failure = std::move(err);
  done = true;
  wake(lock);
}

std::optional<stream_delta> stream_state::pop() {
  if (!deltas.empty()) {
    stream_delta d = std::move(deltas.front());
    deltas.pop_front();
    return d;
  }
  if (failure)
    throw *failure;
  return std::nullopt;
}

void callback_channel::on_delta(stream_delta&& delta) {
  if (callbacks.on_delta)
    callbacks.on_delta(delta);
}

void callback_channel::on_output(request_output&& out) {
  if (callbacks.on_output)
    callbacks.on_output(std::move(out));
}

void callback_channel::on_error(error&& err) {
  if (callbacks.on_error)
    callbacks.on_error(err);
}

void batch_channel::on_output(request_output&& out) {
  std::lock_guard lock{batch->mutex};
  batch->outputs[slot] = std::move(out);
  --batch->remaining;
  batch->cv.notify_all();
}

void batch_channel::on_error(error&& err) {
  std::lock_guard lock{batch->mutex};
  if (!batch->failure)
    batch->failure = std::move(err);
  --batch->remaining;
  batch->cv.notify_all();
}

void deliver(request_book::deliveries& d) {
  for (auto& [ch, delta] : d.deltas)
    if (ch)
      ch->on_delta(std::move(delta));
  for (auto& [ch, out] : d.outputs)
    if (ch)
      ch->on_output(std::move(out));
  for (auto& [ch, err] : d.errors)
    if (ch)
      ch->on_error(std::move(err));
  d.deltas.clear();
  d.outputs.clear();
  d.errors.clear();
}

namespace {

proto::output_sink::behavior_type delivery_behavior(proto::output_sink::pointer,
                                                    std::function<void(proto::output_batch&)> on_batch) {
  return {
      [on_batch](proto::output_batch& batch) { on_batch(batch); },
  };
}

}  // namespace

// The handler goes in as an argument, not a capture: CAF 0.17 dereferences a null argument tuple for a function
// that takes none (harmless in practice, but undefined behaviour).
proto::output_sink spawn_delivery(caf::actor_system& sys, std::function<void(proto::output_batch&)> on_batch) {
  return sys.spawn<caf::detached>(delivery_behavior, std::move(on_batch));
}

}  // namespace actorllm::detail
