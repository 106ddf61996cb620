// The soak test's traffic: request bodies, the clients that misbehave on purpose (raw bytes, hang-ups), the
// check of each outcome, and the worker loop. Good requests go through the client of `actorllm bench serve`.
#include "bench/serve_soak/soak_traffic.hpp"

// GCC 12 reports asio's awaitable frames (their own operator new, the matching sized delete) as
// -Wmismatched-new-delete: a false positive, silenced as in apps/bench_serve/http_client.cpp.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
#endif

#include "apps/bench_serve/sse.hpp"
#include "util/json_writer.hpp"

#include <fmt/format.h>
#include <simdjson.h>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include <algorithm>
#include <cstdio>
#include <exception>
#include <functional>
#include <initializer_list>
#include <limits>
#include <memory>
#include <optional>
#include <random>
#include <stdexcept>
#include <string_view>
#include <utility>

namespace actorllm::soak {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using app::bench::http_reply;
using app::bench::http_target;
using asio::use_awaitable;
using steady = std::chrono::steady_clock;
using namespace std::chrono_literals;

double seconds_since(steady::time_point t) { return std::chrono::duration<double>(steady::now() - t).count(); }

const std::array<const char*, 6> prompts{"Once upon a time",           "The little dog",
                                         "One day, a girl named Lily", "Tom and his mom went to the park.",
                                         "There was a big red ball",   "The sun was shining and"};

template <class T>
const T& pick(const std::vector<T>& options, std::mt19937_64& rng) {
  return options[std::uniform_int_distribution<std::size_t>{0, options.size() - 1}(rng)];
}

int random_int(std::mt19937_64& rng, int lo, int hi) { return std::uniform_int_distribution<int>{lo, hi}(rng); }

const char* random_prompt(std::mt19937_64& rng) {
  return prompts[std::uniform_int_distribution<std::size_t>{0, prompts.size() - 1}(rng)];
}

/// A generation body: a prompt (completion) or one user message (chat), and the fields every variant shares.
/// `extra` writes further fields into the open object.
template <class Extra>
std::string generation_body(const soak_context& c, bool chat, std::string_view prompt, int max_tokens,
                            double temperature, bool stream, Extra&& extra) {
  json_writer w;
  w.begin_object();
  w.key("model").value(c.model);
  if (chat) {
    w.key("messages").begin_array().begin_object();
    w.key("role").value("user").key("content").value(prompt);
    w.end_object().end_array();
  } else {
    w.key("prompt").value(prompt);
  }
  w.key("max_tokens").value(max_tokens);
  w.key("temperature").value(temperature);
  if (stream) {
    w.key("stream").value(true);
    w.key("stream_options").begin_object().key("include_usage").value(true).end_object();
  }
  extra(w);
  w.end_object();
  return w.take();
}

std::string generation_body(const soak_context& c, bool chat, std::string_view prompt, int max_tokens,
                            double temperature, bool stream) {
  return generation_body(c, chat, prompt, max_tokens, temperature, stream, [](json_writer&) {});
}

/// A whole HTTP/1.1 request as bytes, for the clients that misbehave on purpose.
std::string request_bytes(const http_target& t, std::string_view method, std::string_view path, std::string_view body) {
  return fmt::format(
      "{} {} HTTP/1.1\r\nHost: {}\r\nConnection: close\r\nContent-Type: application/json\r\n"
      "Content-Length: {}\r\n\r\n{}",
      method, path, t.host_header, body.size(), body);
}

/// nullopt when a non-streamed generation answered 200 with well-formed choices, else why not.
std::optional<std::string> check_generation_reply(const http_reply& r, bool chat) {
  if (r.status != 200)
    return fmt::format("HTTP {}: {}", r.status, app::bench::error_message_of(r.body));
  simdjson::dom::parser parser;
  simdjson::dom::element doc;
  simdjson::dom::array choices;
  if (parser.parse(r.body).get(doc) != simdjson::SUCCESS || doc["choices"].get_array().get(choices) ||
      choices.size() == 0)
    return "200 without a choices array: " + r.body.substr(0, 200);
  for (simdjson::dom::element choice : choices) {
    std::string_view reason;
    std::string_view text;
    if (choice["finish_reason"].get_string().get(reason) || (reason != "stop" && reason != "length"))
      return "a choice without finish_reason stop or length: " + r.body.substr(0, 200);
    if ((chat ? choice.at_pointer("/message/content") : choice["text"]).get_string().get(text))
      return "a choice without its text: " + r.body.substr(0, 200);
  }
  int64_t completion_tokens = 0;
  if (doc.at_pointer("/usage/completion_tokens").get_int64().get(completion_tokens))
    return "200 without usage.completion_tokens";
  return std::nullopt;
}

/// nullopt when an error reply has one of the `expected` statuses and OpenAI's {"error": {"message": ...}} body.
std::optional<std::string> check_error_reply(int status, const std::string& body, std::initializer_list<int> expected) {
  bool ok = false;
  for (int e : expected)
    ok = ok || e == status;
  if (!ok) {
    std::string want;
    for (int e : expected)
      want += (want.empty() ? "" : " or ") + std::to_string(e);
    return fmt::format("HTTP {} (expected {}): {}", status, want, body.substr(0, 200));
  }
  simdjson::dom::parser parser;
  simdjson::dom::element doc;
  std::string_view message;
  if (parser.parse(body).get(doc) != simdjson::SUCCESS ||
      doc.at_pointer("/error/message").get_string().get(message) != simdjson::SUCCESS)
    return fmt::format("HTTP {} without an OpenAI error body: {}", status, body.substr(0, 200));
  return std::nullopt;
}

enum class hang_up { reset, close };

/// What a raw exchange saw.
struct raw_result {
  int status = 0;
  std::string body;      ///< the whole body (whole-response mode) or what came before the hang-up
  int64_t events = 0;    ///< "data:" payloads read before the hang-up
  bool ended = false;    ///< the server ended the response before the client hung up
  bool hung_up = false;  ///< the client hung up as planned
};

void hang_up_on(beast::tcp_stream& stream, hang_up how) {
  beast::error_code ignored;
  if (how == hang_up::reset)
    stream.socket().set_option(asio::socket_base::linger{true, 0}, ignored);  // an RST, as a killed client sends
  else
    stream.socket().shutdown(asio::ip::tcp::socket::shutdown_both, ignored);
  stream.socket().close(ignored);
}

/// Sends `bytes` as they are, then: `read_events` < 0: reads the whole response; 0: hangs up at once;
/// n > 0: reads the response head and, if it is a 200 stream, hangs up after n "data:" payloads. Throws
/// std::runtime_error on connection errors and timeouts.
asio::awaitable<raw_result> raw_exchange(const soak_context& c, const std::string& bytes, int64_t read_events,
                                         hang_up how) {
  raw_result r;
  beast::tcp_stream stream{co_await asio::this_coro::executor};
  stream.expires_after(c.timeout);
  beast::error_code ec;
  co_await stream.async_connect(c.target.endpoints, asio::redirect_error(use_awaitable, ec));
  if (ec)
    throw std::runtime_error("connect: " + ec.message());
  co_await asio::async_write(stream, asio::buffer(bytes), asio::redirect_error(use_awaitable, ec));
  if (ec)
    throw std::runtime_error("sending: " + ec.message());
  beast::flat_buffer buffer;
  if (read_events == 0) {
    hang_up_on(stream, how);
    r.hung_up = true;
    co_return r;
  }
  if (read_events < 0) {
    http::response_parser<http::string_body> parser;
    parser.body_limit(1 << 20);
    co_await http::async_read(stream, buffer, parser, asio::redirect_error(use_awaitable, ec));
    if (ec)
      throw std::runtime_error("reading the response: " + ec.message());
    r.status = static_cast<int>(parser.get().result_int());
    r.body = std::move(parser.get().body());
    r.ended = true;
    co_return r;
  }
  http::response_parser<http::buffer_body> parser;
  parser.body_limit(std::numeric_limits<std::uint64_t>::max());
  co_await http::async_read_header(stream, buffer, parser, asio::redirect_error(use_awaitable, ec));
  if (ec)
    throw std::runtime_error("reading the response head: " + ec.message());
  r.status = static_cast<int>(parser.get().result_int());
  app::bench::sse_reader sse;
  std::array<char, 16384> piece{};
  while (!parser.is_done()) {
    parser.get().body().data = piece.data();
    parser.get().body().size = piece.size();
    co_await http::async_read_some(stream, buffer, parser, asio::redirect_error(use_awaitable, ec));
    if (ec == http::error::need_buffer)
      ec = {};
    if (ec)
      throw std::runtime_error("reading the stream: " + ec.message());
    const std::string_view data{piece.data(), piece.size() - parser.get().body().size};
    if (r.body.size() < 4096)
      r.body.append(data);
    if (r.status != 200)
      continue;
    r.events += static_cast<int64_t>(sse.feed(data).size());
    if (r.events >= read_events) {
      hang_up_on(stream, how);
      r.hung_up = true;
      co_return r;
    }
  }
  r.ended = true;
  co_return r;
}

/// The hostile bodies of issue 30 (built once: some are a megabyte), each with the route it goes to.
struct hostile_body {
  const char* path;
  std::string body;
  const char* what;
};

std::string nested_groups(int depth, std::string_view open) {
  std::string out;
  out.reserve(static_cast<std::size_t>(depth) * (open.size() + 1) + 1);
  for (int i = 0; i < depth; ++i)
    out += open;
  out += 'a';
  out.append(static_cast<std::size_t>(depth), ')');
  return out;
}

std::string chat_body(std::string_view model, const std::function<void(json_writer&)>& extra) {
  json_writer w;
  w.begin_object().key("model").value(model).key("max_tokens").value(8);
  w.key("messages").begin_array().begin_object().key("role").value("user").key("content").value("hi");
  w.end_object().end_array();
  extra(w);
  w.end_object();
  return w.take();
}

/// A completion body; `extra` writes the prompt itself when `own_prompt`.
std::string completion_body(std::string_view model, const std::function<void(json_writer&)>& extra,
                            bool own_prompt = false) {
  json_writer w;
  w.begin_object().key("model").value(model).key("max_tokens").value(8);
  if (!own_prompt)
    w.key("prompt").value("Once upon a time");
  extra(w);
  w.end_object();
  return w.take();
}

const std::vector<hostile_body>& structured_attacks(const std::string& model) {
  static const std::vector<hostile_body> bodies = [&] {
    std::vector<hostile_body> v;
    const std::string deep = nested_groups(20000, "(");
    const std::string deep_nc = nested_groups(20000, "(?:");
    const std::string stars = "a" + std::string(100000, '*');
    const std::string heavy = "(.{0,100}){0,100}";
    for (const auto* regex : {&deep, &stars, &heavy})
      v.push_back({"/v1/completions",
                   completion_body(model, [&](json_writer& w) { w.key("guided_regex").value(*regex); }),
                   "completions guided_regex"});
    v.push_back({"/v1/completions",
                 completion_body(model,
                                 [&](json_writer& w) {
                                   w.key("structured_outputs").begin_object().key("regex").value(deep_nc).end_object();
                                 }),
                 "completions structured_outputs.regex, (?: groups"});
    v.push_back({"/v1/chat/completions", chat_body(model, [&](json_writer& w) { w.key("guided_regex").value(deep); }),
                 "chat guided_regex"});
    v.push_back({"/v1/chat/completions",
                 chat_body(model,
                           [&](json_writer& w) {
                             w.key("response_format").begin_object().key("type").value("json_schema");
                             w.key("json_schema").begin_object().key("name").value("x").key("schema").begin_object();
                             w.key("type").value("object").key("properties").begin_object().key("s").begin_object();
                             w.key("type").value("string").key("pattern").value(stars);
                             w.end_object().end_object().end_object().end_object().end_object();
                           }),
                 "chat json_schema pattern"});
    return v;
  }();
  return bodies;
}

const std::vector<hostile_body>& limit_attacks(const std::string& model) {
  static const std::vector<hostile_body> bodies = [&] {
    std::vector<hostile_body> v;
    v.push_back({"/v1/completions",
                 completion_body(model,
                                 [](json_writer& w) {
                                   w.key("n").value(256).key("stop").begin_array();
                                   for (int i = 0; i < 100000; ++i)
                                     w.value(fmt::format("stop{:06d}", i));
                                   w.end_array();
                                 }),
                 "100,000 stop strings, n=256"});
    v.push_back({"/v1/completions", completion_body(model, [](json_writer& w) { w.key("n").value(10'000'000); }),
                 "n=10,000,000"});
    v.push_back(
        {"/v1/completions", completion_body(model, [](json_writer& w) { w.key("n").value(2147483647); }), "n=2^31-1"});
    v.push_back({"/v1/completions",
                 completion_body(
                     model,
                     [](json_writer& w) {
                       w.key("n").value(256).key("prompt").begin_array();
                       for (int i = 0; i < 10000; ++i)
                         w.value("hi");
                       w.end_array();
                     },
                     true),
                 "10,000 prompts x n=256"});
    v.push_back({"/v1/chat/completions",
                 chat_body(model,
                           [](json_writer& w) {
                             w.key("chat_template_kwargs").begin_object();
                             for (int i = 0; i < 100000; ++i)
                               w.key(fmt::format("k{}", i)).value(i);
                             w.end_object();
                           }),
                 "100,000 chat_template_kwargs"});
    v.push_back({"/v1/chat/completions",
                 chat_body(model,
                           [](json_writer& w) {
                             w.key("tool_choice").value("required").key("tools").begin_array();
                             for (int i = 0; i < 300; ++i) {
                               w.begin_object().key("type").value("function").key("function").begin_object();
                               w.key("name").value(fmt::format("tool_{}", i)).key("parameters").begin_object();
                               w.key("type").value("object").key("properties").begin_object().key("x").begin_object();
                               w.key("type").value("string").end_object().end_object().end_object();
                               w.end_object().end_object();
                             }
                             w.end_array();
                           }),
                 "300 tools, tool_choice required"});
    return v;
  }();
  return bodies;
}

/// GET /health; nullopt when it answered 200 within a second, else what it did.
asio::awaitable<std::optional<std::string>> health_within_1s(const soak_context& c) {
  const auto t0 = steady::now();
  const http_reply r = co_await app::bench::async_http_call(c.target, "GET", "/health", "", 5s);
  const double ms = 1000.0 * seconds_since(t0);
  if (r.status != 200)
    co_return fmt::format("/health answered {}", r.status);
  if (ms > 1000.0)
    co_return fmt::format("/health took {:.0f} ms", ms);
  co_return std::nullopt;
}

/// Runs one request of kind `k`; nullopt when its outcome is the expected one, else what happened.
asio::awaitable<std::optional<std::string>> run_one(const soak_context& c, kind k, std::mt19937_64& rng,
                                                    steady::time_point phase_start) {
  namespace bench = app::bench;
  const bool chat = random_int(rng, 0, 1) == 1;
  const char* const path = chat ? "/v1/chat/completions" : "/v1/completions";
  const hang_up how = random_int(rng, 0, 1) == 1 ? hang_up::reset : hang_up::close;
  const double temperature = random_int(rng, 0, 2) == 0 ? 0.0 : 0.8;
  switch (k) {
    case kind::stream_completion:
    case kind::stream_chat: {
      const bool is_chat = k == kind::stream_chat;
      // ignore_eos: a stream must carry tokens, and this model may end with EOS at once.
      const std::string body = generation_body(c, is_chat, random_prompt(rng), random_int(rng, 8, 96), temperature,
                                               true, [](json_writer& w) { w.key("ignore_eos").value(true); });
      const auto r = co_await bench::stream_completion(c.target, is_chat ? "/v1/chat/completions" : "/v1/completions",
                                                       body, 0, c.timeout, phase_start);
      if (r.success)
        co_return std::nullopt;
      co_return r.error;
    }
    case kind::completion:
    case kind::chat: {
      const bool is_chat = k == kind::chat;
      const int variant = random_int(rng, 0, 3);
      const uint64_t seed = rng();
      const std::string body = generation_body(
          c, is_chat, random_prompt(rng), random_int(rng, 4, 96), temperature, false, [&](json_writer& w) {
            if (variant == 1)
              w.key("n").value(2);
            else if (variant == 2 && is_chat)
              w.key("logprobs").value(true).key("top_logprobs").value(2);
            else if (variant == 2)
              w.key("logprobs").value(2);
            else if (variant == 3)
              w.key("stop").begin_array().value(".").end_array().key("seed").value(seed >> 1);
          });
      co_return check_generation_reply(
          co_await bench::async_http_call(c.target, "POST", is_chat ? "/v1/chat/completions" : "/v1/completions", body,
                                          c.timeout),
          is_chat);
    }
    case kind::unknown_fields: {
      const std::string body =
          generation_body(c, chat, random_prompt(rng), random_int(rng, 4, 32), temperature, false, [](json_writer& w) {
            w.key("frobnicate").value(true);
            w.key("extra_body").begin_object().key("nested").begin_array().value(1).value("x").end_array().end_object();
          });
      co_return check_generation_reply(co_await bench::async_http_call(c.target, "POST", path, body, c.timeout), chat);
    }
    case kind::hang_up_mid_stream: {
      const int64_t after = random_int(rng, 1, 6);
      const std::string body = generation_body(c, chat, random_prompt(rng), 300, temperature, true,
                                               [](json_writer& w) { w.key("ignore_eos").value(true); });
      const raw_result r = co_await raw_exchange(c, request_bytes(c.target, "POST", path, body), after, how);
      if (r.status != 200)
        co_return fmt::format("HTTP {}: {}", r.status, bench::error_message_of(r.body));
      if (!r.hung_up)
        co_return fmt::format("the stream ended after {} events, before the planned hang-up", r.events);
      co_return std::nullopt;
    }
    case kind::hang_up_before_answer: {
      const bool stream = random_int(rng, 0, 1) == 1;
      const std::string body = generation_body(c, chat, random_prompt(rng), 300, temperature, stream,
                                               [](json_writer& w) { w.key("ignore_eos").value(true); });
      co_await raw_exchange(c, request_bytes(c.target, "POST", path, body), 0, how);
      co_return std::nullopt;
    }
    case kind::hang_up_mid_request: {
      const std::string whole =
          request_bytes(c.target, "POST", path, generation_body(c, chat, random_prompt(rng), 16, temperature, false));
      // Half the head, or the head and half the body: the server waits for the rest, then sees the close.
      const std::size_t head_end = whole.find("\r\n\r\n") + 4;
      const std::size_t cut = random_int(rng, 0, 1) == 1 ? head_end / 2 : head_end + (whole.size() - head_end) / 2;
      co_await raw_exchange(c, whole.substr(0, cut), 0, hang_up::close);
      co_return std::nullopt;
    }
    case kind::malformed_json: {
      static const std::vector<std::string> bodies{"{not json",         "",     "[1,2",
                                                   R"({"prompt":"hi")", "null", R"({"prompt":"hi",})"};
      const http_reply r = co_await bench::async_http_call(c.target, "POST", path, pick(bodies, rng), c.timeout);
      co_return check_error_reply(r.status, r.body, {400});
    }
    case kind::invalid_value: {
      static const std::vector<std::pair<const char*, std::string>> cases{
          {"/v1/completions", R"({"prompt":1})"},
          {"/v1/completions", R"({"prompt":[]})"},
          {"/v1/completions", R"({"prompt":"hi","temperature":-1})"},
          {"/v1/completions", R"({"prompt":"hi","max_tokens":100000})"},
          {"/v1/completions", R"({"prompt":"hi","max_tokens":-3})"},
          {"/v1/completions", R"({"prompt":"hi","n":0})"},
          {"/v1/completions", R"({"prompt":"hi","logprobs":21})"},
          {"/v1/completions", R"({"prompt":"hi","top_p":0})"},
          {"/v1/completions", R"({"prompt":"hi","stop":5})"},
          {"/v1/completions", R"({"prompt":"hi","stream_options":{"include_usage":true}})"},
          {"/v1/completions", "{\"prompt\":\"\xff\xfe\"}"},
          {"/v1/chat/completions", R"({"messages":"hi"})"},
          {"/v1/chat/completions", R"({"messages":[]})"},
          {"/v1/chat/completions", R"({"messages":[{"role":"user"}]})"},
          {"/v1/chat/completions", R"({"messages":[{"role":"user","content":"hi"}],"top_logprobs":3})"},
      };
      const auto& [where, body] = pick(cases, rng);
      const http_reply r = co_await bench::async_http_call(c.target, "POST", where, body, c.timeout);
      co_return check_error_reply(r.status, r.body, {400});
    }
    case kind::unknown_model: {
      const std::string body = chat ? R"({"model":"no-such-model","messages":[{"role":"user","content":"hi"}]})"
                                    : R"({"model":"no-such-model","prompt":"hi"})";
      const http_reply r = co_await bench::async_http_call(c.target, "POST", path, body, c.timeout);
      co_return check_error_reply(r.status, r.body, {404});
    }
    case kind::wrong_route: {
      static const std::vector<std::pair<const char*, const char*>> routes{
          {"GET", "/v1/completions"}, {"POST", "/v1/no-such-route"}, {"DELETE", "/v1/models"}, {"GET", "/nope"}};
      const auto& [method, where] = pick(routes, rng);
      const http_reply r = co_await bench::async_http_call(c.target, method, where, "{}", c.timeout);
      co_return check_error_reply(r.status, r.body, {404, 405});
    }
    case kind::garbage_http: {
      static const std::vector<std::string> garbage{
          "GARBAGE\r\n\r\n",
          std::string{"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03", 11},  // a TLS ClientHello's start
          "GET / HTTP/9.9\r\nHost: x\r\n\r\n",
          "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: abc\r\n\r\n{",
          "POST /v1/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
      };
      const raw_result r = co_await raw_exchange(c, pick(garbage, rng), -1, hang_up::close);
      co_return check_error_reply(r.status, r.body, {400});
    }
    case kind::oversized_head: {
      const std::string bytes = fmt::format("GET /health HTTP/1.1\r\nHost: {}\r\nX-Big: {}\r\n\r\n",
                                            c.target.host_header, std::string(16 * 1024, 'a'));
      const raw_result r = co_await raw_exchange(c, bytes, -1, hang_up::close);
      co_return check_error_reply(r.status, r.body, {431});
    }
    case kind::oversized_body: {
      // A Content-Length far over --max-body-bytes: refused from the head, before any body is read.
      const std::string bytes =
          fmt::format("POST {} HTTP/1.1\r\nHost: {}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{{",
                      path, c.target.host_header, 1'000'000'000);
      const raw_result r = co_await raw_exchange(c, bytes, -1, hang_up::close);
      co_return check_error_reply(r.status, r.body, {413});
    }
    case kind::hostile_structured:
    case kind::hostile_limits: {
      const auto& all = k == kind::hostile_structured ? structured_attacks(c.model) : limit_attacks(c.model);
      const hostile_body& h = pick(all, rng);
      const auto t0 = steady::now();
      const http_reply r = co_await bench::async_http_call(c.target, "POST", h.path, h.body, c.timeout);
      if (auto wrong = check_error_reply(r.status, r.body, {400}))
        co_return fmt::format("{}: {}", h.what, *wrong);
      if (seconds_since(t0) > 2.0)  // refused before the work: a 4xx that took seconds was still an outage
        co_return fmt::format("{}: refused only after {:.1f} s", h.what, seconds_since(t0));
      co_return std::nullopt;
    }
    case kind::batch_hang_up: {
      json_writer w;
      w.begin_object().key("model").value(c.model).key("max_tokens").value(300).key("temperature").value(temperature);
      w.key("ignore_eos").value(true).key("n").value(2).key("stream").value(random_int(rng, 0, 1) == 1);
      w.key("prompt").begin_array();
      for (int i = 0; i < 4; ++i)
        w.value(random_prompt(rng));
      w.end_array().end_object();
      co_await raw_exchange(c, request_bytes(c.target, "POST", "/v1/completions", w.take()), 0, how);
      co_return std::nullopt;
    }
    case kind::idle_connections: {
      // Connections that never send a byte; the server may also close some (a connection cap): either is fine, as
      // long as /health answers within a second while they are held.
      std::vector<std::unique_ptr<beast::tcp_stream>> held;
      for (int i = 0; i < 64; ++i) {
        auto s = std::make_unique<beast::tcp_stream>(co_await asio::this_coro::executor);
        s->expires_after(5s);
        beast::error_code ec;
        co_await s->async_connect(c.target.endpoints, asio::redirect_error(use_awaitable, ec));
        if (!ec)
          held.push_back(std::move(s));
      }
      asio::steady_timer hold{co_await asio::this_coro::executor};
      hold.expires_after(std::chrono::milliseconds{random_int(rng, 500, 2000)});
      beast::error_code ignored;
      co_await hold.async_wait(asio::redirect_error(use_awaitable, ignored));
      auto verdict = co_await health_within_1s(c);
      for (auto& s : held)
        s->socket().close(ignored);
      co_return verdict;
    }
  }
  co_return "unknown kind";
}

}  // namespace

phase_result run_traffic(const soak_context& c, const char* phase, std::chrono::seconds duration, int concurrency,
                         uint64_t seed, std::vector<series_point>& series, steady::time_point series_start,
                         std::chrono::seconds sample_every) {
  asio::io_context io;
  phase_result out;
  const auto start = steady::now();
  const auto end = start + duration;
  std::vector<double> weights;
  for (const auto& k : kinds)
    weights.push_back(k.weight);
  bool stop = false;
  std::exception_ptr failure;
  int64_t in_flight = 0;

  auto worker = [&](uint64_t worker_seed) -> asio::awaitable<void> {
    std::mt19937_64 rng{worker_seed};
    std::discrete_distribution<int> which{weights.begin(), weights.end()};
    while (!stop && steady::now() < end) {
      const int k = which(rng);
      tally& t = out.counts[static_cast<std::size_t>(k)];
      ++t.sent;
      ++in_flight;
      std::optional<std::string> why;
      try {
        why = co_await run_one(c, static_cast<kind>(k), rng, start);
      } catch (const std::exception& e) {
        why = e.what();
      }
      --in_flight;
      if (!why)
        ++t.as_expected;
      else if (t.examples.size() < 3)
        t.examples.push_back(*why);
    }
  };
  auto sampler = [&]() -> asio::awaitable<void> {
    asio::steady_timer timer{io};
    auto next_progress = start + 60s;
    while (steady::now() < end && !stop) {
      beast::error_code ec;
      timer.expires_after(std::min<steady::duration>(sample_every, end - steady::now()));
      co_await timer.async_wait(asio::redirect_error(use_awaitable, ec));
      const process_sample s = sample_process(c.pid);
      series.push_back({seconds_since(series_start), s});
      if (!s.alive) {
        out.server_died = true;
        stop = true;  // the workers end with their current request
        std::fprintf(stderr, "serve_soak: the server (pid %d) is gone\n", static_cast<int>(c.pid));
      }
      if (steady::now() >= next_progress || steady::now() >= end) {
        next_progress += 60s;
        int64_t sent = 0;
        int64_t unexpected = 0;
        for (const tally& t : out.counts) {
          sent += t.sent;
          unexpected += t.unexpected();
        }
        std::fprintf(stderr, "  %s %4.0f s: %lld requests (%lld in flight, %lld unexpected), RSS %.1f MiB, %lld fds\n",
                     phase, seconds_since(start), static_cast<long long>(sent), static_cast<long long>(in_flight),
                     static_cast<long long>(unexpected - in_flight), static_cast<double>(s.rss_kb) / 1024.0,
                     static_cast<long long>(s.fds));
      }
    }
  };
  auto health_prober = [&]() -> asio::awaitable<void> {
    asio::steady_timer timer{io};
    while (steady::now() < end && !stop) {
      beast::error_code ec;
      timer.expires_after(1s);
      co_await timer.async_wait(asio::redirect_error(use_awaitable, ec));
      const auto t0 = steady::now();
      std::string problem;
      try {
        const http_reply r = co_await app::bench::async_http_call(c.target, "GET", "/health", "", 10s);
        if (r.status != 200)
          problem = fmt::format("/health answered {} at {:.0f} s", r.status, seconds_since(start));
      } catch (const std::exception& e) {
        problem = fmt::format("/health failed at {:.0f} s: {}", seconds_since(start), e.what());
      }
      const double ms = 1000.0 * seconds_since(t0);
      health_probe& h = out.health;
      ++h.probes;
      h.max_ms = std::max(h.max_ms, ms);
      if (!problem.empty())
        ++h.not_ok;
      if (ms > 1000.0) {
        ++h.over_1s;
        if (problem.empty())
          problem = fmt::format("/health took {:.0f} ms at {:.0f} s", ms, seconds_since(start));
      }
      if (!problem.empty() && h.first_problem.empty())
        h.first_problem = problem;
    }
  };
  auto on_done = [&](std::exception_ptr e) {
    if (e && !failure)
      failure = e;
  };
  for (int i = 0; i < concurrency; ++i)
    asio::co_spawn(io, worker(seed * 1'000'003 + static_cast<uint64_t>(i)), on_done);
  asio::co_spawn(io, sampler(), on_done);
  asio::co_spawn(io, health_prober(), on_done);
  io.run();
  out.seconds = seconds_since(start);
  if (failure)
    std::rethrow_exception(failure);
  return out;
}

}  // namespace actorllm::soak
