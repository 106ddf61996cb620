// The URLs the Hub client speaks to: http and https only, parsed into what a connection needs, with the resolution
// of a redirect's Location against the URL it came from and the origin test that decides where a token may go.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace actorllm::hub {

/// An absolute http(s) URL.
struct url {
  std::string scheme;  ///< "http" or "https"
  std::string host;    ///< a name or an address (IPv6 without the brackets)
  uint16_t port = 0;   ///< given or the scheme's default
  std::string target;  ///< path and query, starting with '/'

  /// Parses "http(s)://host[:port][/path][?query]"; throws hub_error naming the text otherwise (no user info, no
  /// fragment is kept).
  static url parse(std::string_view text);

  /// "scheme://host[:port]", the port only when not the scheme's default.
  std::string origin() const;
  /// origin() + target.
  std::string str() const;
  /// The Host header: host[:port] as in origin().
  std::string host_header() const;
  /// Same scheme, host (case-insensitive) and port: where the Hub's token may be sent.
  bool same_origin(const url& other) const;
  /// A redirect's Location resolved against this URL: absolute, scheme-relative ("//host/x"), absolute path or
  /// relative path. Throws hub_error for anything that is not http(s).
  url resolve(std::string_view location) const;
};

/// Percent-encodes everything but unreserved characters (RFC 3986), and '/' too when `keep_slash` (file paths in a
/// repo keep their folders; a revision like "refs/pr/1" is one path segment and does not).
std::string percent_encode(std::string_view text, bool keep_slash);

}  // namespace actorllm::hub
