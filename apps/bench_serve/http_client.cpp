// Beast client for `actorllm bench serve`: plain calls for the set-up probes, streamed completions for the load.
#include "apps/bench_serve/http_client.hpp"

// GCC 12 with -O2 and the sanitizers reports asio's awaitable frames (allocated by their own operator new, freed by
// the matching sized operator delete) as -Wmismatched-new-delete at the end of this file: a false positive.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
#endif

#include "apps/bench_serve/sse.hpp"

#include <fmt/format.h>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/connect.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include <array>
#include <exception>
#include <limits>
#include <optional>
#include <stdexcept>

namespace actorllm::app::bench {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using asio::use_awaitable;
using steady = std::chrono::steady_clock;

double seconds_between(steady::time_point a, steady::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

http::request<http::string_body> make_request(const http_target& target, http::verb verb, const std::string& path,
                                              const std::string& body) {
  http::request<http::string_body> req{verb, path, 11};
  req.set(http::field::host, target.host_header);
  req.set(http::field::user_agent, "actorllm-bench-serve");
  req.set(http::field::connection, "close");
  if (!target.api_key.empty())
    req.set(http::field::authorization, "Bearer " + target.api_key);
  if (verb == http::verb::post) {
    req.set(http::field::content_type, "application/json");
    req.body() = body;
  }
  req.prepare_payload();
  return req;
}

std::string describe(const beast::error_code& ec, std::chrono::milliseconds timeout) {
  if (ec == beast::error::timeout)
    return fmt::format("timed out after {:.0f} s", std::chrono::duration<double>(timeout).count());
  return ec.message();
}

asio::awaitable<http_reply> call(const http_target& target, http::verb verb, const std::string& path,
                                 const std::string& body, std::chrono::milliseconds timeout) {
  beast::tcp_stream stream{co_await asio::this_coro::executor};
  stream.expires_after(timeout);  // one deadline for connect, write and read together
  beast::error_code ec;
  co_await stream.async_connect(target.endpoints, asio::redirect_error(use_awaitable, ec));
  if (ec)
    throw std::runtime_error(fmt::format("cannot connect to {}: {}", target.display, describe(ec, timeout)));
  auto req = make_request(target, verb, path, body);
  co_await http::async_write(stream, req, asio::redirect_error(use_awaitable, ec));
  beast::flat_buffer buffer;
  http::response<http::string_body> res;
  if (!ec)
    co_await http::async_read(stream, buffer, res, asio::redirect_error(use_awaitable, ec));
  if (ec)
    throw std::runtime_error(
        fmt::format("{} {}{}: {}", std::string{http::to_string(verb)}, target.display, path, describe(ec, timeout)));
  beast::error_code ignored;
  stream.socket().shutdown(asio::ip::tcp::socket::shutdown_both, ignored);
  co_return http_reply{static_cast<int>(res.result_int()), std::move(res.body())};
}

}  // namespace

asio::awaitable<http_reply> async_http_call(const http_target& target, const std::string& method,
                                            const std::string& path, const std::string& body,
                                            std::chrono::milliseconds timeout) {
  co_return co_await call(target, http::string_to_verb(method), path, body, timeout);
}

http_reply http_call(const http_target& target, const std::string& method, const std::string& path,
                     const std::string& body, std::chrono::milliseconds timeout) {
  asio::io_context io;
  std::optional<http_reply> reply;
  std::exception_ptr failure;
  const http::verb verb = http::string_to_verb(method);
  asio::co_spawn(io, call(target, verb, path, body, timeout), [&](std::exception_ptr e, http_reply r) {
    failure = e;
    reply = std::move(r);
  });
  io.run();
  if (failure)
    std::rethrow_exception(failure);
  return std::move(*reply);
}

asio::awaitable<request_result> stream_completion(const http_target& target, const std::string& path,
                                                  const std::string& body, int64_t prompt_len,
                                                  std::chrono::milliseconds timeout, steady::time_point bench_start) {
  request_result r;
  r.prompt_len = prompt_len;
  const auto t0 = steady::now();
  r.start_time = seconds_between(bench_start, t0);
  auto fail = [&](std::string why) {
    r.success = false;
    r.error = std::move(why);
    r.latency = seconds_between(t0, steady::now());
    return r;
  };
  try {
    beast::tcp_stream stream{co_await asio::this_coro::executor};
    stream.expires_after(timeout);  // applies to every operation below: a deadline for the whole request
    beast::error_code ec;
    co_await stream.async_connect(target.endpoints, asio::redirect_error(use_awaitable, ec));
    if (ec)
      co_return fail(fmt::format("connect: {}", describe(ec, timeout)));
    auto req = make_request(target, http::verb::post, path, body);
    req.set(http::field::accept, "text/event-stream");
    co_await http::async_write(stream, req, asio::redirect_error(use_awaitable, ec));
    if (ec)
      co_return fail(fmt::format("sending the request: {}", describe(ec, timeout)));

    beast::flat_buffer buffer;
    http::response_parser<http::buffer_body> parser;
    parser.body_limit(std::numeric_limits<std::uint64_t>::max());
    co_await http::async_read_header(stream, buffer, parser, asio::redirect_error(use_awaitable, ec));
    if (ec)
      co_return fail(fmt::format("reading the response: {}", describe(ec, timeout)));
    const int status = static_cast<int>(parser.get().result_int());

    std::string error_body;
    sse_reader sse;
    bool first = false;
    bool done = false;
    int64_t token_chunks = 0;
    std::optional<int64_t> usage_tokens;
    steady::time_point last = t0;
    std::array<char, 16384> piece{};
    while (!parser.is_done()) {
      parser.get().body().data = piece.data();
      parser.get().body().size = piece.size();
      co_await http::async_read_some(stream, buffer, parser, asio::redirect_error(use_awaitable, ec));
      if (ec == http::error::need_buffer)
        ec = {};
      if (ec)
        co_return fail(fmt::format("reading the stream: {}", describe(ec, timeout)));
      const auto now = steady::now();
      const std::string_view data{piece.data(), piece.size() - parser.get().body().size};
      if (status != 200) {
        if (error_body.size() < 4096)
          error_body.append(data);
        continue;
      }
      for (const std::string& payload : sse.feed(data)) {
        completion_chunk c = parse_completion_chunk(payload);
        if (!c.error.empty())
          co_return fail(fmt::format("error in the stream: {}", c.error));
        if (c.done)
          done = true;
        if (c.completion_tokens)
          usage_tokens = c.completion_tokens;
        if (!c.carries_tokens())
          continue;
        if (!first) {
          first = true;
          r.ttft = seconds_between(t0, now);
        } else {
          r.itl.push_back(seconds_between(last, now));
        }
        last = now;
        token_chunks += c.logprob_tokens > 0 ? c.logprob_tokens : 1;
      }
    }
    const auto end = steady::now();
    beast::error_code ignored;
    stream.socket().shutdown(asio::ip::tcp::socket::shutdown_both, ignored);
    if (status != 200)
      co_return fail(fmt::format("HTTP {}: {}", status, error_message_of(error_body)));
    if (!first)
      co_return fail("the stream carried no tokens");
    if (!done)
      co_return fail("the stream ended without [DONE]");
    r.success = true;
    r.latency = seconds_between(t0, end);
    r.output_tokens = usage_tokens.value_or(token_chunks);
    co_return r;
  } catch (const std::exception& e) {
    co_return fail(e.what());
  }
}

}  // namespace actorllm::app::bench
