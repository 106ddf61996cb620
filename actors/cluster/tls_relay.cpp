// TLS for the control plane: see tls_relay.hpp.
#include "actors/cluster/tls_relay.hpp"

#include "actorllm/error.hpp"
#include "util/log.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <stdexcept>

namespace actorllm::actors {
namespace {

constexpr std::string_view where = "control";

/// Bytes a relayed direction buffers before it stops reading its source (backpressure, and the memory bound:
/// two of these per connection).
constexpr std::size_t relay_buffer_bytes = 256 * 1024;

/// OpenSSL's most recent error as text (and its queue emptied).
std::string openssl_reason() {
  unsigned long code = 0;
  unsigned long last = 0;
  while ((code = ERR_get_error()) != 0)
    last = code;
  if (last == 0)
    return errno != 0 ? std::string{std::strerror(errno)} : std::string{"the connection closed"};
  char text[256] = {};
  ERR_error_string_n(last, text, sizeof text);
  return text;
}

/// How a failure of TLS itself (an alert, a certificate refused) starts its reason, unlike a peer that closed.
constexpr std::string_view tls_alert_prefix = "TLS: ";

/// An encrypted key would make OpenSSL prompt on the terminal: refuse it instead.
int no_passphrase(char*, int, int, void*) { return 0; }

/// Classifies the result `r` of an SSL call.
tls_step classify(ssl_st* ssl, int r, std::string& reason) {
  switch (SSL_get_error(ssl, r)) {
    case SSL_ERROR_WANT_READ:
      return tls_step::want_read;
    case SSL_ERROR_WANT_WRITE:
      return tls_step::want_write;
    case SSL_ERROR_ZERO_RETURN:
      reason = "the peer closed the connection";
      return tls_step::failed;
    case SSL_ERROR_SSL:
      reason = std::string{tls_alert_prefix} + openssl_reason();
      return tls_step::failed;
    default:
      reason = openssl_reason();
      return tls_step::failed;
  }
}

void set_nonblocking(int fd) { ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL, 0) | O_NONBLOCK); }

}  // namespace

tls_context::tls_context(const std::string& certificate, const std::string& key, const std::string& ca_file) {
  auto fail = [&](const std::string& what) {
    const std::string reason = openssl_reason();
    if (ctx_ != nullptr)
      SSL_CTX_free(ctx_);
    throw actorllm::error{errc::invalid_config, fmt::format("control-plane TLS: {}: {}", what, reason)};
  };
  ctx_ = SSL_CTX_new(TLS_method());
  if (ctx_ == nullptr)
    fail("OpenSSL cannot create a context");
  SSL_CTX_set_min_proto_version(ctx_, TLS1_2_VERSION);
  SSL_CTX_set_default_passwd_cb(ctx_, &no_passphrase);
  SSL_CTX_set_mode(ctx_, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
  if (SSL_CTX_use_certificate_chain_file(ctx_, certificate.c_str()) != 1)
    fail(fmt::format("cannot load the certificate '{}'", certificate));
  if (SSL_CTX_use_PrivateKey_file(ctx_, key.c_str(), SSL_FILETYPE_PEM) != 1 || SSL_CTX_check_private_key(ctx_) != 1)
    fail(fmt::format("cannot load the private key '{}'", key));
  if (SSL_CTX_load_verify_locations(ctx_, ca_file.c_str(), nullptr) != 1)
    fail(fmt::format("cannot load the CA certificate '{}'", ca_file));
  SSL_CTX_set_verify(ctx_, SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT, nullptr);
}

tls_context::~tls_context() { SSL_CTX_free(ctx_); }

ssl_st* tls_context::new_session(int fd, bool accepting) const {
  SSL* ssl = SSL_new(ctx_);
  if (ssl == nullptr)
    return nullptr;
  if (SSL_set_fd(ssl, fd) != 1) {
    SSL_free(ssl);
    return nullptr;
  }
  if (accepting)
    SSL_set_accept_state(ssl);
  else
    SSL_set_connect_state(ssl);
  return ssl;
}

tls_step step_tls_handshake(ssl_st* ssl, bool accepting, std::string& reason) {
  ERR_clear_error();
  errno = 0;
  const int r = accepting ? SSL_accept(ssl) : SSL_connect(ssl);
  if (r == 1)
    return tls_step::done;
  const tls_step step = classify(ssl, r, reason);
  if (step == tls_step::failed)
    reason = "TLS handshake failed: " + reason;
  return step;
}

tls_step tls_read(ssl_st* ssl, std::string& out, std::size_t n, std::string& reason) {
  char buf[16 * 1024];
  while (n > 0) {
    ERR_clear_error();
    errno = 0;
    const int r = SSL_read(ssl, buf, static_cast<int>(std::min(n, sizeof buf)));
    if (r <= 0)
      return classify(ssl, r, reason);
    out.append(buf, static_cast<std::size_t>(r));
    n -= static_cast<std::size_t>(r);
  }
  return tls_step::done;
}

tls_step tls_write(ssl_st* ssl, std::string& data, std::string& reason) {
  while (!data.empty()) {
    ERR_clear_error();
    errno = 0;
    const int r = SSL_write(ssl, data.data(), static_cast<int>(std::min<std::size_t>(data.size(), 1 << 20)));
    if (r <= 0)
      return classify(ssl, r, reason);
    data.erase(0, static_cast<std::size_t>(r));
  }
  return tls_step::done;
}

std::optional<gate::gate_failure> connect_through_tls_gate(int fd, const tls_context& tls, const std::string& key,
                                                           std::chrono::milliseconds timeout, ssl_st*& ssl) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  set_nonblocking(fd);
  ssl = tls.new_session(fd, false);
  if (ssl == nullptr)
    return gate::gate_failure{false, "OpenSSL cannot make a session: " + openssl_reason()};
  auto failed = [&](bool no_gate, std::string message) {
    SSL_free(ssl);
    ssl = nullptr;
    return gate::gate_failure{no_gate, std::move(message)};
  };
  // Waits for `step`'s direction until the deadline; false when it passed.
  auto wait = [&](tls_step step) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now()).count();
    if (left <= 0)
      return false;
    pollfd p{fd, static_cast<short>(step == tls_step::want_write ? POLLOUT : POLLIN), 0};
    return ::poll(&p, 1, static_cast<int>(left)) > 0;
  };
  std::string reason;
  for (;;) {
    const tls_step step = step_tls_handshake(ssl, false, reason);
    if (step == tls_step::done)
      break;
    if (step == tls_step::failed)
      return failed(true, reason + " (does the peer use TLS, with a certificate of the same CA?)");
    if (!wait(step))
      return failed(true, fmt::format("no TLS handshake within {} ms", timeout.count()));
  }
  gate::connector_handshake handshake{key};
  std::string out = handshake.hello();
  while (handshake.state() == gate::outcome::pending || !out.empty()) {
    if (!out.empty()) {
      const tls_step step = tls_write(ssl, out, reason);
      if (step == tls_step::failed)
        return failed(false, "the connection broke during the control handshake: " + reason);
      if (step != tls_step::done && !wait(step))
        return failed(false, fmt::format("no control handshake within {} ms", timeout.count()));
      continue;
    }
    std::string got;
    const tls_step step = tls_read(ssl, got, handshake.wanted(), reason);
    if (!got.empty())
      out = handshake.feed(got);
    if (handshake.state() == gate::outcome::refused)
      return failed(handshake.no_gate(), handshake.reason());
    if (!got.empty())
      continue;
    // TLS 1.3 lets the client finish before the server checked its certificate: a refusal of ours shows here.
    if (step == tls_step::failed && reason.rfind(tls_alert_prefix, 0) == 0)
      return failed(true, "the peer refused the TLS connection: " + reason);
    if (step == tls_step::failed)
      return failed(false,
                    "the peer closed the connection during the control handshake (a peer with another "
                    "cluster token does that): " +
                        reason);
    if (!wait(step))
      return failed(false, fmt::format("no control handshake within {} ms", timeout.count()));
  }
  return std::nullopt;
}

// -- the relay ------------------------------------------------------------------------------------------------------

struct tls_relay::link {
  SSL* ssl = nullptr;
  int net = -1;
  int local = -1;
  std::string to_local;  ///< plaintext from the peer, for CAF
  std::string to_net;    ///< plaintext from CAF, for the peer
  bool read_wants_write = false;
  bool write_wants_read = false;
  bool write_wants_write = false;
  bool net_closed = false;
  bool local_closed = false;
  bool dead = false;

  ~link() {
    if (ssl != nullptr) {
      if (!dead)
        SSL_shutdown(ssl);  // one close_notify, best effort
      SSL_free(ssl);
    }
    if (net >= 0)
      ::close(net);
    if (local >= 0)
      ::close(local);
  }

  /// Moves what can move now in both directions; false once the link is finished.
  bool pump() {
    std::string reason;
    read_wants_write = false;
    if (!net_closed && to_local.size() < relay_buffer_bytes) {
      const tls_step step = tls_read(ssl, to_local, relay_buffer_bytes - to_local.size(), reason);
      if (step == tls_step::failed)
        net_closed = true;
      read_wants_write = step == tls_step::want_write;
    }
    while (!to_local.empty()) {
      const ssize_t n = ::send(local, to_local.data(), to_local.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
      if (n < 0 && errno == EINTR)
        continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
        break;
      if (n <= 0) {
        dead = true;
        return false;
      }
      to_local.erase(0, static_cast<std::size_t>(n));
    }
    char buf[16 * 1024];
    while (!local_closed && to_net.size() < relay_buffer_bytes) {
      const ssize_t n = ::recv(local, buf, sizeof buf, MSG_DONTWAIT);
      if (n < 0 && errno == EINTR)
        continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
        break;
      if (n <= 0) {
        local_closed = true;
        break;
      }
      to_net.append(buf, static_cast<std::size_t>(n));
    }
    write_wants_read = write_wants_write = false;
    if (!to_net.empty() && !net_closed) {
      const tls_step step = tls_write(ssl, to_net, reason);
      if (step == tls_step::failed) {
        dead = true;
        return false;
      }
      write_wants_read = step == tls_step::want_read;
      write_wants_write = step == tls_step::want_write;
    }
    // The peer is gone: what it sent is with CAF (closing our end leaves it readable there), so finish.
    if (net_closed && to_local.empty()) {
      dead = true;
      return false;
    }
    // CAF closed its end: finish once what it wrote is out.
    if (local_closed && (to_net.empty() || net_closed))
      return false;
    return true;
  }

  short net_events() const {
    short e = 0;
    if ((!net_closed && to_local.size() < relay_buffer_bytes) || write_wants_read)
      e |= POLLIN;
    if (read_wants_write || write_wants_write)
      e |= POLLOUT;
    return e;
  }
  short local_events() const {
    short e = 0;
    if (!local_closed && to_net.size() < relay_buffer_bytes)
      e |= POLLIN;
    if (!to_local.empty())
      e |= POLLOUT;
    return e;
  }
};

tls_relay::tls_relay() {
  if (::pipe2(wake_, O_CLOEXEC | O_NONBLOCK) != 0)
    throw std::runtime_error(fmt::format("control TLS relay: cannot create a pipe: {}", std::strerror(errno)));
  thread_ = std::thread{[this] { run(); }};
}

tls_relay::~tls_relay() {
  {
    std::lock_guard lock{mutex_};
    stopping_ = true;
  }
  wake();
  thread_.join();
  incoming_.clear();
  ::close(wake_[0]);
  ::close(wake_[1]);
}

void tls_relay::wake() {
  const char c = 1;
  [[maybe_unused]] ssize_t ignored = ::write(wake_[1], &c, 1);
}

int tls_relay::carry(ssl_st* ssl, int net) {
  int pair[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0, pair) != 0) {
    log::warning(where, "cannot relay a TLS connection: socketpair: {}", std::strerror(errno));
    SSL_free(ssl);
    ::close(net);
    return -1;
  }
  auto l = std::make_unique<link>();
  l->ssl = ssl;
  l->net = net;
  l->local = pair[0];
  {
    std::lock_guard lock{mutex_};
    incoming_.push_back(std::move(l));
  }
  wake();
  return pair[1];
}

std::size_t tls_relay::carried() const {
  std::lock_guard lock{mutex_};
  return carried_;
}

void tls_relay::run() {
  std::vector<std::unique_ptr<link>> active;
  std::vector<pollfd> polled;
  for (;;) {
    {
      std::lock_guard lock{mutex_};
      if (stopping_)
        break;
      for (auto& l : incoming_) {
        l->pump();  // bytes that arrived with the handshake are already inside OpenSSL: poll() would not see them
        active.push_back(std::move(l));
      }
      incoming_.clear();
    }
    std::erase_if(active, [](const std::unique_ptr<link>& l) {
      return l->dead || (l->local_closed && (l->to_net.empty() || l->net_closed));
    });
    {
      std::lock_guard lock{mutex_};
      carried_ = active.size();
    }
    polled.assign(1, pollfd{wake_[0], POLLIN, 0});
    for (const auto& l : active) {  // a closed side is left out (-1): poll() would report its hang-up forever
      polled.push_back(pollfd{l->net_closed ? -1 : l->net, l->net_events(), 0});
      polled.push_back(pollfd{l->local_closed ? -1 : l->local, l->local_events(), 0});
    }
    const int n = ::poll(polled.data(), polled.size(), -1);
    if (n < 0 && errno != EINTR) {
      log::error(where, "the control TLS relay's poll failed: {}", std::strerror(errno));
      std::this_thread::sleep_for(std::chrono::milliseconds{10});
      continue;
    }
    if (n <= 0)
      continue;
    if ((polled[0].revents & POLLIN) != 0) {
      char drain[64];
      while (::read(wake_[0], drain, sizeof drain) > 0) {
      }
    }
    constexpr short broken = POLLERR | POLLHUP | POLLNVAL;
    for (std::size_t i = 0; i < active.size(); ++i) {
      const short net = polled[1 + 2 * i].revents;
      const short local = polled[2 + 2 * i].revents;
      if (net == 0 && local == 0)
        continue;
      if ((net & broken) != 0 && (net & POLLIN) == 0)
        active[i]->net_closed = true;
      if ((local & broken) != 0 && (local & POLLIN) == 0)
        active[i]->local_closed = true;
      active[i]->pump();
    }
  }
  active.clear();
}

}  // namespace actorllm::actors
