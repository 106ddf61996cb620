// The in-process server of the HTTP tests and fuzzer (see test_server.hpp).
#include "fuzz/test_server.hpp"

#include <fmt/format.h>

#include <stdexcept>
#include <utility>

namespace actorllm::fuzz {

using namespace std::chrono_literals;

net::server_options test_server_options() {
  net::server_options o;
  o.port = 0;
  o.max_header_bytes = 8 * 1024;
  o.max_body_bytes = 4096;
  o.read_timeout = 1s;
  // Longer than the fuzzer's hang bound (5 s): a connection the server should close at once (the client half-closed)
  // but keeps until the idle timeout is seen as kept.
  o.idle_timeout = 10s;
  // Long on purpose: stop() returns at once when every connection is gone, so a stop that takes this long means the
  // server kept a connection that no longer exists.
  o.shutdown_timeout = 20s;
  return o;
}

test_server::test_server(net::server_options options) : options_{std::move(options)} {
  options_.stop = stop_;
  options_.on_connection_error = [this, chained = options_.on_connection_error](const std::string& what) {
    ++connection_errors_;
    if (chained)
      chained(what);
  };
  auto listening = std::make_shared<std::promise<uint16_t>>();
  auto port = listening->get_future();
  options_.on_listening = [listening](uint16_t p) { listening->set_value(p); };
  producer_thread_ = std::thread{[this] { produce(); }};
  server_thread_ = std::thread{[this, listening] {
    try {
      net::run_http_server(options_, [this](net::http_request req) { return handle(std::move(req)); });
    } catch (const std::exception& e) {
      {
        std::lock_guard lock{failure_mutex_};
        failure_ = e.what();
      }
      try {
        listening->set_exception(std::current_exception());
      } catch (const std::future_error&) {  // it listened before it failed: failure() tells
      }
    }
    finished_ = true;
  }};
  try {
    if (port.wait_for(20s) != std::future_status::ready)
      throw std::runtime_error("the in-process HTTP server did not listen within 20 s");
    port_ = port.get();
  } catch (...) {
    stop();  // the destructor does not run for a constructor that throws
    throw;
  }
}

test_server::~test_server() { stop(); }

std::string test_server::failure() const {
  std::lock_guard lock{failure_mutex_};
  return failure_;
}

std::chrono::milliseconds test_server::stop() {
  const auto start = std::chrono::steady_clock::now();
  if (server_thread_.joinable()) {
    stop_->request_stop();
    server_thread_.join();
  }
  const auto took = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - start);
  // Only now: a draining server may still wait for answers the producer feeds.
  if (producer_thread_.joinable()) {
    {
      std::lock_guard lock{jobs_mutex_};
      producer_stopping_ = true;
    }
    jobs_cv_.notify_all();
    producer_thread_.join();
  }
  return took;
}

void test_server::enqueue(std::function<void()> job) {
  {
    std::lock_guard lock{jobs_mutex_};
    jobs_.push_back(std::move(job));
  }
  jobs_cv_.notify_one();
}

void test_server::produce() {
  for (;;) {
    std::function<void()> job;
    {
      std::unique_lock lock{jobs_mutex_};
      jobs_cv_.wait(lock, [&] { return producer_stopping_ || !jobs_.empty(); });
      if (producer_stopping_)
        return;  // the server has returned: nobody reads what is left
      job = std::move(jobs_.front());
      jobs_.pop_front();
    }
    job();
  }
}

namespace {

/// Feeds `left` more event-stream chunks, one per turn of the producer, so the I/O thread writes while it feeds.
struct stream_step {
  std::shared_ptr<net::response_channel> ch;
  int index = 0;
  int left = 0;
  std::function<void(std::function<void()>)> enqueue;

  void operator()() {
    ch->send_chunk(fmt::format("data: {}\n\n", index));
    if (left <= 1) {
      ch->close();
      return;
    }
    enqueue(stream_step{ch, index + 1, left - 1, enqueue});
  }
};

}  // namespace

std::shared_ptr<net::response_channel> test_server::handle(net::http_request req) {
  auto ch = std::make_shared<net::response_channel>();
  auto later = [this](std::function<void()> job) { enqueue(std::move(job)); };
  const std::string json = fmt::format(R"({{"ok":true,"body_bytes":{}}})", req.body.size());
  if (req.target == "/json") {
    ch->respond({200, "application/json", json, {}});
  } else if (req.target == "/big") {
    ch->respond({200, "text/plain", std::string(256 * 1024, 'b'), {}});
  } else if (req.target == "/late") {
    enqueue([ch, json] { ch->respond({200, "application/json", json, {}}); });
  } else if (req.target == "/stream") {
    enqueue(stream_step{ch, 0, 20, later});
  } else if (req.target == "/drop") {
    ch->close();  // no answer: the server answers 500 for the producer
  } else if (req.target == "/throw") {
    throw std::runtime_error("the /throw handler threw on purpose");
  } else if (req.target == "/cancel-throws") {
    ch->on_cancel([] { throw std::runtime_error("the /cancel-throws cancel callback threw on purpose"); });
    enqueue(stream_step{ch, 0, 50, later});
  } else {
    ch->respond({404, "application/json", R"({"error":"no such route"})", {}});
  }
  return ch;
}

}  // namespace actorllm::fuzz
