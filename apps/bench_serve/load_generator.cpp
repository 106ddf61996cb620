// The dispatch loop of `actorllm bench serve`: one coroutine releases requests on schedule, each request runs in
// its own coroutine, a timer woken on every completion stands in for a semaphore.
#include "apps/bench_serve/load_generator.hpp"

#include "util/json_writer.hpp"

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <exception>
#include <stdexcept>

namespace actorllm::app::bench {

std::string completion_body(const bench_request& r, const request_options& o) {
  json_writer w;
  w.begin_object();
  w.key("model").value(o.model);
  w.key("prompt").array(r.prompt_ids);
  w.key("max_tokens").value(r.max_tokens);
  w.key("temperature").value(o.temperature);
  if (o.logprobs)
    w.key("logprobs").value(*o.logprobs);
  if (o.ignore_eos)
    w.key("ignore_eos").value(true);
  w.key("stream").value(true);
  w.key("stream_options").begin_object().key("include_usage").value(true).end_object();
  w.end_object();
  return w.take();
}

load_outcome run_load(const load_plan& plan) {
  namespace asio = boost::asio;
  using asio::use_awaitable;
  using steady = std::chrono::steady_clock;
  if (plan.offsets.size() != plan.requests.size())
    throw std::invalid_argument("run_load: one arrival offset per request");

  asio::io_context io;
  load_outcome out;
  out.results.resize(plan.requests.size());
  std::vector<std::string> bodies;
  bodies.reserve(plan.requests.size());
  for (const auto& r : plan.requests)
    bodies.push_back(completion_body(r, plan.request));

  int64_t in_flight = 0;
  asio::steady_timer slot_freed{io, steady::time_point::max()};  // cancel_one() wakes the dispatcher
  std::exception_ptr failure;
  const auto start = steady::now();

  auto dispatch = [&]() -> asio::awaitable<void> {
    asio::steady_timer arrival{io};
    for (std::size_t i = 0; i < plan.requests.size(); ++i) {
      boost::system::error_code ec;
      arrival.expires_at(start +
                         std::chrono::duration_cast<steady::duration>(std::chrono::duration<double>(plan.offsets[i])));
      co_await arrival.async_wait(asio::redirect_error(use_awaitable, ec));
      while (plan.max_concurrency > 0 && in_flight >= plan.max_concurrency)
        co_await slot_freed.async_wait(asio::redirect_error(use_awaitable, ec));  // operation_aborted: a slot
      ++in_flight;
      asio::co_spawn(
          io,
          [&, i]() -> asio::awaitable<void> {
            out.results[i] = co_await stream_completion(plan.target, plan.path, bodies[i],
                                                        static_cast<int64_t>(plan.requests[i].prompt_ids.size()),
                                                        plan.timeout, start);
          },
          [&](std::exception_ptr e) {  // frees the slot however the request ended, so the dispatcher never hangs
            --in_flight;
            slot_freed.cancel_one();
            if (e && !failure)
              failure = e;
          });
    }
  };
  asio::co_spawn(io, dispatch, [&](std::exception_ptr e) {
    if (e && !failure)
      failure = e;
  });
  io.run();
  out.duration_s = std::chrono::duration<double>(steady::now() - start).count();
  if (failure)
    std::rethrow_exception(failure);
  return out;
}

}  // namespace actorllm::app::bench
