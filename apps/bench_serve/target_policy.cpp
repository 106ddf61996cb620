// Base-URL parsing and the default address allow-list of `actorllm bench serve`.
#include "apps/bench_serve/target_policy.hpp"

#include <fmt/format.h>

#include <arpa/inet.h>

#include <algorithm>
#include <array>
#include <charconv>
#include <stdexcept>

namespace actorllm::app::bench {

base_url parse_base_url(std::string_view url) {
  constexpr std::string_view scheme = "http://";
  if (url.rfind("https://", 0) == 0)
    throw std::invalid_argument(fmt::format("--base-url: '{}': https is not supported (plain http only)", url));
  if (url.rfind(scheme, 0) != 0)
    throw std::invalid_argument(fmt::format("--base-url: '{}' does not start with http://", url));
  std::string_view rest = url.substr(scheme.size());
  const auto slash = rest.find('/');
  std::string_view authority = rest.substr(0, slash);
  base_url out;
  if (slash != std::string_view::npos) {
    out.path_prefix = std::string{rest.substr(slash)};
    while (!out.path_prefix.empty() && out.path_prefix.back() == '/')
      out.path_prefix.pop_back();
  }
  std::string_view port_text;
  bool has_port = false;
  if (!authority.empty() && authority.front() == '[') {
    const auto close = authority.find(']');
    if (close == std::string_view::npos)
      throw std::invalid_argument(fmt::format("--base-url: '{}': unclosed '[' in the host", url));
    out.host = std::string{authority.substr(1, close - 1)};
    std::string_view after = authority.substr(close + 1);
    if (!after.empty()) {
      if (after.front() != ':')
        throw std::invalid_argument(fmt::format("--base-url: '{}': expected ':port' after ']'", url));
      port_text = after.substr(1);
      has_port = true;
    }
  } else {
    const auto colon = authority.find(':');
    out.host = std::string{authority.substr(0, colon)};
    if (colon != std::string_view::npos) {
      port_text = authority.substr(colon + 1);
      has_port = true;
    }
  }
  if (out.host.empty())
    throw std::invalid_argument(fmt::format("--base-url: '{}' has no host", url));
  if (authority.find('@') != std::string_view::npos)
    throw std::invalid_argument(fmt::format("--base-url: '{}': user info in the URL is not supported", url));
  if (has_port) {
    unsigned value = 0;
    auto [end, ec] = std::from_chars(port_text.data(), port_text.data() + port_text.size(), value);
    if (ec != std::errc{} || end != port_text.data() + port_text.size() || value == 0 || value > 65535)
      throw std::invalid_argument(fmt::format("--base-url: '{}': '{}' is not a port", url, port_text));
    out.port = static_cast<uint16_t>(value);
  }
  return out;
}

namespace {

bool ipv4_allowed(const unsigned char* b) { return b[0] == 127 || b[0] == 10 || (b[0] == 192 && b[1] == 168); }

}  // namespace

bool address_allowed_by_default(std::string_view ip) {
  const std::string text{ip};
  std::array<unsigned char, 16> buf{};
  if (::inet_pton(AF_INET, text.c_str(), buf.data()) == 1)
    return ipv4_allowed(buf.data());
  if (::inet_pton(AF_INET6, text.c_str(), buf.data()) != 1)
    return false;
  static constexpr std::array<unsigned char, 16> loopback6{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1};
  if (buf == loopback6)
    return true;
  // ::ffff:a.b.c.d, an IPv4 address seen through an IPv6 socket.
  static constexpr std::array<unsigned char, 12> mapped_prefix{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
  if (std::equal(mapped_prefix.begin(), mapped_prefix.end(), buf.begin()))
    return ipv4_allowed(buf.data() + 12);
  return false;
}

}  // namespace actorllm::app::bench
