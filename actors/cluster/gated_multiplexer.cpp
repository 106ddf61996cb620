// The gated CAF backend: see gated_multiplexer.hpp.
#include "actors/cluster/gated_multiplexer.hpp"

#include "actorllm/proto/error.hpp"
#include "actors/cluster/control_gate.hpp"
#include "actors/cluster/tls_relay.hpp"
#include "util/log.hpp"

#include <caf/io/middleman.hpp>
#include <caf/io/network/default_multiplexer.hpp>
#include <caf/io/network/doorman_impl.hpp>
#include <caf/io/network/native_socket.hpp>
#include <caf/io/network/operation.hpp>
#include <caf/io/network/scribe_impl.hpp>
#include <caf/sec.hpp>
#include <caf/settings.hpp>

#include <arpa/inet.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <netinet/in.h>
#include <openssl/ssl.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace actorllm::actors {
namespace {

namespace net = caf::io::network;
using net::native_socket;

constexpr std::string_view where = "control";
constexpr const char* key_setting = "actorllm-control-key";
constexpr const char* max_message_setting = "actorllm-control-max-message-bytes";
constexpr const char* tls_certificate_setting = "actorllm-control-tls-cert";
constexpr const char* tls_key_setting = "actorllm-control-tls-key";
constexpr const char* tls_ca_setting = "actorllm-control-tls-ca";

std::atomic<uint64_t> refusals{0};
std::atomic<uint64_t> screened_out{0};
std::atomic<uint64_t> backoffs{0};

/// "address:port" of the peer of `fd`, for logs.
std::string peer_of(int fd) {
  sockaddr_storage addr{};
  socklen_t len = sizeof addr;
  if (::getpeername(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0)
    return "an unknown peer";
  char text[INET6_ADDRSTRLEN] = {};
  if (addr.ss_family == AF_INET) {
    const auto* a = reinterpret_cast<const sockaddr_in*>(&addr);
    ::inet_ntop(AF_INET, &a->sin_addr, text, sizeof text);
    return fmt::format("{}:{}", text, ntohs(a->sin_port));
  }
  if (addr.ss_family == AF_INET6) {
    const auto* a = reinterpret_cast<const sockaddr_in6*>(&addr);
    ::inet_ntop(AF_INET6, &a->sin6_addr, text, sizeof text);
    return fmt::format("[{}]:{}", text, ntohs(a->sin6_port));
  }
  return "a peer of another address family";
}

/// Refusals are logged, but a flood of them must not flood the log: the first ten, then one in a thousand.
void log_refusal(std::atomic<uint64_t>& counter, const std::string& peer, const std::string& reason) {
  const uint64_t n = ++counter;
  if (n <= 10 || n % 1000 == 0)
    log::warning(where, "refused a control-plane connection from {}: {} ({} refused so far{})", peer, reason, n,
                 n == 10 ? "; from now on one in a thousand is logged" : "");
}

/// A scribe that passes what the peer sends through a basp_screen before CAF's broker parses it; a refused stream
/// ends the connection as a read error would.
class screened_scribe final : public net::scribe_impl {
 public:
  screened_scribe(net::default_multiplexer& mpx, native_socket fd, basp_role role, std::size_t max_message,
                  std::string peer)
      : net::scribe_impl(mpx, fd), screen_(role, max_message), peer_(std::move(peer)) {}

  bool consume(caf::execution_unit* ctx, const void* buf, size_t num_bytes) override {
    if (detached())
      return false;
    const std::string refused = screen_.feed(ctx, static_cast<const char*>(buf), num_bytes);
    if (refused.empty())
      return net::scribe_impl::consume(ctx, buf, num_bytes);
    log_refusal(screened_out, peer_, fmt::format("after the handshake it sent {}; the connection is closed", refused));
    io_failure(ctx, net::operation::read);
    return false;
  }

 private:
  basp_screen screen_;
  std::string peer_;
};

class gated_doorman;

/// The acceptor's side: one thread that accepts on every listening socket of the process and runs every pending
/// handshake (TLS, then the gate) with poll(), so a slow or silent peer holds one socket for at most gate_timeout
/// and never a thread of CAF.
class gate_keeper {
 public:
  gate_keeper(net::default_multiplexer& mpx, std::string key, const tls_context* tls, tls_relay* relay,
              std::size_t max_message);
  ~gate_keeper();

  gate_keeper(const gate_keeper&) = delete;
  gate_keeper& operator=(const gate_keeper&) = delete;

  /// Accepts on `door`'s socket from now on (until forget).
  void watch(caf::intrusive_ptr<gated_doorman> door);
  /// Stops accepting on `door`'s socket.
  void forget(gated_doorman* door);

  std::size_t max_message() const { return max_message_; }

 private:
  struct pending {
    int fd = -1;
    caf::intrusive_ptr<gated_doorman> door;
    std::unique_ptr<gate::acceptor_handshake> handshake;
    SSL* ssl = nullptr;  ///< with TLS: the session (its handshake first)
    bool tls_done = false;
    short events = POLLIN;  ///< what to wait for next
    std::string out;        ///< the gate's reply still to send
    std::chrono::steady_clock::time_point deadline;
    std::string peer;
  };

  void wake() {
    const char c = 1;
    [[maybe_unused]] ssize_t ignored = ::write(wake_[1], &c, 1);
  }

  static void close_pending(pending& p) {
    if (p.ssl != nullptr)
      SSL_free(p.ssl);
    p.ssl = nullptr;
    if (p.fd >= 0)
      ::close(p.fd);
    p.fd = -1;
  }

  void refuse(pending& p, const std::string& reason) {
    log_refusal(refusals, p.peer, reason);
    close_pending(p);
  }

  /// Sends what is left of the reply. done, want_read/want_write (wait), or failed.
  tls_step flush(pending& p);
  /// Reads up to `n` bytes of the peer's handshake into `got`.
  tls_step receive(pending& p, std::string& got, std::size_t n);

  void accept_from(gated_doorman& door);
  void step(pending& p);
  void finish(pending& p);
  void run();

  net::default_multiplexer& mpx_;
  std::string key_;
  const tls_context* tls_;
  tls_relay* relay_;
  std::size_t max_message_;
  int wake_[2] = {-1, -1};
  std::mutex mutex_;
  std::vector<caf::intrusive_ptr<gated_doorman>> doors_;  ///< guarded by mutex_
  std::vector<pending> active_;                           ///< the gate thread's own
  std::chrono::steady_clock::time_point accept_paused_until_{};
  bool stopping_ = false;
  std::thread thread_;
};

/// A doorman whose listening socket the gate thread accepts on; CAF's broker hears of a connection only once its
/// peer passed the gate. Its acceptor never joins CAF's event loop (whose accept retries at once, forever, when
/// the process is out of descriptors).
class gated_doorman final : public net::doorman_impl {
 public:
  gated_doorman(net::default_multiplexer& mpx, native_socket fd, gate_keeper& keeper)
      : net::doorman_impl(mpx, fd), keeper_(keeper) {}

  void launch() override { keeper_.watch(caf::intrusive_ptr<gated_doorman>{this}); }
  void add_to_loop() override { keeper_.watch(caf::intrusive_ptr<gated_doorman>{this}); }
  void remove_from_loop() override { keeper_.forget(this); }

  bool new_connection() override { return false; }  // never called: the acceptor is not in CAF's loop

  native_socket listening_fd() const { return acceptor_.fd(); }

  /// Runs in the multiplexer's thread: hands the authenticated `fd` to the broker as CAF's own doorman would.
  void adopt(native_socket fd, std::string peer) {
    if (detached()) {
      net::close_socket(fd);
      return;
    }
    auto& mpx = acceptor_.backend();
    caf::io::scribe_ptr scribe =
        caf::make_counted<screened_scribe>(mpx, fd, basp_role::acceptor, keeper_.max_message(), std::move(peer));
    const auto hdl = scribe->hdl();
    parent()->add_scribe(std::move(scribe));
    doorman::new_connection(&mpx, hdl);
  }

 private:
  gate_keeper& keeper_;
};

gate_keeper::gate_keeper(net::default_multiplexer& mpx, std::string key, const tls_context* tls, tls_relay* relay,
                         std::size_t max_message)
    : mpx_(mpx), key_(std::move(key)), tls_(tls), relay_(relay), max_message_(max_message) {
  if (::pipe2(wake_, O_CLOEXEC | O_NONBLOCK) != 0)
    throw std::runtime_error(fmt::format("control gate: cannot create a pipe: {}", std::strerror(errno)));
  thread_ = std::thread{[this] { run(); }};
}

gate_keeper::~gate_keeper() {
  {
    std::lock_guard lock{mutex_};
    stopping_ = true;
  }
  wake();
  thread_.join();
  for (auto& p : active_)
    close_pending(p);
  doors_.clear();
  ::close(wake_[0]);
  ::close(wake_[1]);
}

void gate_keeper::watch(caf::intrusive_ptr<gated_doorman> door) {
  {
    std::lock_guard lock{mutex_};
    if (std::find(doors_.begin(), doors_.end(), door) != doors_.end())
      return;
    doors_.push_back(std::move(door));
  }
  wake();
}

void gate_keeper::forget(gated_doorman* door) {
  {
    std::lock_guard lock{mutex_};
    std::erase_if(doors_, [door](const caf::intrusive_ptr<gated_doorman>& d) { return d.get() == door; });
  }
  wake();
}

void gate_keeper::accept_from(gated_doorman& door) {
  for (int accepted = 0; accepted < 64; ++accepted) {  // a bounded batch: the handshakes in flight get their turn
    const int fd = ::accept4(door.listening_fd(), nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
        // The connection stays in the backlog; poll() would report it at once, forever: pause instead.
        const uint64_t n = ++backoffs;
        if (n <= 10 || n % 1000 == 0)
          log::warning(where, "cannot accept a control-plane connection: {}; not accepting for {} ms ({} times so far)",
                       std::strerror(errno), accept_backoff.count(), n);
        accept_paused_until_ = std::chrono::steady_clock::now() + accept_backoff;
      }
      return;  // EAGAIN, a connection aborted before we took it, or a listener being shut down
    }
    pending p;
    p.fd = fd;
    p.door.reset(&door);
    p.handshake = std::make_unique<gate::acceptor_handshake>(key_);
    p.deadline = std::chrono::steady_clock::now() + gate_timeout;
    p.peer = peer_of(fd);
    if (tls_ != nullptr) {
      p.ssl = tls_->new_session(fd, true);
      if (p.ssl == nullptr) {
        refuse(p, "OpenSSL cannot make a session for it");
        continue;
      }
    }
    active_.push_back(std::move(p));
  }
}

tls_step gate_keeper::flush(pending& p) {
  std::string reason;
  if (p.ssl != nullptr)
    return tls_write(p.ssl, p.out, reason);
  while (!p.out.empty()) {
    const ssize_t n = ::send(p.fd, p.out.data(), p.out.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
      return tls_step::want_write;
    if (n <= 0)
      return tls_step::failed;
    p.out.erase(0, static_cast<std::size_t>(n));
  }
  return tls_step::done;
}

tls_step gate_keeper::receive(pending& p, std::string& got, std::size_t n) {
  std::string reason;
  if (p.ssl != nullptr)
    return tls_read(p.ssl, got, n, reason);
  char buf[gate::max_message_bytes];
  const ssize_t r = ::recv(p.fd, buf, std::min(n, sizeof buf), MSG_DONTWAIT);
  if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
    return tls_step::want_read;
  if (r <= 0)
    return tls_step::failed;
  got.append(buf, static_cast<std::size_t>(r));
  return tls_step::done;
}

void gate_keeper::step(pending& p) {
  if (p.ssl != nullptr && !p.tls_done) {
    std::string reason;
    switch (step_tls_handshake(p.ssl, true, reason)) {
      case tls_step::done:
        p.tls_done = true;
        break;
      case tls_step::want_read:
        p.events = POLLIN;
        return;
      case tls_step::want_write:
        p.events = POLLOUT;
        return;
      case tls_step::failed:
        refuse(p, reason);
        return;
    }
  }
  // The gate's exchange, as far as the bytes at hand allow (with TLS some may already sit decrypted in OpenSSL,
  // where poll() cannot see them: read until it says there is nothing more).
  for (;;) {
    if (!p.out.empty()) {
      const tls_step sent = flush(p);
      if (sent == tls_step::failed) {
        refuse(p, "the connection broke during the handshake");
        return;
      }
      if (sent != tls_step::done) {
        p.events = sent == tls_step::want_read ? POLLIN : POLLOUT;
        return;
      }
    }
    if (p.handshake->state() == gate::outcome::refused) {
      refuse(p, p.handshake->reason());
      return;
    }
    if (p.handshake->state() == gate::outcome::accepted) {
      finish(p);
      return;
    }
    std::string got;
    const tls_step read = receive(p, got, p.handshake->wanted());
    if (!got.empty()) {
      p.out = p.handshake->feed(got);
      continue;
    }
    if (read == tls_step::failed) {
      refuse(p, p.handshake->replied() ? "it closed the connection after our challenge, without a proof"
                                       : "it closed the connection during the handshake");
      return;
    }
    p.events = read == tls_step::want_write ? POLLOUT : POLLIN;
    return;
  }
}

void gate_keeper::finish(pending& p) {
  native_socket fd = p.fd;
  p.fd = -1;
  if (p.ssl != nullptr) {
    fd = relay_->carry(p.ssl, fd);  // CAF gets the plaintext end; the relay owns the session and the socket now
    p.ssl = nullptr;
    if (fd < 0)
      return;
  }
  mpx_.post([door = std::move(p.door), fd, peer = std::move(p.peer)]() mutable { door->adopt(fd, std::move(peer)); });
}

void gate_keeper::run() {
  std::vector<caf::intrusive_ptr<gated_doorman>> doors;
  std::vector<pollfd> polled;
  for (;;) {
    {
      std::lock_guard lock{mutex_};
      if (stopping_)
        break;
      doors = doors_;
    }
    while (active_.size() > max_pending_gates) {
      refuse(active_.front(), fmt::format("more than {} handshakes were pending (the oldest goes)", max_pending_gates));
      active_.erase(active_.begin());
    }
    const auto now = std::chrono::steady_clock::now();
    const bool accepting = now >= accept_paused_until_;
    auto next_deadline = accepting ? std::chrono::steady_clock::time_point::max() : accept_paused_until_;
    polled.assign(1, pollfd{wake_[0], POLLIN, 0});
    for (const auto& d : doors)
      polled.push_back(pollfd{accepting ? d->listening_fd() : -1, POLLIN, 0});
    for (const auto& p : active_) {
      polled.push_back(pollfd{p.fd, p.events, 0});
      next_deadline = std::min(next_deadline, p.deadline);
    }
    int timeout_ms = -1;
    if (next_deadline != std::chrono::steady_clock::time_point::max())
      timeout_ms = static_cast<int>(std::clamp<int64_t>(
          std::chrono::duration_cast<std::chrono::milliseconds>(next_deadline - now).count() + 1, 0, 60'000));
    const int n = ::poll(polled.data(), polled.size(), timeout_ms);
    if (n < 0 && errno != EINTR) {
      log::error(where, "the control gate's poll failed: {}", std::strerror(errno));
      std::this_thread::sleep_for(std::chrono::milliseconds{10});
      continue;
    }
    if (n > 0 && (polled[0].revents & POLLIN) != 0) {
      char drain[64];
      while (::read(wake_[0], drain, sizeof drain) > 0) {
      }
    }
    const auto after = std::chrono::steady_clock::now();
    const std::size_t first_pending = 1 + doors.size();
    const std::size_t stepped = active_.size();  // connections accepted below are stepped on the next turn
    for (std::size_t i = 0; i < stepped; ++i) {
      pending& p = active_[i];
      const short revents = n > 0 ? polled[first_pending + i].revents : 0;
      if (revents != 0)
        step(p);
      if (p.fd >= 0 && after >= p.deadline)
        refuse(p, fmt::format("it did not complete the handshake within {} ms", gate_timeout.count()));
    }
    if (n > 0)
      for (std::size_t i = 0; i < doors.size(); ++i)
        if ((polled[1 + i].revents & POLLIN) != 0)
          accept_from(*doors[i]);
    std::erase_if(active_, [](const pending& p) { return p.fd < 0; });
    doors.clear();  // the last reference to a forgotten door may be this one
  }
}

/// CAF's default backend with the gate (and TLS, when configured) on both sides of every connection and the BASP
/// screen on every connection's input.
class gated_multiplexer final : public net::default_multiplexer {
 public:
  explicit gated_multiplexer(caf::actor_system* sys)
      : net::default_multiplexer(sys),
        key_(caf::get_or(sys->config(), key_setting, "")),
        max_message_(static_cast<std::size_t>(
            caf::get_or(sys->config(), max_message_setting, int64_t{default_max_control_message_bytes}))) {
    const std::string certificate = caf::get_or(sys->config(), tls_certificate_setting, "");
    if (!certificate.empty())  // loaded once, here (control_tls::check() vetted the files before the system)
      tls_ = std::make_unique<tls_context>(certificate, caf::get_or(sys->config(), tls_key_setting, ""),
                                           caf::get_or(sys->config(), tls_ca_setting, ""));
  }

  ~gated_multiplexer() override {
    keeper_.reset();  // before the base: its thread posts to this multiplexer
    relay_.reset();
  }

  caf::expected<caf::io::scribe_ptr> new_tcp_scribe(const std::string& host, uint16_t port) override {
    auto fd = net::new_tcp_connection(host, port);
    if (!fd)
      return std::move(fd.error());
    const std::string peer = fmt::format("{}:{}", host, port);
    std::optional<gate::gate_failure> failed;
    SSL* ssl = nullptr;
    if (tls_)
      failed = connect_through_tls_gate(*fd, *tls_, key_, gate_timeout, ssl);
    else
      failed = gate::connect_through_gate(*fd, key_, gate_timeout);
    if (failed) {
      net::close_socket(*fd);
      auto message = fmt::format("control handshake with {}: {}", peer, failed->message);
      // A peer that proved another key is a final answer (an actorllm error); one that did not speak the gate may
      // speak TLS where we do not (or the reverse), which describe_connect_error explains for CAF's handshake error.
      if (failed->no_gate)
        return caf::make_error(caf::sec::disconnect_during_handshake, std::move(message));
      return proto::make_error(errc::invalid_config, std::move(message));
    }
    native_socket local = *fd;
    if (ssl != nullptr) {
      local = relay().carry(ssl, *fd);
      if (local < 0)
        return caf::make_error(caf::sec::cannot_connect_to_node, "cannot relay the TLS connection to " + peer);
    }
    return caf::io::scribe_ptr{
        caf::make_counted<screened_scribe>(*this, local, basp_role::connector, max_message_, peer)};
  }

  caf::io::scribe_ptr new_scribe(native_socket fd) override {
    // Not reached by actorllm (its connections come through new_tcp_scribe and the doorman); screened all the same,
    // the peer's handshake accepted either way round.
    return caf::make_counted<screened_scribe>(*this, fd, basp_role::acceptor, max_message_, peer_of(fd));
  }

  caf::io::doorman_ptr new_doorman(native_socket fd) override {
    return caf::make_counted<gated_doorman>(*this, fd, keeper());
  }

  caf::expected<caf::io::doorman_ptr> new_tcp_doorman(uint16_t port, const char* in, bool reuse_addr) override {
    auto fd = net::new_tcp_acceptor_impl(port, in, reuse_addr);
    if (!fd)
      return std::move(fd.error());
    return new_doorman(*fd);
  }

 private:
  tls_relay& relay() {
    std::lock_guard lock{relay_mutex_};
    if (!relay_)
      relay_ = std::make_unique<tls_relay>();
    return *relay_;
  }

  gate_keeper& keeper() {
    tls_relay* relay_ptr = tls_ ? &relay() : nullptr;
    std::lock_guard lock{keeper_mutex_};
    if (!keeper_)
      keeper_ = std::make_unique<gate_keeper>(*this, key_, tls_.get(), relay_ptr, max_message_);
    return *keeper_;
  }

  std::string key_;
  std::size_t max_message_;
  std::unique_ptr<tls_context> tls_;
  std::mutex relay_mutex_;
  std::unique_ptr<tls_relay> relay_;
  std::mutex keeper_mutex_;
  std::unique_ptr<gate_keeper> keeper_;
};

}  // namespace

void load_gated_middleman(caf::actor_system_config& cfg, const gate_settings& settings) {
  caf::put(cfg.content, key_setting, settings.key);
  caf::put(cfg.content, max_message_setting, static_cast<int64_t>(settings.max_message_bytes));
  caf::put(cfg.content, tls_certificate_setting, settings.tls_certificate);
  caf::put(cfg.content, tls_key_setting, settings.tls_key);
  caf::put(cfg.content, tls_ca_setting, settings.tls_ca_file);
  cfg.load<caf::io::middleman, gated_multiplexer>();
}

std::string control_key_of(const caf::actor_system& sys) { return caf::get_or(sys.config(), key_setting, ""); }

std::size_t control_message_limit(const caf::actor_system& sys) {
  return static_cast<std::size_t>(
      caf::get_or(sys.config(), max_message_setting, int64_t{default_max_control_message_bytes}));
}

bool refused_at_gate(const caf::error& err) {
  return err.category() == proto::error_category && proto::code_of(err) == errc::invalid_config;
}

uint64_t gate_refusals() { return refusals.load(); }

uint64_t screen_refusals() { return screened_out.load(); }

uint64_t accept_backoffs() { return backoffs.load(); }

}  // namespace actorllm::actors
