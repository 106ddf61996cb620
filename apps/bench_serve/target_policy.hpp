// Which server `actorllm bench serve` may load: the base URL's parts, and the rule that keeps a load generator
// from being pointed at someone else's machine by accident. Pure: no I/O (resolving is the caller's).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace actorllm::app::bench {

/// The parts of an http:// base URL.
struct base_url {
  std::string host;  ///< without brackets for IPv6 literals
  uint16_t port = 80;
  std::string path_prefix;  ///< e.g. "" or "/proxy" (no trailing slash); the endpoint is appended
};

/// Parses "http://host[:port][/prefix]"; throws std::invalid_argument with the reason (https is not supported).
base_url parse_base_url(std::string_view url);

/// True for the addresses a benchmark may target without --allow-remote: loopback (127.0.0.0/8, ::1) and the
/// private ranges the project's test hosts and network namespaces use (10.0.0.0/8, 192.168.0.0/16), also as
/// IPv4-mapped IPv6. `ip` is a numeric address ("127.0.0.1", "::1"); anything unparsable is not allowed.
bool address_allowed_by_default(std::string_view ip);

}  // namespace actorllm::app::bench
