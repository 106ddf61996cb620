// net::run_http_server in this process, on a thread of its own, with handlers that cover every way a handler
// answers: at once (/json, /big), from another thread later (/late), as a stream fed from another thread (/stream),
// closed without an answer (/drop), by throwing (/throw), and with a cancel callback that throws (/cancel-throws).
// Stopped through server_options::stop, so tests and the fuzzer need no signal. Short timeouts keep hangs cheap.
#pragma once

#include "net/http_server.hpp"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

namespace actorllm::fuzz {

/// The options test_server uses unless given others: port 0, 8 KiB heads, 4 KiB bodies, a read timeout of 1 s, an idle
/// timeout of 10 s.
net::server_options test_server_options();

/// A running in-process server; stopped and joined on destruction.
class test_server {
 public:
  /// Starts the server and waits until it listens; throws std::runtime_error when it cannot.
  explicit test_server(net::server_options options = test_server_options());
  ~test_server();
  test_server(const test_server&) = delete;
  test_server& operator=(const test_server&) = delete;

  uint16_t port() const { return port_; }
  /// Whether run_http_server is still running (it returns only when stopped, or when something escaped it).
  bool running() const { return !finished_.load(); }
  /// What ended run_http_server if it threw; empty otherwise.
  std::string failure() const;
  /// How many times the server reported an exception that ended a connection (server_options::on_connection_error).
  int connection_errors() const { return connection_errors_.load(); }
  /// Asks the server to stop as SIGTERM would and waits until run_http_server returns; how long that took.
  std::chrono::milliseconds stop();

 private:
  /// One producer thread stands in for the engine's delivery thread: it feeds channels while the I/O thread writes.
  void produce();
  void enqueue(std::function<void()> job);
  std::shared_ptr<net::response_channel> handle(net::http_request req);

  net::server_options options_;
  std::shared_ptr<net::server_stop> stop_ = std::make_shared<net::server_stop>();
  uint16_t port_ = 0;
  std::atomic<bool> finished_{false};
  std::atomic<int> connection_errors_{0};
  mutable std::mutex failure_mutex_;
  std::string failure_;
  std::thread server_thread_;

  std::mutex jobs_mutex_;
  std::condition_variable jobs_cv_;
  std::deque<std::function<void()>> jobs_;
  bool producer_stopping_ = false;
  std::thread producer_thread_;
};

}  // namespace actorllm::fuzz
