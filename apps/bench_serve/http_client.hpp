// The HTTP/1.1 client of `actorllm bench serve`, on Boost.Beast and asio coroutines: one connection per request,
// so many streaming requests run concurrently on one thread, each chunk time-stamped as it arrives.
#pragma once

#include "apps/bench_serve/serve_metrics.hpp"

#include <utility>  // Boost 1.74's awaitable.hpp uses std::exchange without including it

#include <boost/asio/awaitable.hpp>
#include <boost/asio/ip/tcp.hpp>

#include <chrono>
#include <string>
#include <vector>

namespace actorllm::app::bench {

/// Where requests go: addresses already resolved and checked (target_policy.hpp), so nothing is resolved again.
struct http_target {
  std::vector<boost::asio::ip::tcp::endpoint> endpoints;
  std::string host_header;  ///< "host:port"
  std::string display;      ///< the base URL, for messages
  std::string api_key;      ///< sent as "Authorization: Bearer ..." when set
};

/// A complete (non-streamed) reply.
struct http_reply {
  int status = 0;
  std::string body;
};

/// Sends one request and reads the whole reply, in at most `timeout`. Throws std::runtime_error with a clear
/// message when the server cannot be reached or does not answer in time.
http_reply http_call(const http_target& target, const std::string& method, const std::string& path,
                     const std::string& body, std::chrono::milliseconds timeout);

/// http_call as a coroutine, for callers that already run many requests on one io_context (the soak test,
/// bench/serve_soak.cpp). Throws as http_call does.
boost::asio::awaitable<http_reply> async_http_call(const http_target& target, const std::string& method,
                                                   const std::string& path, const std::string& body,
                                                   std::chrono::milliseconds timeout);

/// POSTs a streaming completion `body` to `path` and times its chunks (request_result's fields). Never throws:
/// connection errors, HTTP errors, an error chunk and the `timeout` (for the whole request) make a failed result.
/// `bench_start` is the run's start, for request_result::start_time.
boost::asio::awaitable<request_result> stream_completion(const http_target& target, const std::string& path,
                                                         const std::string& body, int64_t prompt_len,
                                                         std::chrono::milliseconds timeout,
                                                         std::chrono::steady_clock::time_point bench_start);

}  // namespace actorllm::app::bench
