// net::handler_pool: handlers run on the pool's threads and their answers (whole, or a stream fed from another
// thread) reach the connection's channel whole and in order; a client that hangs up before its handler runs skips
// it, one that hangs up while it runs or after cancels what it started; a throwing handler gets 500, queued ones
// get 503 when the pool stops; and behind run_http_server a handler that takes its time leaves the I/O thread free.
#include "net/handler_pool.hpp"
#include "fuzz/raw_client.hpp"
#include "fuzz/test_server.hpp"
#include "net/routes.hpp"

#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <future>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

using namespace actorllm;
using namespace std::chrono_literals;

namespace {

/// What a connection would write for a channel: its whole answer, or its stream.
struct seen {
  std::optional<net::http_response> response;
  bool streamed = false;
  std::string chunks;
  bool closed = false;
};

/// Consumes `ch` as the I/O thread does (take, wait for the waker, take again) until it closes or `limit` passes.
seen consume(net::response_channel& ch, std::chrono::milliseconds limit = 10000ms) {
  struct signal {
    std::mutex mutex;
    std::condition_variable cv;
    bool woken = false;
  };
  auto s = std::make_shared<signal>();  // shared: a producer may still be inside the waker when this returns
  ch.set_waker([s] {
    {
      std::lock_guard lock{s->mutex};
      s->woken = true;
    }
    s->cv.notify_one();
  });
  seen r;
  const auto deadline = std::chrono::steady_clock::now() + limit;
  for (;;) {
    net::response_channel::batch b = ch.take();
    r.streamed = r.streamed || b.stream_started;
    r.chunks += b.chunks;
    if (b.response)
      r.response = std::move(b.response);
    if (b.closed) {
      r.closed = true;
      break;
    }
    std::unique_lock lock{s->mutex};
    if (!s->cv.wait_until(lock, deadline, [&] { return s->woken; }))
      break;
    s->woken = false;
  }
  ch.set_waker(nullptr);
  return r;
}

net::http_request request(std::string target = "/x") {
  net::http_request q;
  q.method = "POST";
  q.target = std::move(target);
  q.body = "{}";
  return q;
}

/// Waits for `flag` (no sleep as synchronization: a bounded poll of a condition another thread sets).
bool eventually(const std::atomic<bool>& flag, std::chrono::milliseconds limit = 5000ms) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (!flag && std::chrono::steady_clock::now() < deadline)
    std::this_thread::yield();
  return flag;
}

}  // namespace

TEST_CASE("handler_pool: a handler runs on a pool thread and its whole answer reaches the connection's channel") {
  net::handler_pool pool{2};
  std::thread::id ran_on;
  auto out = pool.run(request("/whole"), [&](const net::http_request& q) {
    ran_on = std::this_thread::get_id();
    return net::reply(net::json_response(201, R"({"target":")" + q.target + "\"}"));
  });
  const seen r = consume(*out);
  REQUIRE(r.response);
  CHECK(r.response->status == 201);
  CHECK(r.response->body == R"({"target":"/whole"})");
  CHECK_FALSE(r.streamed);
  CHECK(ran_on != std::thread::id{});
  CHECK(ran_on != std::this_thread::get_id());
}

TEST_CASE(
    "handler_pool: a stream fed from another thread after the handler returned arrives whole and in order [asan]") {
  net::handler_pool pool{2};
  std::thread producer;
  std::string expected;
  for (int i = 0; i < 3000; ++i)
    expected += "data: " + std::to_string(i) + "\n\n";
  auto out = pool.run(request(), [&](const net::http_request&) {
    auto ch = std::make_shared<net::response_channel>();
    producer = std::thread{[ch] {  // the engine's delivery thread, feeding while the pool forwards
      for (int i = 0; i < 3000; ++i)
        ch->send_chunk("data: " + std::to_string(i) + "\n\n");
      ch->close();
    }};
    return ch;
  });
  const seen r = consume(*out);
  if (producer.joinable())
    producer.join();
  CHECK_FALSE(r.response);
  CHECK(r.streamed);
  CHECK(r.closed);
  CHECK(r.chunks == expected);
}

TEST_CASE("handler_pool: a failure, before or after the stream started, and a channel closed bare are forwarded") {
  net::handler_pool pool{1};
  // Failed before anything was forwarded: the whole error answer, as a connection would have seen it.
  auto early = pool.run(request(), [](const net::http_request&) {
    auto ch = std::make_shared<net::response_channel>();
    ch->send_chunk("data: first\n\n");
    ch->fail(net::json_response(500, "{}"), "data: tail\n\n");
    return ch;
  });
  const seen e = consume(*early);
  REQUIRE(e.response);
  CHECK(e.response->status == 500);
  // Failed once the stream was forwarded: the tail ends the stream.
  auto inner = std::make_shared<net::response_channel>();
  auto late = pool.run(request(), [inner](const net::http_request&) {
    inner->send_chunk("data: first\n\n");
    return inner;
  });
  std::string got;
  const auto deadline = std::chrono::steady_clock::now() + 5s;
  while (got.empty() && std::chrono::steady_clock::now() < deadline) {
    got = late->take().chunks;
    std::this_thread::yield();
  }
  REQUIRE(got == "data: first\n\n");
  inner->fail(net::json_response(500, "{}"), "data: tail\n\n");
  const seen l = consume(*late);
  CHECK_FALSE(l.response);
  CHECK(l.chunks == "data: tail\n\n");
  CHECK(l.closed);
  // Closed without an answer: closed here too (the connection answers 500 for that, as without the pool).
  auto dropped = pool.run(request(), [](const net::http_request&) {
    auto ch = std::make_shared<net::response_channel>();
    ch->close();
    return ch;
  });
  const seen d = consume(*dropped);
  CHECK(d.closed);
  CHECK_FALSE(d.response);
  CHECK_FALSE(d.streamed);
}

TEST_CASE("handler_pool: a client that hangs up while its handler waits for a thread skips the handler") {
  net::handler_pool pool{1};
  std::promise<void> release;
  auto blocked = pool.run(request(), [gate = release.get_future().share()](const net::http_request&) {
    gate.wait();
    return net::reply(net::json_response(200, "{}"));
  });
  std::atomic<bool> skipped_ran{false};
  auto skipped = pool.run(request(), [&](const net::http_request&) {
    skipped_ran = true;
    return net::reply(net::json_response(200, "{}"));
  });
  skipped->cancel();  // the connection's side: the client is gone
  release.set_value();
  auto after = pool.run(request(), [](const net::http_request&) { return net::reply(net::json_response(200, "{}")); });
  CHECK(consume(*blocked).response->status == 200);
  CHECK(consume(*after).response->status == 200);  // one thread, in order: the skipped one was dequeued before this
  CHECK_FALSE(skipped_ran.load());
}

TEST_CASE(
    "handler_pool: a client that hangs up while its handler runs, or after, cancels the handler's channel [asan]") {
  net::handler_pool pool{1};
  SUBCASE("while it runs") {
    std::atomic<bool> started{false};
    std::atomic<bool> aborted{false};
    std::promise<void> hung_up;
    auto out = pool.run(request(), [&, gate = hung_up.get_future().share()](const net::http_request&) {
      auto ch = std::make_shared<net::response_channel>();
      ch->on_cancel([&] { aborted = true; });
      started = true;
      gate.wait();  // the client hangs up before this handler returns
      return ch;
    });
    REQUIRE(eventually(started));
    out->cancel();
    hung_up.set_value();
    CHECK(eventually(aborted));
  }
  SUBCASE("after it returned, mid-stream") {
    std::atomic<bool> aborted{false};
    auto inner = std::make_shared<net::response_channel>();
    inner->on_cancel([&] { aborted = true; });
    auto out = pool.run(request(), [inner](const net::http_request&) {
      inner->send_chunk("data: 1\n\n");
      return inner;
    });
    bool first_chunk = false;  // forwarded: the handler has returned and its channel is linked
    const auto deadline = std::chrono::steady_clock::now() + 5s;
    while (!first_chunk && std::chrono::steady_clock::now() < deadline) {
      first_chunk = out->take().stream_started;
      std::this_thread::yield();
    }
    REQUIRE(first_chunk);
    out->cancel();
    CHECK(aborted.load());  // at once, on the cancelling thread, as without the pool
  }
}

TEST_CASE("handler_pool: a handler that throws or returns no channel gets 500") {
  net::handler_pool pool{1};
  auto thrown = pool.run(request(), [](const net::http_request&) -> std::shared_ptr<net::response_channel> {
    throw std::runtime_error("boom");
  });
  auto none = pool.run(request(), [](const net::http_request&) { return std::shared_ptr<net::response_channel>{}; });
  for (auto* ch : {thrown.get(), none.get()}) {
    const seen r = consume(*ch);
    REQUIRE(r.response);
    CHECK(r.response->status == 500);
  }
}

TEST_CASE("handler_pool: handlers still queued when the pool stops get 503 at once, the running one finishes [asan]") {
  auto pool = std::make_unique<net::handler_pool>(1);
  std::promise<void> release;
  std::atomic<bool> started{false};
  auto running = pool->run(request(), [&, gate = release.get_future().share()](const net::http_request&) {
    started = true;
    gate.wait();
    return net::reply(net::json_response(200, "{}"));
  });
  REQUIRE(eventually(started));
  auto queued =
      pool->run(request(), [](const net::http_request&) { return net::reply(net::json_response(200, "{}")); });
  std::thread stopper{[&] { pool.reset(); }};
  const seen q = consume(*queued);  // answered while the running handler still waits
  REQUIRE(q.response);
  CHECK(q.response->status == 503);
  release.set_value();
  stopper.join();
  CHECK(consume(*running).response->status == 200);
}

TEST_CASE("handler_pool: a running handler sees cancelled() once its client hangs up, and returns early [asan]") {
  net::handler_pool pool{1};
  CHECK_FALSE(net::handler_pool::cancelled());  // not a pool thread
  CHECK(net::handler_pool::cancellation() == nullptr);
  std::atomic<bool> started{false};
  std::atomic<int> steps{0};
  std::atomic<bool> returned{false};
  auto out = pool.run(request(), [&](const net::http_request&) {
    started = true;
    // A handler's long loop (the prompts of a batch), polling its flag between steps; bounded so a broken flag fails
    // the checks below instead of hanging.
    const auto limit = std::chrono::steady_clock::now() + 10s;
    while (!net::handler_pool::cancelled() && std::chrono::steady_clock::now() < limit) {
      ++steps;
      std::this_thread::yield();
    }
    returned = true;
    return net::reply(net::json_response(200, "{}"));
  });
  REQUIRE(eventually(started));
  const auto t0 = std::chrono::steady_clock::now();
  out->cancel();  // the connection's side: the client is gone
  REQUIRE(eventually(returned));
  CHECK(std::chrono::steady_clock::now() - t0 < 1s);
  // The thread is free again, and the next handler's flag starts clear.
  std::atomic<bool> next_saw_cancelled{true};
  auto next = pool.run(request(), [&](const net::http_request&) {
    next_saw_cancelled = net::handler_pool::cancelled();
    return net::reply(net::json_response(200, "{}"));
  });
  CHECK(consume(*next).response->status == 200);
  CHECK_FALSE(next_saw_cancelled.load());
}

TEST_CASE("handler_pool: stop(deadline) does not wait past the deadline for a handler that does not return [asan]") {
  // What the handler shares with the test lives in a shared_ptr: the pool leaves its thread running, unjoined.
  struct shared_state {
    std::atomic<bool> started{false};
    std::atomic<bool> saw_cancelled{false};
    std::atomic<bool> finished{false};
    std::promise<void> release;
    std::shared_future<void> gate = release.get_future().share();
  };
  auto sh = std::make_shared<shared_state>();
  auto pool = std::make_unique<net::handler_pool>(1);
  auto running = pool->run(request(), [sh](const net::http_request&) {
    sh->started = true;
    sh->gate.wait_for(20s);  // a tokenizer or template that takes minutes and never polls
    sh->saw_cancelled = net::handler_pool::cancelled();
    sh->finished = true;
    return net::reply(net::json_response(200, "{}"));
  });
  REQUIRE(eventually(sh->started));
  auto queued =
      pool->run(request(), [](const net::http_request&) { return net::reply(net::json_response(200, "{}")); });
  const auto t0 = std::chrono::steady_clock::now();
  CHECK_FALSE(pool->stop(t0 + 300ms));
  const auto took = std::chrono::steady_clock::now() - t0;
  CHECK(took >= 300ms);
  CHECK(took < 2s);
  const seen q = consume(*queued);
  REQUIRE(q.response);
  CHECK(q.response->status == 503);
  pool.reset();  // the pool goes while its thread still runs the handler: that thread must touch nothing of it
  sh->release.set_value();
  const std::atomic<bool>& finished = sh->finished;
  CHECK(eventually(finished));
  CHECK(sh->saw_cancelled.load());   // stop() raised the flag of the running handler
  const seen r = consume(*running);  // its answer still reaches the channel (nobody reads it in a server)
  REQUIRE(r.response);
  CHECK(r.response->status == 200);
}

TEST_CASE("handler_pool: stop(deadline) joins at once when no handler runs, and later requests get 503") {
  net::handler_pool pool{2};
  CHECK(consume(*pool.run(request(), [](const net::http_request&) {
          return net::reply(net::json_response(200, "{}"));
        })).response->status == 200);
  const auto t0 = std::chrono::steady_clock::now();
  CHECK(pool.stop(t0 + 10s));
  CHECK(std::chrono::steady_clock::now() - t0 < 1s);
  const seen late =
      consume(*pool.run(request(), [](const net::http_request&) { return net::reply(net::json_response(200, "{}")); }));
  REQUIRE(late.response);
  CHECK(late.response->status == 503);
}

TEST_CASE("handler_pool behind run_http_server: a slow handler leaves the I/O thread free for other requests") {
  net::handler_pool pool{1};
  std::atomic<bool> slow_started{false};
  std::promise<void> release;
  std::thread::id slow_thread;
  std::thread::id io_thread;
  net::router r;
  r.add("GET", "/slow", pool.offload([&, gate = release.get_future().share()](const net::http_request&) {
    slow_thread = std::this_thread::get_id();
    slow_started = true;
    gate.wait_for(10s);  // bounded: a broken pool fails the checks below instead of hanging the test
    return net::reply(net::json_response(200, "{}"));
  }));
  r.add("GET", "/fast", [&](const net::http_request&) {
    io_thread = std::this_thread::get_id();
    return net::reply(net::json_response(200, "{}"));
  });
  net::server_options o = fuzz::test_server_options();
  o.read_timeout = 15s;
  o.stop = std::make_shared<net::server_stop>();
  std::promise<uint16_t> listening;
  o.on_listening = [&listening](uint16_t port) { listening.set_value(port); };
  std::thread server{[&] { net::run_http_server(o, [&r](net::http_request q) { return r.dispatch(q); }); }};
  const uint16_t port = listening.get_future().get();

  std::string slow_why;
  auto slow = std::async(std::launch::async, [&] { return fuzz::probe(port, "/slow", 15s, slow_why); });
  REQUIRE(eventually(slow_started));
  std::string fast_why;
  const auto t0 = std::chrono::steady_clock::now();
  CHECK_MESSAGE(fuzz::probe(port, "/fast", 5s, fast_why) == 200, fast_why);  // while /slow's handler still waits
  MESSAGE(
      "/fast answered in " << std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count()
                           << " ms while /slow's handler waited");
  CHECK(slow.wait_for(0s) == std::future_status::timeout);
  release.set_value();
  CHECK_MESSAGE(slow.get() == 200, slow_why);
  CHECK(slow_thread != io_thread);
  o.stop->request_stop();
  server.join();
}
