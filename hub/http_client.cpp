// The Hub's HTTP client on Boost.Beast: see http_client.hpp.
#include "hub/http_client.hpp"

// GCC 12 reports asio's awaitable frames (allocated by their own operator new, freed by the matching sized operator
// delete) as -Wmismatched-new-delete: a false positive (as in apps/bench_serve/http_client.cpp).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
#endif

#include <fmt/format.h>

#include <utility>  // Boost 1.74's awaitable.hpp uses std::exchange without including it

#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/address.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>

#include <array>
#include <cctype>
#include <exception>
#include <limits>

namespace actorllm::hub {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
namespace ssl = asio::ssl;
using asio::use_awaitable;

struct http_client::tls_state {
  ssl::context context{ssl::context::tls_client};
  explicit tls_state(const std::string& ca_file) {
    beast::error_code ec;
    if (ca_file.empty())
      context.set_default_verify_paths(ec);  // the system store; OpenSSL also reads $SSL_CERT_FILE and $SSL_CERT_DIR
    else
      context.load_verify_file(ca_file, ec);
    if (ec)
      throw hub_error(fmt::format("cannot load the CA certificates {}: {}",
                                  ca_file.empty() ? std::string{"of the system"} : ca_file, ec.message()));
    context.set_verify_mode(ssl::verify_peer);
    SSL_CTX_set_min_proto_version(context.native_handle(), TLS1_2_VERSION);
  }
};

namespace {

constexpr std::size_t kept_error_body = 64u << 10;

std::string lower(std::string_view s) {
  std::string out{s};
  for (char& c : out)
    c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

std::string describe(const beast::error_code& ec, std::chrono::milliseconds timeout) {
  if (ec == beast::error::timeout)
    return fmt::format("no answer within {:.0f} s (HF_HUB_DOWNLOAD_TIMEOUT)",
                       std::chrono::duration<double>(timeout).count());
  return ec.message();
}

bool interrupted(const beast::error_code& ec) {
  return ec == http::error::partial_message || ec == http::error::end_of_stream || ec == asio::error::eof ||
         ec == beast::error::timeout || ec == asio::error::connection_reset || ec == asio::error::broken_pipe ||
         ec == ssl::error::stream_truncated;
}

struct exchange {
  const http_request& request;
  const body_sink& sink;
  const head_hook& on_head;
  uint64_t max_body;
  std::chrono::milliseconds timeout;
  http_response& out;

  // One request and its answer over a connected (and, for https, handshaken) stream.
  template <class Stream>
  asio::awaitable<void> run(Stream& stream, beast::tcp_stream& tcp) {
    const std::string where = request.target.str();
    beast::error_code ec;
    http::request<http::empty_body> req{http::string_to_verb(request.method), request.target.target, 11};
    req.set(http::field::host, request.target.host_header());
    req.set(http::field::user_agent, "actorllm/0.1 (hf_hub compatible)");
    req.set(http::field::accept_encoding, "identity");  // bytes as stored: sizes and checksums hold
    req.set(http::field::connection, "close");
    for (const auto& [name, value] : request.headers)
      req.set(name, value);
    tcp.expires_after(timeout);
    co_await http::async_write(stream, req, asio::redirect_error(use_awaitable, ec));
    if (ec)
      throw hub_error(fmt::format("{} {}: sending the request: {}", request.method, where, describe(ec, timeout)));

    beast::flat_buffer buffer;
    http::response_parser<http::buffer_body> parser;
    parser.body_limit(std::numeric_limits<std::uint64_t>::max());
    parser.header_limit(64u << 10);  // a storage redirect carries a long signed URL and many headers
    if (request.method == "HEAD")
      parser.skip(true);
    tcp.expires_after(timeout);
    co_await http::async_read_header(stream, buffer, parser, asio::redirect_error(use_awaitable, ec));
    if (ec)
      throw hub_error(fmt::format("{} {}: reading the answer: {}", request.method, where, describe(ec, timeout)));
    out.status = static_cast<int>(parser.get().result_int());
    for (const auto& field : parser.get())
      out.headers.emplace_back(lower({field.name_string().data(), field.name_string().size()}),
                               std::string{field.value().data(), field.value().size()});
    if (on_head)
      on_head(out);
    const bool to_sink = sink && out.status >= 200 && out.status < 300;
    const bool keep_all = !sink && out.status >= 200 && out.status < 300;

    std::array<char, 1u << 16> piece{};
    uint64_t received = 0;
    while (!parser.is_done()) {
      parser.get().body().data = piece.data();
      parser.get().body().size = piece.size();
      tcp.expires_after(timeout);
      co_await http::async_read_some(stream, buffer, parser, asio::redirect_error(use_awaitable, ec));
      if (ec == http::error::need_buffer)
        ec = {};
      const std::size_t n = piece.size() - parser.get().body().size;
      received += n;
      const std::string_view data{piece.data(), n};
      if (to_sink) {
        if (n > 0)
          sink(data);
      } else if (keep_all) {
        if (received > max_body)
          throw hub_error(fmt::format("{} {}: the answer is larger than {} bytes", request.method, where, max_body));
        out.body.append(data);
      } else if (out.body.size() < kept_error_body) {
        out.body.append(data.substr(0, kept_error_body - out.body.size()));
      }
      if (ec) {
        if (interrupted(ec))
          throw transfer_interrupted(fmt::format("{} {}: the transfer stopped after {} bytes of the body: {}",
                                                 request.method, where, received, describe(ec, timeout)));
        throw hub_error(fmt::format("{} {}: reading the answer: {}", request.method, where, describe(ec, timeout)));
      }
    }
  }
};

asio::awaitable<void> connect(beast::tcp_stream& tcp, const url& target, std::chrono::milliseconds timeout) {
  beast::error_code ec;
  asio::ip::tcp::resolver resolver{co_await asio::this_coro::executor};
  tcp.expires_after(timeout);
  const auto endpoints = co_await resolver.async_resolve(target.host, std::to_string(target.port),
                                                         asio::redirect_error(use_awaitable, ec));
  if (ec)
    throw hub_error(fmt::format("cannot resolve {}: {}", target.host, ec.message()));
  tcp.expires_after(timeout);
  co_await tcp.async_connect(endpoints, asio::redirect_error(use_awaitable, ec));
  if (ec)
    throw hub_error(fmt::format("cannot connect to {}: {}", target.origin(), describe(ec, timeout)));
}

asio::awaitable<void> plain_exchange(exchange& x) {
  beast::tcp_stream tcp{co_await asio::this_coro::executor};
  co_await connect(tcp, x.request.target, x.timeout);
  co_await x.run(tcp, tcp);
  beast::error_code ignored;
  tcp.socket().shutdown(asio::ip::tcp::socket::shutdown_both, ignored);
}

asio::awaitable<void> tls_exchange(exchange& x, ssl::context& context) {
  beast::ssl_stream<beast::tcp_stream> stream{co_await asio::this_coro::executor, context};
  const url& target = x.request.target;
  SSL* handle = stream.native_handle();
  beast::error_code address_error;
  asio::ip::make_address(target.host, address_error);
  const bool is_address = !address_error;
  if (is_address) {
    X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(handle), target.host.c_str());
  } else {
    SSL_set_tlsext_host_name(handle, target.host.c_str());  // SNI: never for an address (RFC 6066)
    SSL_set1_host(handle, target.host.c_str());             // the certificate must name this host
  }
  co_await connect(beast::get_lowest_layer(stream), target, x.timeout);
  beast::get_lowest_layer(stream).expires_after(x.timeout);
  beast::error_code ec;
  co_await stream.async_handshake(ssl::stream_base::client, asio::redirect_error(use_awaitable, ec));
  if (ec) {
    const long verify = SSL_get_verify_result(handle);
    if (verify != X509_V_OK)
      throw hub_error(
          fmt::format("TLS with {}: the certificate is not trusted ({}); the system's CA store (or the bundle in "
                      "$REQUESTS_CA_BUNDLE, $CURL_CA_BUNDLE or $SSL_CERT_FILE) must hold the CA that signed it",
                      target.origin(), X509_verify_cert_error_string(verify)));
    throw hub_error(fmt::format("TLS with {}: {}", target.origin(), describe(ec, x.timeout)));
  }
  co_await x.run(stream, beast::get_lowest_layer(stream));
  beast::error_code ignored;
  beast::get_lowest_layer(stream).socket().shutdown(asio::ip::tcp::socket::shutdown_both, ignored);
}

}  // namespace

std::optional<std::string> http_response::header(std::string_view name) const {
  const std::string key = lower(name);
  for (const auto& [k, v] : headers)
    if (k == key)
      return v;
  return std::nullopt;
}

http_client::http_client(std::chrono::milliseconds timeout, std::string ca_file)
    : timeout_(timeout), ca_file_(std::move(ca_file)) {}

http_client::~http_client() = default;

http_response http_client::send(const http_request& request, const body_sink& sink, const head_hook& on_head,
                                uint64_t max_body) {
  if (request.method != "GET" && request.method != "HEAD")
    throw hub_error(fmt::format("http_client: {} is not supported", request.method));
  http_response out;
  exchange x{request, sink, on_head, max_body, timeout_, out};
  asio::io_context io;
  std::exception_ptr failure;
  if (request.target.scheme == "https") {
    if (!tls_)
      tls_ = std::make_unique<tls_state>(ca_file_);
    asio::co_spawn(io, tls_exchange(x, tls_->context), [&](std::exception_ptr e) { failure = e; });
  } else {
    asio::co_spawn(io, plain_exchange(x), [&](std::exception_ptr e) { failure = e; });
  }
  io.run();
  if (failure)
    std::rethrow_exception(failure);
  return out;
}

}  // namespace actorllm::hub
