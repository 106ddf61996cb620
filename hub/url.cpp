// URLs: see url.hpp.
#include "hub/url.hpp"

#include "hub/hub_error.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>

namespace actorllm::hub {
namespace {

std::string lower(std::string_view s) {
  std::string out{s};
  std::transform(out.begin(), out.end(), out.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return out;
}

uint16_t default_port(std::string_view scheme) { return scheme == "https" ? 443 : 80; }

}  // namespace

url url::parse(std::string_view text) {
  const auto fail = [&](std::string_view why) -> url {
    throw hub_error(fmt::format("'{}' is not a usable URL: {}", text, why));
  };
  const auto sep = text.find("://");
  if (sep == std::string_view::npos)
    return fail("it has no scheme (http:// or https://)");
  url u;
  u.scheme = lower(text.substr(0, sep));
  if (u.scheme != "http" && u.scheme != "https")
    return fail("only http and https are supported");
  std::string_view rest = text.substr(sep + 3);
  const auto fragment = rest.find('#');
  if (fragment != std::string_view::npos)
    rest = rest.substr(0, fragment);
  const auto path_at = rest.find_first_of("/?");
  std::string_view authority = rest.substr(0, path_at);
  u.target = path_at == std::string_view::npos ? "/" : std::string{rest.substr(path_at)};
  if (!u.target.empty() && u.target.front() == '?')
    u.target.insert(u.target.begin(), '/');
  if (authority.find('@') != std::string_view::npos)
    return fail("user names and passwords in URLs are not supported (set HF_TOKEN)");
  std::string_view port_text;
  if (!authority.empty() && authority.front() == '[') {
    const auto close = authority.find(']');
    if (close == std::string_view::npos)
      return fail("an unterminated IPv6 address");
    u.host = std::string{authority.substr(1, close - 1)};
    const std::string_view after = authority.substr(close + 1);
    if (!after.empty()) {
      if (after.front() != ':')
        return fail("unexpected characters after the IPv6 address");
      port_text = after.substr(1);
    }
  } else {
    const auto colon = authority.rfind(':');
    u.host = std::string{authority.substr(0, colon)};
    if (colon != std::string_view::npos)
      port_text = authority.substr(colon + 1);
  }
  if (u.host.empty())
    return fail("it has no host");
  u.host = lower(u.host);
  if (port_text.empty()) {
    u.port = default_port(u.scheme);
  } else {
    unsigned long port = 0;
    for (char c : port_text) {
      if (c < '0' || c > '9' || port > 65535)
        return fail("the port is not a number in [1, 65535]");
      port = port * 10 + static_cast<unsigned long>(c - '0');
    }
    if (port == 0 || port > 65535)
      return fail("the port is not a number in [1, 65535]");
    u.port = static_cast<uint16_t>(port);
  }
  return u;
}

std::string url::host_header() const {
  const std::string h = host.find(':') != std::string::npos ? "[" + host + "]" : host;
  return port == default_port(scheme) ? h : fmt::format("{}:{}", h, port);
}

std::string url::origin() const { return scheme + "://" + host_header(); }

std::string url::str() const { return origin() + target; }

bool url::same_origin(const url& other) const {
  return scheme == other.scheme && host == other.host && port == other.port;
}

url url::resolve(std::string_view location) const {
  if (location.find("://") != std::string_view::npos) {
    // An absolute URL, unless the "://" sits in the query of a relative one.
    const auto sep = location.find("://");
    const auto first_special = location.find_first_of("/?#");
    if (first_special == std::string_view::npos || first_special > sep)
      return parse(location);
  }
  if (location.starts_with("//"))
    return parse(scheme + ":" + std::string{location});
  url out = *this;
  if (location.starts_with("/")) {
    out.target = std::string{location};
  } else {
    std::string base = target.substr(0, target.find('?'));
    base = base.substr(0, base.rfind('/') + 1);
    out.target = base + std::string{location};
  }
  const auto fragment = out.target.find('#');
  if (fragment != std::string::npos)
    out.target.resize(fragment);
  return out;
}

std::string percent_encode(std::string_view text, bool keep_slash) {
  static constexpr char hex[] = "0123456789ABCDEF";
  std::string out;
  for (char ch : text) {
    const auto c = static_cast<unsigned char>(ch);
    if (std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~' || (keep_slash && c == '/')) {
      out += ch;
    } else {
      out += '%';
      out += hex[c >> 4];
      out += hex[c & 0xf];
    }
  }
  return out;
}

}  // namespace actorllm::hub
