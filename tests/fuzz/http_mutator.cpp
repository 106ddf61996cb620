// A grammar of HTTP/1.1 requests that leans on what parsers get wrong (framing headers that disagree, chunk sizes,
// extensions and trailers, limits give or take a byte, line endings), then byte-level mutations near the structure.
// Every choice draws from one std::mt19937_64 with plain modulo (no std distributions, whose output is left to the
// library), so a seed means the same case everywhere.
#include "fuzz/http_mutator.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <random>
#include <string_view>

namespace actorllm::fuzz {

std::string fuzz_case::bytes() const {
  std::string out;
  for (const auto& p : pieces)
    out += p;
  return out;
}

std::string fuzz_case::describe() const {
  static constexpr const char* endings[] = {"half_close", "hold_open", "reset", "close_unread"};
  const std::string all = bytes();
  return fmt::format("case seed={:#x}: {} request(s), {} bytes in {} piece(s){}, ending={}\n  bytes: \"{}\"", seed,
                     requests, all.size(), pieces.size(), slow ? " (slow)" : "", endings[static_cast<int>(ending)],
                     escape_bytes(all));
}

std::string escape_bytes(const std::string& bytes, std::size_t max_chars) {
  std::string out;
  for (std::size_t i = 0; i < bytes.size() && out.size() < max_chars;) {
    std::size_t run = 1;
    while (i + run < bytes.size() && bytes[i + run] == bytes[i])
      ++run;
    const auto c = static_cast<unsigned char>(bytes[i]);
    std::string one;
    if (c == '\r')
      one = "\\r";
    else if (c == '\n')
      one = "\\n";
    else if (c == '\\' || c == '"')
      one = std::string{"\\"} + static_cast<char>(c);
    else if (c < 0x20 || c >= 0x7f)
      one = fmt::format("\\x{:02x}", c);
    else
      one = std::string(1, static_cast<char>(c));
    if (run > 32) {
      out += fmt::format("{}{{x{}}}", one, run);
      i += run;
    } else {
      out += one;
      ++i;
    }
  }
  if (out.size() >= max_chars)
    out += "...";
  return out;
}

namespace {

class generator {
 public:
  generator(uint64_t seed, const target_profile& profile) : rng_{seed}, profile_{profile} {}

  fuzz_case make(uint64_t seed) {
    fuzz_case c;
    c.seed = seed;
    const int roll = static_cast<int>(below(100));
    c.requests = roll < 65 ? 1 : roll < 85 ? 2 : 3 + static_cast<int>(below(3));
    // At most one request is mutated, so the ones before it are answered and what the damage does to the
    // connection's later requests (and the answers already owed) is seen.
    const auto n_requests = static_cast<std::size_t>(c.requests);
    const std::size_t mutated = chance(40) ? below(n_requests) : n_requests;
    std::string all;
    for (int i = 0; i < c.requests; ++i) {
      std::string one = request(i + 1 == c.requests);
      if (static_cast<std::size_t>(i) == mutated)
        mutate(one);
      all += one;
    }
    const int end = static_cast<int>(below(100));
    c.ending = end < 72   ? client_ending::half_close
               : end < 82 ? client_ending::hold_open
               : end < 91 ? client_ending::reset
                          : client_ending::close_unread;
    c.slow = chance(15);
    c.pieces = split(all, c.slow);
    return c;
  }

 private:
  std::size_t below(std::size_t n) { return n == 0 ? 0 : static_cast<std::size_t>(rng_() % n); }
  bool chance(int percent) { return below(100) < static_cast<std::size_t>(percent); }
  template <class T>
  const T& pick(const std::vector<T>& v) {
    return v[below(v.size())];
  }
  /// A size around `limit`: just under, at, or just over it.
  std::size_t around(std::size_t limit) {
    const std::size_t delta = below(33);
    return chance(50) ? limit + delta : (limit > delta ? limit - delta : 0);
  }

  std::string token(std::size_t max_len) {
    static const std::string chars = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_!#$%&'*+.^`|~";
    std::string out;
    const std::size_t n = 1 + below(max_len);
    for (std::size_t i = 0; i < n; ++i)
      out += chars[below(chars.size())];
    return out;
  }

  std::string request_line(std::string_view eol) {
    static const std::vector<std::string> methods = {"GET",  "POST",   "POST",    "POST",    "OPTIONS", "HEAD",
                                                     "PUT",  "DELETE", "PATCH",   "CONNECT", "TRACE",   "get",
                                                     "P0ST", "",       "GET\x01", "PRI",     "BREW",    "POST\xff"};
    std::string method = chance(5) ? token(40) : pick(methods);
    if (chance(1))
      method = std::string(around(profile_.max_header_bytes), 'M');
    std::string target;
    const int t = static_cast<int>(below(100));
    if (t < 80) {
      target = pick(profile_.paths);
      if (chance(10))
        target += "?q=" + token(20);
    } else {
      static const std::vector<std::string> odd = {"/",
                                                   "*",
                                                   "http://127.0.0.1/json",
                                                   "/no/such",
                                                   "//json",
                                                   "/json#frag",
                                                   "/%zz",
                                                   "/\x01",
                                                   "/\xc3\xa9",
                                                   "/json ",
                                                   "",
                                                   "/json?a=b&c",
                                                   "/json\t",
                                                   "../../etc/passwd"};
      target = pick(odd);
      if (chance(8))
        target = "/" + std::string(around(profile_.max_header_bytes), 'p');
    }
    static const std::vector<std::string> versions = {"HTTP/1.0", "HTTP/2.0",  "HTTP/1.2",  "HTTP/0.9", "HTTP/1",
                                                      "http/1.1", "HTTP/11.1", "HTTP/1.1 ", "",         "HTTP/1.10"};
    const std::string version = chance(92) ? "HTTP/1.1" : pick(versions);
    const std::string sp = chance(96) ? " " : pick(std::vector<std::string>{"  ", "\t", "", " \r "});
    return method + sp + target + sp + version + std::string{eol};
  }

  std::string json_body(std::size_t size) {
    std::string out = R"({"prompt":"Once upon a time","max_tokens":4,"pad":")";
    while (out.size() + 2 < size)
      out += static_cast<char>('a' + below(26));
    out += "\"}";
    if (out.size() > size)
      out.resize(size);
    return out;
  }

  std::size_t body_size() {
    const int r = static_cast<int>(below(100));
    if (r < 30)
      return 0;
    if (r < 80)
      return below(300);
    if (r < 92)
      return around(profile_.max_body_bytes);
    return profile_.max_body_bytes * (2 + below(4));
  }

  std::string chunk_size(std::size_t n) {
    const int r = static_cast<int>(below(100));
    if (r < 75)
      return fmt::format("{:x}", n);
    if (r < 80)
      return fmt::format("{:X}", n);
    if (r < 84)
      return fmt::format("{:08x}", n);
    if (r < 88)
      return fmt::format("{:x};ext={}", n, token(10));
    if (r < 90)
      return fmt::format("{:x};q=\"quoted ;\\\" ext\"", n);
    if (r < 92)
      return fmt::format("{:x};{}", n, std::string(around(64 * 1024), 'e'));  // past Beast's unbounded line
    if (r < 94)
      return fmt::format("{:x}", n + 1 + below(3));  // more than follows
    return pick(std::vector<std::string>{"zz", "-5", "fffffffffffffffffffff", "", " 5", "5 ", "0x5", "1;", ";"});
  }

  std::string trailer(std::string_view eol) {
    const int r = static_cast<int>(below(100));
    if (r < 70)
      return "";
    if (r < 82)
      return "X-Checksum: " + token(30) + std::string{eol};
    if (r < 88) {  // a field at Beast's 65533-byte ceiling for one value, or well past it
      const std::size_t n = chance(60) ? around(65533) : 60000 + below(12000);
      return "X-T: " + std::string(n, 'a') + std::string{eol};
    }
    if (r < 92) {
      std::string out;
      const std::size_t count = 1 + below(400);
      for (std::size_t i = 0; i < count; ++i)
        out += "X-" + token(8) + ": " + token(40) + std::string{eol};
      return out;
    }
    if (r < 95)
      return "Content-Length: 999" + std::string{eol};
    if (r < 97)
      return "no colon here" + std::string{eol};
    return " folded: line" + std::string{eol};
  }

  std::string chunked_body(const std::string& body, std::string_view eol) {
    std::string out;
    std::size_t at = 0;
    const std::size_t n_chunks = body.empty() ? 0 : 1 + below(4);
    for (std::size_t k = 0; k < n_chunks && at < body.size(); ++k) {
      const std::size_t n = k + 1 == n_chunks ? body.size() - at : 1 + below(body.size() - at);
      out += chunk_size(n) + std::string{eol} + body.substr(at, n);
      if (!chance(3))  // sometimes the CRLF after the data is missing
        out += eol;
      at += n;
    }
    if (chance(3)) {  // a trailer that never ends: the client keeps sending it until the server gives up
      out += "0" + std::string{eol} + "X-T: " + std::string(100 * 1024 + below(200 * 1024), 'a');
      return out;
    }
    out += pick(std::vector<std::string>{"0", "0", "0", "0", "00", "0;last=1", "000000"}) + std::string{eol};
    out += trailer(eol);
    if (!chance(2))
      out += eol;
    return out;
  }

  std::string header_block(std::string_view eol) {
    std::string out;
    const std::size_t n = below(5);
    for (std::size_t i = 0; i < n; ++i) {
      const int r = static_cast<int>(below(100));
      std::string h;
      if (r < 20)
        h = "Content-Type: application/json";
      else if (r < 28)
        h = "Accept: */*";
      else if (r < 36)
        h = "x-request-id: " + token(40);
      else if (r < 40)
        h = "x-request-id: \x7f\x80\xff";
      else if (r < 46)
        h = "Origin: http://" + token(10) + ".example";
      else if (r < 52)
        h = "Expect: 100-continue";
      else if (r < 58)
        h = token(20) + ": " + token(60);
      else if (r < 62)
        h = "NoColonHeader";
      else if (r < 66)
        h = "Space Before : colon";
      else if (r < 70)
        h = std::string{"X-Folded: a"} + std::string{eol} + " b";
      else if (r < 73)
        h = ": empty-name";
      else if (r < 76)
        h = std::string{"X-Nul: a\0b", 10};
      else if (r < 80)
        h = "Upgrade: websocket";
      else if (r < 86)
        h = "X-Big: " + std::string(around(profile_.max_header_bytes), 'h');
      else if (r < 90) {
        const std::size_t count = 50 + below(400);
        for (std::size_t k = 0; k < count; ++k)
          h += (k ? std::string{eol} : "") + "X-Many-" + std::to_string(k) + ": " + token(20);
      } else if (r < 94)
        h = "Authorization: Bearer " + token(60);
      else
        h = "Content-Encoding: gzip";
      out += h + std::string{eol};
    }
    return out;
  }

  std::string request(bool last) {
    const std::string eol = chance(93) ? "\r\n" : pick(std::vector<std::string>{"\n", "\r", "\r\r\n", "\n\r", "\r\n "});
    std::string out = request_line(eol);
    if (chance(90))
      out += "Host: 127.0.0.1" + eol;
    if (last ? chance(50) : chance(8))
      out += "Connection: close" + eol;
    else if (chance(15))
      out += pick(std::vector<std::string>{"Connection: keep-alive", "Connection: Upgrade",
                                           "Connection: close, keep-alive", "Connection: ,,,",
                                           "Proxy-Connection: close"}) +
             eol;
    out += header_block(eol);
    const std::string body = json_body(body_size());
    const int mode = static_cast<int>(below(100));
    if (mode < 25) {  // no body headers (a body sent anyway is the next "request")
      if (chance(10))
        return out + eol + body;
      return out + eol;
    }
    if (mode < 62) {
      std::string length = std::to_string(body.size());
      const int v = static_cast<int>(below(100));
      if (v >= 85) {
        length = pick(std::vector<std::string>{"-1", "abc", "99999999999999999999999", " 5", "5, 5", "0x10", "",
                                               std::to_string(body.size()) + "," + std::to_string(body.size() + 1),
                                               "18446744073709551615", "1e3"});
      } else if (v >= 78) {  // disagrees with what is sent
        length = std::to_string(body.size() + below(12) - (body.size() > 5 ? 5 : 0));
      }
      out += "Content-Length: " + length + eol;
      if (chance(4))
        out += "Content-Length: " + std::to_string(body.size() + 1) + eol;
      return out + eol + body;
    }
    if (mode < 92) {
      const std::string te = chance(90)
                                 ? "chunked"
                                 : pick(std::vector<std::string>{"Chunked", "gzip, chunked", "chunked, gzip",
                                                                 "identity", "chunked\t", "chunked, chunked", "x"});
      out += "Transfer-Encoding: " + te + eol;
      if (chance(3))
        out += "Transfer-Encoding: chunked" + eol;
      return out + eol + chunked_body(body, eol);
    }
    if (mode < 96) {  // both framings: a request smuggler's favourite
      out += "Content-Length: " + std::to_string(body.size()) + eol + "Transfer-Encoding: chunked" + eol;
      return out + eol + chunked_body(body, eol);
    }
    return out + "Transfer-Encoding: " + token(10) + eol + eol + body;
  }

  void mutate(std::string& s) {
    static const std::vector<std::string> dictionary = {"\r\n",
                                                        "\r\n\r\n",
                                                        "0\r\n\r\n",
                                                        "Transfer-Encoding: chunked\r\n",
                                                        "Content-Length: 5\r\n",
                                                        ":",
                                                        " ",
                                                        "\t",
                                                        "HTTP/1.1",
                                                        "GET /json HTTP/1.1\r\n\r\n",
                                                        "ffffffff",
                                                        "\"",
                                                        "0",
                                                        "9",
                                                        ";",
                                                        "\x00",
                                                        "\xff",
                                                        "\n",
                                                        "\r",
                                                        "Connection: close\r\n",
                                                        "Expect: 100-continue\r\n"};
    const std::size_t ops = 1 + below(4);
    for (std::size_t k = 0; k < ops; ++k) {
      // Half of the positions are next to a line end, where the framing lives.
      std::size_t pos = below(s.size() + 1);
      if (chance(50)) {
        std::vector<std::size_t> ends;
        for (std::size_t i = s.find('\n'); i != std::string::npos && ends.size() < 512; i = s.find('\n', i + 1))
          ends.push_back(i);
        if (!ends.empty())
          pos = std::min(s.size(), pick(ends) + below(3));
      }
      switch (below(7)) {
        case 0:
          if (pos < s.size())
            s[pos] = chance(50) ? static_cast<char>(rng_() & 0xff) : "\r\n: 0;\x7f\xff"[below(8)];
          break;
        case 1: {
          const std::string& d = pick(dictionary);
          s.insert(pos, d.empty() ? std::string(1, '\0') : d);
          break;
        }
        case 2:
          s.erase(pos, 1 + below(16));
          break;
        case 3:
          if (pos < s.size())
            s.insert(pos, s.substr(pos, 1 + below(64)));
          break;
        case 4:
          s.resize(pos);
          break;
        case 5:
          s.insert(pos, std::string(1 + below(chance(20) ? 80000 : 64), pick(std::vector<char>{'a', ' ', '0', '\r'})));
          break;
        default:
          if (pos < s.size())
            s.erase(pos, 1);
          break;
      }
    }
  }

  std::vector<std::string> split(const std::string& s, bool slow) {
    std::vector<std::string> out;
    if (s.empty())
      return {std::string{}};
    if (slow) {  // byte at a time for small inputs, else up to 600 even pieces
      const std::size_t step = std::max<std::size_t>(1, s.size() / 600);
      for (std::size_t at = 0; at < s.size(); at += step)
        out.push_back(s.substr(at, step));
      return out;
    }
    if (chance(70))
      return {s};
    std::vector<std::size_t> cuts;
    const std::size_t n = 1 + below(7);
    for (std::size_t i = 0; i < n; ++i)
      cuts.push_back(below(s.size()));
    std::sort(cuts.begin(), cuts.end());
    std::size_t at = 0;
    for (std::size_t c : cuts) {
      if (c > at)
        out.push_back(s.substr(at, c - at));
      at = std::max(at, c);
    }
    out.push_back(s.substr(at));
    return out;
  }

  std::mt19937_64 rng_;
  const target_profile& profile_;
};

}  // namespace

fuzz_case generate_case(uint64_t seed, const target_profile& profile) { return generator{seed, profile}.make(seed); }

}  // namespace actorllm::fuzz
