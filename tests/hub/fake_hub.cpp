// The fake Hub's server: see fake_hub.hpp. Requests are parsed with Beast; answers are written as raw HTTP/1.1 so
// that a transfer can be cut short under the Content-Length it announced.
#include "fake_hub.hpp"

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
#endif

#include "util/sha256.hpp"

#include <fmt/format.h>
#include <openssl/sha.h>

#include <utility>  // Boost 1.74's awaitable.hpp uses std::exchange without including it

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include <fstream>
#include <mutex>
#include <optional>
#include <sstream>
#include <thread>

namespace actorllm::test {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using asio::use_awaitable;
using asio::ip::tcp;

namespace {

struct fake_repo {
  std::map<std::string, std::string> refs;  // revision name -> commit
  std::map<std::string, std::map<std::string, fake_hub_file>> commits;
  std::string token;  // gated: the token it needs
};

std::string percent_decode(std::string_view s) {
  std::string out;
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '%' && i + 2 < s.size()) {
      out += static_cast<char>(std::stoi(std::string{s.substr(i + 1, 2)}, nullptr, 16));
      i += 2;
    } else {
      out += s[i];
    }
  }
  return out;
}

std::string git_blob_sha1(const std::string& bytes) {
  const std::string object = fmt::format("blob {}", bytes.size()) + std::string(1, '\0') + bytes;
  unsigned char digest[SHA_DIGEST_LENGTH];
  SHA1(reinterpret_cast<const unsigned char*>(object.data()), object.size(), digest);
  std::string hex;
  for (unsigned char b : digest)
    hex += fmt::format("{:02x}", b);
  return hex;
}

// A raw answer: status line, headers, body (empty for HEAD), and how much of the body to send before closing.
struct answer {
  int status = 200;
  std::string reason = "OK";
  std::vector<std::pair<std::string, std::string>> headers;
  std::string body;
  std::optional<std::size_t> body_length;  // Content-Length when it differs from body (HEAD)
  std::optional<std::size_t> cut;          // send only this many bytes of the body, then close
};

answer error_answer(int status, std::string reason, std::string code, std::string message) {
  answer a{status, std::move(reason), {}, fmt::format("{{\"error\":\"{}\"}}", message), {}, {}};
  a.headers.emplace_back("Content-Type", "application/json");
  if (!code.empty())
    a.headers.emplace_back("X-Error-Code", code);
  a.headers.emplace_back("X-Error-Message", message);
  return a;
}

// "bytes=N-" -> N
std::optional<std::size_t> range_start(const std::string& range) {
  if (!range.starts_with("bytes=") || !range.ends_with("-"))
    return std::nullopt;
  return static_cast<std::size_t>(std::stoull(range.substr(6, range.size() - 7)));
}

// The body of `bytes` for a request with `range`: 200 whole, 206 from the start, 416 past the end.
answer bytes_answer(const std::string& bytes, const std::string& range, bool head) {
  answer a;
  std::size_t from = 0;
  if (auto start = range_start(range)) {
    if (*start >= bytes.size()) {
      answer e = error_answer(416, "Range Not Satisfiable", "", "range past the end");
      e.headers.emplace_back("Content-Range", fmt::format("bytes */{}", bytes.size()));
      return e;
    }
    from = *start;
    a.status = 206;
    a.reason = "Partial Content";
    a.headers.emplace_back("Content-Range", fmt::format("bytes {}-{}/{}", from, bytes.size() - 1, bytes.size()));
  }
  a.headers.emplace_back("Accept-Ranges", "bytes");
  a.body = head ? std::string{} : bytes.substr(from);
  a.body_length = bytes.size() - from;
  return a;
}

}  // namespace

struct fake_hub::state {
  asio::io_context io;
  std::unique_ptr<asio::ssl::context> tls;  // the Hub listener's, when it speaks https
  tcp::acceptor hub_acceptor{io, tcp::endpoint{asio::ip::make_address("127.0.0.1"), 0}};
  tcp::acceptor cdn_acceptor{io, tcp::endpoint{asio::ip::make_address("127.0.0.1"), 0}};
  std::thread thread;

  mutable std::mutex mutex;
  std::map<std::string, fake_repo> repos;
  std::map<std::string, std::string> lfs_blobs;  // sha256 -> bytes
  std::map<std::string, bool> corrupted;
  std::map<std::string, std::pair<std::size_t, int>> cuts;  // sha256 -> (bytes, times left)
  std::vector<fake_hub_request> log;

  std::string hub_origin() const {
    return fmt::format("{}://127.0.0.1:{}", tls ? "https" : "http", hub_acceptor.local_endpoint().port());
  }
  std::string cdn_origin() const { return fmt::format("http://127.0.0.1:{}", cdn_acceptor.local_endpoint().port()); }

  // Gated repos: the Hub answers 401 without a token and 403 with one that has no access.
  std::optional<answer> gate_check(const fake_repo& repo, const std::string& authorization) const {
    if (repo.token.empty() || authorization == "Bearer " + repo.token)
      return std::nullopt;
    if (authorization.empty())
      return error_answer(401, "Unauthorized", "GatedRepo", "Access to this model is restricted: log in");
    return error_answer(403, "Forbidden", "GatedRepo", "Access to this model is restricted: ask for access");
  }

  answer handle_hub(const std::string& method, const std::string& target, const std::string& authorization,
                    const std::string& range) {
    std::lock_guard lock{mutex};
    const bool head = method == "HEAD";
    const std::string path = target.substr(0, target.find('?'));
    if (path.starts_with("/api/models/")) {
      const std::string rest = path.substr(12);
      const auto at = rest.find("/revision/");
      const std::string repo_id = rest.substr(0, at);
      auto repo = repos.find(repo_id);
      if (repo == repos.end())
        return error_answer(401, "Unauthorized", "RepoNotFound", "Repository not found");
      if (auto refused = gate_check(repo->second, authorization))
        return *refused;
      const std::string revision = at == std::string::npos ? "main" : percent_decode(rest.substr(at + 10));
      const std::string sha = repo->second.refs.contains(revision) ? repo->second.refs.at(revision) : revision;
      auto commit = repo->second.commits.find(sha);
      if (commit == repo->second.commits.end())
        return error_answer(404, "Not Found", "RevisionNotFound", "Invalid rev id: " + revision);
      std::string siblings;
      for (const auto& [name, file] : commit->second)
        siblings += fmt::format("{}{{\"rfilename\":\"{}\"}}", siblings.empty() ? "" : ",", name);
      answer a;
      a.body =
          fmt::format("{{\"id\":\"{}\",\"sha\":\"{}\",\"private\":false,\"siblings\":[{}]}}", repo_id, sha, siblings);
      a.headers.emplace_back("Content-Type", "application/json");
      return a;
    }
    const auto resolve_at = path.find("/resolve/");
    if (resolve_at == std::string::npos)
      return error_answer(404, "Not Found", "", "no such route");
    const std::string repo_id = path.substr(1, resolve_at - 1);
    const std::string rest = path.substr(resolve_at + 9);
    const auto slash = rest.find('/');
    const std::string revision = percent_decode(rest.substr(0, slash));
    const std::string file = slash == std::string::npos ? "" : percent_decode(rest.substr(slash + 1));
    auto repo = repos.find(repo_id);
    if (repo == repos.end())
      return error_answer(401, "Unauthorized", "RepoNotFound", "Repository not found");
    if (auto refused = gate_check(repo->second, authorization))
      return *refused;
    const std::string sha = repo->second.refs.contains(revision) ? repo->second.refs.at(revision) : revision;
    auto commit = repo->second.commits.find(sha);
    if (commit == repo->second.commits.end())
      return error_answer(404, "Not Found", "RevisionNotFound", "Invalid rev id: " + revision);
    auto f = commit->second.find(file);
    if (f == commit->second.end())
      return error_answer(404, "Not Found", "EntryNotFound", "Entry not found");
    if (f->second.lfs) {
      const std::string digest = sha256_hex(f->second.bytes);
      answer a{302, "Found", {}, {}, std::size_t{0}, {}};
      a.headers.emplace_back("Location", fmt::format("{}/cdn/{}?signature=x", cdn_origin(), digest));
      a.headers.emplace_back("X-Linked-Etag", "\"" + digest + "\"");
      a.headers.emplace_back("X-Linked-Size", std::to_string(f->second.bytes.size()));
      a.headers.emplace_back("ETag", "\"" + digest + "\"");
      a.headers.emplace_back("X-Repo-Commit", sha);
      return a;
    }
    answer a = bytes_answer(f->second.bytes, range, head);
    a.headers.emplace_back("ETag", "\"" + git_blob_sha1(f->second.bytes) + "\"");
    a.headers.emplace_back("X-Repo-Commit", sha);
    return a;
  }

  answer handle_cdn(const std::string& method, const std::string& target, const std::string& range) {
    std::lock_guard lock{mutex};
    std::string path = target.substr(0, target.find('?'));
    if (!path.starts_with("/cdn/"))
      return error_answer(404, "Not Found", "", "no such blob");
    const std::string digest = path.substr(5);
    auto blob = lfs_blobs.find(digest);
    if (blob == lfs_blobs.end())
      return error_answer(404, "Not Found", "", "no such blob");
    std::string bytes = blob->second;
    if (corrupted.contains(digest) && !bytes.empty())
      bytes[bytes.size() / 2] = static_cast<char>(bytes[bytes.size() / 2] ^ 0x5a);
    answer a = bytes_answer(bytes, range, method == "HEAD");
    if (auto cut = cuts.find(digest); cut != cuts.end() && cut->second.second > 0 && a.status < 300) {
      --cut->second.second;
      a.cut = cut->second.first;
    }
    return a;
  }

  asio::awaitable<void> session(tcp::socket socket, bool is_cdn) {
    if (is_cdn || !tls) {
      co_await serve_one(socket, is_cdn);
      co_return;
    }
    asio::ssl::stream<tcp::socket> stream{std::move(socket), *tls};
    beast::error_code ec;
    co_await stream.async_handshake(asio::ssl::stream_base::server, asio::redirect_error(use_awaitable, ec));
    if (!ec)
      co_await serve_one(stream, false);
  }

  // One request and its answer over `stream` (a socket, or TLS over one), then the connection closes.
  template <class Stream>
  asio::awaitable<void> serve_one(Stream& stream, bool is_cdn) {
    beast::flat_buffer buffer;
    http::request<http::empty_body> req;
    beast::error_code ec;
    co_await http::async_read(stream, buffer, req, asio::redirect_error(use_awaitable, ec));
    if (ec)
      co_return;
    const std::string method{req.method_string()};
    const std::string target{req.target()};
    const auto field = [&req](http::field f) {
      auto it = req.find(f);
      return it == req.end() ? std::string{} : std::string{it->value()};
    };
    const std::string authorization = field(http::field::authorization);
    const std::string range = field(http::field::range);
    {
      std::lock_guard lock{mutex};
      log.push_back({is_cdn ? "cdn" : "hub", method, target, authorization, range});
    }
    const answer a = is_cdn ? handle_cdn(method, target, range) : handle_hub(method, target, authorization, range);
    std::string out = fmt::format("HTTP/1.1 {} {}\r\n", a.status, a.reason);
    for (const auto& [name, value] : a.headers)
      out += fmt::format("{}: {}\r\n", name, value);
    out += fmt::format("Content-Length: {}\r\nConnection: close\r\n\r\n", a.body_length.value_or(a.body.size()));
    out += a.cut ? a.body.substr(0, std::min(*a.cut, a.body.size())) : a.body;
    co_await asio::async_write(stream, asio::buffer(out), asio::redirect_error(use_awaitable, ec));
    auto& socket = beast::get_lowest_layer(stream);
    socket.shutdown(tcp::socket::shutdown_both, ec);
    socket.close(ec);
  }

  asio::awaitable<void> accept_loop(tcp::acceptor& acceptor, bool is_cdn) {
    while (true) {
      beast::error_code ec;
      tcp::socket socket = co_await acceptor.async_accept(asio::redirect_error(use_awaitable, ec));
      if (ec)
        co_return;
      asio::co_spawn(io, session(std::move(socket), is_cdn), asio::detached);
    }
  }
};

fake_hub::fake_hub(std::optional<fake_hub_tls> tls) : state_(std::make_shared<state>()) {
  if (tls) {
    state_->tls = std::make_unique<asio::ssl::context>(asio::ssl::context::tls_server);
    state_->tls->use_certificate_chain_file(tls->certificate_file);
    state_->tls->use_private_key_file(tls->key_file, asio::ssl::context::pem);
  }
  asio::co_spawn(state_->io, state_->accept_loop(state_->hub_acceptor, false), asio::detached);
  asio::co_spawn(state_->io, state_->accept_loop(state_->cdn_acceptor, true), asio::detached);
  state_->thread = std::thread{[s = state_] { s->io.run(); }};
}

fake_hub::~fake_hub() {
  state_->io.stop();
  state_->thread.join();
}

std::string fake_hub::endpoint() const { return state_->hub_origin(); }

std::string fake_hub::cdn() const { return state_->cdn_origin(); }

void fake_hub::add_commit(const std::string& repo, const std::string& sha, std::map<std::string, fake_hub_file> files,
                          const std::vector<std::string>& refs) {
  std::lock_guard lock{state_->mutex};
  for (const auto& [name, file] : files)
    if (file.lfs)
      state_->lfs_blobs[sha256_hex(file.bytes)] = file.bytes;
  fake_repo& r = state_->repos[repo];
  r.commits[sha] = std::move(files);
  for (const std::string& ref : refs)
    r.refs[ref] = sha;
}

void fake_hub::gate(const std::string& repo, const std::string& token) {
  std::lock_guard lock{state_->mutex};
  state_->repos[repo].token = token;
}

void fake_hub::corrupt(const std::string& sha256) {
  std::lock_guard lock{state_->mutex};
  state_->corrupted[sha256] = true;
}

void fake_hub::cut_after(const std::string& sha256, std::size_t bytes, int times) {
  std::lock_guard lock{state_->mutex};
  state_->cuts[sha256] = {bytes, times};
}

std::vector<fake_hub_request> fake_hub::requests() const {
  std::lock_guard lock{state_->mutex};
  return state_->log;
}

void fake_hub::clear_requests() {
  std::lock_guard lock{state_->mutex};
  state_->log.clear();
}

std::string read_bytes(const std::filesystem::path& path) {
  std::ifstream in{path, std::ios::binary};
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

std::map<std::string, fake_hub_file> files_of_directory(const std::filesystem::path& dir) {
  std::map<std::string, fake_hub_file> files;
  for (const auto& entry : std::filesystem::directory_iterator{dir}) {
    if (!entry.is_regular_file())
      continue;
    const std::string name = entry.path().filename().string();
    files[name] = {read_bytes(entry.path()), entry.path().extension() == ".safetensors"};
  }
  return files;
}

std::string sha256_hex(const std::string& bytes) { return util::to_hex(util::sha256(std::string_view{bytes})); }

}  // namespace actorllm::test
