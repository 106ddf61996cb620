// The gated CAF backend: see gated_multiplexer.hpp.
#include "actors/gated_multiplexer.hpp"

#include "actorllm/proto/error.hpp"
#include "actors/control_gate.hpp"
#include "util/log.hpp"

#include <caf/io/middleman.hpp>
#include <caf/io/network/default_multiplexer.hpp>
#include <caf/io/network/doorman_impl.hpp>
#include <caf/io/network/native_socket.hpp>
#include <caf/sec.hpp>
#include <caf/settings.hpp>

#include <arpa/inet.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <condition_variable>
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

std::atomic<uint64_t> refusals{0};

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
void log_refusal(const std::string& peer, const std::string& reason) {
  const uint64_t n = ++refusals;
  if (n <= 10 || n % 1000 == 0)
    log::warning(where, "refused a control-plane connection from {}: {} ({} refused so far{})", peer, reason, n,
                 n == 10 ? "; from now on one in a thousand is logged" : "");
}

class gated_doorman;

/// The acceptor's side of the gate: one thread running every pending handshake of a process with poll(), so a
/// slow or silent peer holds one socket for at most gate_timeout and never a thread of CAF.
class gate_keeper {
 public:
  gate_keeper(net::default_multiplexer& mpx, std::string key);
  ~gate_keeper();

  gate_keeper(const gate_keeper&) = delete;
  gate_keeper& operator=(const gate_keeper&) = delete;

  /// Takes `fd`, just accepted by `door`: its handshake runs in the gate thread, and the door adopts it once the
  /// peer proved the key.
  void admit(native_socket fd, caf::intrusive_ptr<gated_doorman> door);

 private:
  struct pending {
    int fd = -1;
    caf::intrusive_ptr<gated_doorman> door;
    std::unique_ptr<gate::acceptor_handshake> handshake;
    std::string out;  ///< the reply still to send
    std::chrono::steady_clock::time_point deadline;
    std::string peer;
  };

  void wake() {
    const char c = 1;
    [[maybe_unused]] ssize_t ignored = ::write(wake_[1], &c, 1);
  }

  void refuse(pending& p, const std::string& reason) {
    log_refusal(p.peer, reason);
    ::close(p.fd);
    p.fd = -1;
  }

  /// Sends what is left of the reply; false when the connection broke.
  static bool flush(pending& p) {
    while (!p.out.empty()) {
      const ssize_t n = ::send(p.fd, p.out.data(), p.out.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
        return true;
      if (n < 0 && errno == EINTR)
        continue;
      if (n <= 0)
        return false;
      p.out.erase(0, static_cast<std::size_t>(n));
    }
    return true;
  }

  void step(pending& p, short revents);
  void finish(pending& p);
  void run();

  net::default_multiplexer& mpx_;
  std::string key_;
  int wake_[2] = {-1, -1};
  std::mutex mutex_;
  std::vector<pending> incoming_;
  bool stopping_ = false;
  std::thread thread_;
};

/// A doorman whose accepted sockets go through the gate first; CAF's broker hears of a connection only once its
/// peer proved the key.
class gated_doorman final : public net::doorman_impl {
 public:
  gated_doorman(net::default_multiplexer& mpx, native_socket fd, gate_keeper& keeper)
      : net::doorman_impl(mpx, fd), keeper_(keeper) {}

  bool new_connection() override {
    const native_socket fd = acceptor_.accepted_socket();
    if (detached()) {  // the broker let go of this door while the socket was being accepted
      net::close_socket(fd);
      return false;
    }
    keeper_.admit(fd, caf::intrusive_ptr<gated_doorman>{this});
    return true;
  }

  /// Runs in the multiplexer's thread: hands the authenticated `fd` to the broker as CAF's own doorman would.
  void adopt(native_socket fd) {
    if (detached()) {
      net::close_socket(fd);
      return;
    }
    auto& mpx = acceptor_.backend();
    auto scribe = mpx.new_scribe(fd);
    const auto hdl = scribe->hdl();
    parent()->add_scribe(std::move(scribe));
    doorman::new_connection(&mpx, hdl);
  }

 private:
  gate_keeper& keeper_;
};

gate_keeper::gate_keeper(net::default_multiplexer& mpx, std::string key) : mpx_(mpx), key_(std::move(key)) {
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
  for (auto& p : incoming_)
    ::close(p.fd);
  ::close(wake_[0]);
  ::close(wake_[1]);
}

void gate_keeper::admit(native_socket fd, caf::intrusive_ptr<gated_doorman> door) {
  pending p;
  p.fd = fd;
  p.door = std::move(door);
  p.handshake = std::make_unique<gate::acceptor_handshake>(key_);
  p.deadline = std::chrono::steady_clock::now() + gate_timeout;
  p.peer = peer_of(fd);
  const int flags = ::fcntl(fd, F_GETFL, 0);
  ::fcntl(fd, F_SETFL, flags | O_NONBLOCK);
  {
    std::lock_guard lock{mutex_};
    incoming_.push_back(std::move(p));
  }
  wake();
}

void gate_keeper::step(pending& p, short revents) {
  if ((revents & POLLOUT) != 0 && !flush(p)) {
    refuse(p, "the connection broke during the handshake");
    return;
  }
  if ((revents & POLLIN) != 0 && p.out.empty() && p.handshake->wanted() > 0) {
    char buf[gate::max_message_bytes];
    const ssize_t n = ::recv(p.fd, buf, std::min(p.handshake->wanted(), sizeof buf), MSG_DONTWAIT);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
      return;
    if (n <= 0) {
      if (n < 0)
        refuse(p, "the connection broke during the handshake");
      else if (p.handshake->replied())
        refuse(p, "it closed the connection after our challenge, without a proof");
      else
        refuse(p, "it closed the connection during the handshake");
      return;
    }
    p.out = p.handshake->feed(std::string_view{buf, static_cast<std::size_t>(n)});
    if (!flush(p)) {
      refuse(p, "the connection broke during the handshake");
      return;
    }
  } else if ((revents & (POLLERR | POLLHUP | POLLNVAL)) != 0) {
    refuse(p, "the connection broke during the handshake");
    return;
  }
  if (p.handshake->state() == gate::outcome::refused)
    refuse(p, p.handshake->reason());
  else if (p.handshake->state() == gate::outcome::accepted && p.out.empty())
    finish(p);
}

void gate_keeper::finish(pending& p) {
  const native_socket fd = p.fd;
  p.fd = -1;
  mpx_.post([door = std::move(p.door), fd] { door->adopt(fd); });
}

void gate_keeper::run() {
  std::vector<pending> active;
  std::vector<pollfd> polled;
  for (;;) {
    {
      std::lock_guard lock{mutex_};
      if (stopping_)
        break;
      for (auto& p : incoming_)
        active.push_back(std::move(p));
      incoming_.clear();
    }
    while (active.size() > max_pending_gates) {
      refuse(active.front(), fmt::format("more than {} handshakes were pending (the oldest goes)", max_pending_gates));
      active.erase(active.begin());
    }
    const auto now = std::chrono::steady_clock::now();
    auto next_deadline = std::chrono::steady_clock::time_point::max();
    polled.assign(1, pollfd{wake_[0], POLLIN, 0});
    for (const auto& p : active) {
      polled.push_back(pollfd{p.fd, static_cast<short>(p.out.empty() ? POLLIN : POLLOUT), 0});
      next_deadline = std::min(next_deadline, p.deadline);
    }
    int timeout_ms = -1;
    if (!active.empty())
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
    for (std::size_t i = 0; i < active.size(); ++i) {
      pending& p = active[i];
      if (n > 0 && polled[i + 1].revents != 0)
        step(p, polled[i + 1].revents);
      if (p.fd >= 0 && after >= p.deadline)
        refuse(p, fmt::format("it did not complete the handshake within {} ms", gate_timeout.count()));
    }
    std::erase_if(active, [](const pending& p) { return p.fd < 0; });
  }
  for (auto& p : active)
    if (p.fd >= 0)
      ::close(p.fd);
}

/// CAF's default backend with the gate on both sides of every plaintext connection.
class gated_multiplexer final : public net::default_multiplexer {
 public:
  explicit gated_multiplexer(caf::actor_system* sys)
      : net::default_multiplexer(sys), key_(caf::get_or(sys->config(), key_setting, "")) {}

  ~gated_multiplexer() override { keeper_.reset(); }  // before the base: its thread posts to this multiplexer

  caf::expected<caf::io::scribe_ptr> new_tcp_scribe(const std::string& host, uint16_t port) override {
    auto fd = net::new_tcp_connection(host, port);
    if (!fd)
      return std::move(fd.error());
    if (auto failed = gate::connect_through_gate(*fd, key_, gate_timeout)) {
      net::close_socket(*fd);
      auto message = fmt::format("control handshake with {}:{}: {}", host, port, failed->message);
      // A peer that proved another key is a final answer (an actorllm error); one that did not speak the gate may
      // be a TLS endpoint, which describe_connect_error explains for CAF's handshake error.
      if (failed->no_gate)
        return caf::make_error(caf::sec::disconnect_during_handshake, std::move(message));
      return proto::make_error(errc::invalid_config, std::move(message));
    }
    return new_scribe(*fd);
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
  gate_keeper& keeper() {
    std::lock_guard lock{keeper_mutex_};
    if (!keeper_)
      keeper_ = std::make_unique<gate_keeper>(*this, key_);
    return *keeper_;
  }

  std::string key_;
  std::mutex keeper_mutex_;
  std::unique_ptr<gate_keeper> keeper_;
};

}  // namespace

void load_gated_middleman(caf::actor_system_config& cfg, const std::string& key) {
  caf::put(cfg.content, key_setting, key);
  cfg.load<caf::io::middleman, gated_multiplexer>();
}

std::string control_key_of(const caf::actor_system& sys) { return caf::get_or(sys.config(), key_setting, ""); }

bool refused_at_gate(const caf::error& err) {
  return err.category() == proto::error_category && proto::code_of(err) == errc::invalid_config;
}

uint64_t gate_refusals() { return refusals.load(); }

}  // namespace actorllm::actors
