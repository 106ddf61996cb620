// A hostile member of the control plane for tests: it holds the key, so it passes the gate (over TLS too), and
// then writes raw BASP (headers and payloads built with CAF's own serializer, or bytes of its choosing) to an
// actor system of the test process that publishes an echo actor. Used by tests/actors/control_basp_test.cpp.
// Header-only.
#pragma once

#include "actorllm/proto/type_ids.hpp"
#include "actors/cluster/control_gate.hpp"
#include "actors/cluster/control_network.hpp"
#include "actors/cluster/tls_relay.hpp"

#include <doctest/doctest.h>
#include <openssl/ssl.h>
#include <caf/all.hpp>
#include <caf/binary_deserializer.hpp>
#include <caf/binary_serializer.hpp>
#include <caf/io/all.hpp>

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <fstream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace actorllm::test {

inline constexpr uint8_t basp_server_handshake = 0;
inline constexpr uint8_t basp_client_handshake = 1;
inline constexpr uint8_t basp_direct_message = 2;
inline constexpr uint8_t basp_heartbeat = 6;

/// A BASP header as CAF writes it (network byte order).
inline std::string basp_header(uint8_t op, uint8_t flags, uint32_t payload_len, uint64_t op_data, uint64_t src,
                               uint64_t dst) {
  std::string h(32, '\0');
  h[0] = static_cast<char>(op);
  h[3] = static_cast<char>(flags);
  auto put = [&h](std::size_t at, uint64_t v, std::size_t n) {
    for (std::size_t i = 0; i < n; ++i)
      h[at + i] = static_cast<char>((v >> (8 * (n - 1 - i))) & 0xff);
  };
  put(4, payload_len, 4);
  put(8, op_data, 8);
  put(16, src, 8);
  put(24, dst, 8);
  return h;
}

/// `xs` serialized by CAF.
template <class... Ts>
std::string caf_bytes(caf::actor_system& sys, Ts&... xs) {
  std::vector<char> buf;
  caf::binary_serializer sink{sys, buf};
  auto err = sink(xs...);
  REQUIRE_MESSAGE(!err, sys.render(err));
  return std::string{buf.begin(), buf.end()};
}

/// The resident set (kB) of this process (VmRSS of /proc/self/status).
inline long resident_kb() {
  std::ifstream in{"/proc/self/status"};
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("VmRSS:", 0) == 0)
      return std::stol(line.substr(6));
  return -1;
}

/// A connected TCP socket to 127.0.0.1:port, or -1.
inline int dial(uint16_t port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0)
    return -1;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

/// The published actor: answers a string with itself. A member may send any well-formed message, including an
/// error or an exit message that ends an actor (authorization, not parsing: see issue 30's report); this one outlives
/// them, so that the fuzzer measures whether the process parses safely. (A class, not a function: CAF 0.17's
/// init_fun_factory binds a null reference for a function with a captured state, which UBSan reports.)
class echo_actor : public caf::event_based_actor {
 public:
  echo_actor(caf::actor_config& cfg, std::shared_ptr<std::atomic<int>> echoed)
      : caf::event_based_actor(cfg), echoed_(std::move(echoed)) {}

  caf::behavior make_behavior() override {
    set_default_handler(caf::drop);
    set_error_handler([](caf::error&) {});
    set_exit_handler([](caf::exit_msg&) {});
    set_down_handler([](caf::down_msg&) {});
    return {[this](const std::string& s) {
      ++*echoed_;
      return s;
    }};
  }

 private:
  std::shared_ptr<std::atomic<int>> echoed_;
};

/// An actor system of this process with the control network on, publishing an echo actor on 127.0.0.1.
class basp_target {
 public:
  explicit basp_target(const std::string& key, const actors::control_tls& tls = {},
                       std::size_t max_message = actors::default_max_control_message_bytes)
      : key_(key), tls_(tls) {
    proto::add_message_types(cfg_);
    cfg_.set("scheduler.max-threads", 2);
    actors::enable_network(cfg_, tls, key, max_message);
    sys_ = std::make_unique<caf::actor_system>(cfg_);
    echo_ = sys_->spawn<echo_actor>(echoed_);
    auto port = actors::publish_control(echo_, 0, "127.0.0.1");
    REQUIRE_MESSAGE(port, sys_->render(port.error()));
    port_ = *port;
  }
  ~basp_target() {
    client_.reset();
    caf::anon_send_exit(echo_, caf::exit_reason::kill);  // it ignores the other exit reasons
    sys_.reset();
  }
  basp_target(const basp_target&) = delete;
  basp_target& operator=(const basp_target&) = delete;

  caf::actor_system& sys() { return *sys_; }
  uint16_t port() const { return port_; }
  caf::actor_id echo_id() const { return echo_.id(); }
  /// Strings the echo actor answered.
  int echoed() const { return echoed_->load(); }

  /// Whether a well-behaved client (another actor system with the key) gets an answer within `timeout`.
  bool serves(std::chrono::milliseconds timeout = std::chrono::seconds{5}) {
    if (!client_) {  // one client system for every check: CAF keeps its connection
      client_cfg_.emplace();
      proto::add_message_types(*client_cfg_);
      client_cfg_->set("scheduler.max-threads", 2);
      actors::enable_network(*client_cfg_, tls_, key_);
      client_ = std::make_unique<caf::actor_system>(*client_cfg_);
    }
    caf::actor_system& client = *client_;
    auto echo = actors::connect_control<caf::actor>(client, "127.0.0.1", port_);
    if (!echo) {
      MESSAGE("a well-behaved client cannot connect: " << client.render(echo.error()));
      return false;
    }
    bool answered = false;
    caf::scoped_actor self{client};
    self->request(*echo, timeout, std::string{"ping"})
        .receive([&](const std::string& s) { answered = s == "ping"; },
                 [&](const caf::error& err) { MESSAGE("no answer: " << client.render(err)); });
    return answered;
  }

 private:
  std::string key_;
  actors::control_tls tls_;
  caf::actor_system_config cfg_;
  std::unique_ptr<caf::actor_system> sys_;
  std::shared_ptr<std::atomic<int>> echoed_ = std::make_shared<std::atomic<int>>(0);
  caf::actor echo_;
  uint16_t port_ = 0;
  std::optional<caf::actor_system_config> client_cfg_;
  std::unique_ptr<caf::actor_system> client_;
};

/// One member connection: the gate passed with the key (over TLS when `tls` is given), then raw bytes.
class basp_peer {
 public:
  /// `pass_gate` false with `tls`: only the TLS handshake (a peer with a certificate but without the key).
  basp_peer(uint16_t port, const std::string& key, const actors::tls_context* tls = nullptr, bool pass_gate = true) {
    fd_ = dial(port);
    REQUIRE(fd_ >= 0);
    if (tls != nullptr && !pass_gate) {
      ::fcntl(fd_, F_SETFL, ::fcntl(fd_, F_GETFL, 0) | O_NONBLOCK);
      ssl_ = tls->new_session(fd_, false);
      REQUIRE(ssl_ != nullptr);
      const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds{5};
      std::string reason;
      for (;;) {
        const auto step = actors::step_tls_handshake(ssl_, false, reason);
        REQUIRE_MESSAGE(step != actors::tls_step::failed, reason);
        if (step == actors::tls_step::done)
          break;
        REQUIRE(std::chrono::steady_clock::now() < deadline);
        wait(step == actors::tls_step::want_write ? POLLOUT : POLLIN, 100);
      }
    } else if (tls != nullptr) {
      auto failed = actors::connect_through_tls_gate(fd_, *tls, key, std::chrono::seconds{5}, ssl_);
      REQUIRE_MESSAGE(!failed, failed->message);
    } else {
      auto failed = actors::gate::connect_through_gate(fd_, key, std::chrono::seconds{5});
      REQUIRE_MESSAGE(!failed, failed->message);
    }
  }
  ~basp_peer() {
    if (ssl_ != nullptr)
      SSL_free(ssl_);
    // An abortive close: no TIME_WAIT left behind by thousands of fuzzed connections.
    const linger abort_on_close{1, 0};
    ::setsockopt(fd_, SOL_SOCKET, SO_LINGER, &abort_on_close, sizeof abort_on_close);
    ::close(fd_);
  }
  basp_peer(const basp_peer&) = delete;
  basp_peer& operator=(const basp_peer&) = delete;

  /// Sends `bytes`; false once the connection is gone.
  bool send(std::string bytes) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds{5};
    while (!bytes.empty() && std::chrono::steady_clock::now() < deadline) {
      if (ssl_ != nullptr) {
        std::string reason;
        const auto step = actors::tls_write(ssl_, bytes, reason);
        if (step == actors::tls_step::failed)
          return false;
        if (step != actors::tls_step::done)
          wait(step == actors::tls_step::want_write ? POLLOUT : POLLIN, 100);
        continue;
      }
      const ssize_t n = ::send(fd_, bytes.data(), bytes.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
        wait(POLLOUT, 100);
        continue;
      }
      if (n <= 0)
        return false;
      bytes.erase(0, static_cast<std::size_t>(n));
    }
    return bytes.empty();
  }

  /// Reads exactly `n` bytes within `limit`; fewer when the peer closed or time ran out. The socket is read once
  /// more after the deadline: a test process that was not scheduled for the whole limit (a loaded CI machine) still
  /// finds what arrived meanwhile.
  std::string read(std::size_t n, std::chrono::milliseconds limit = std::chrono::seconds{5}) {
    std::string got;
    const auto deadline = std::chrono::steady_clock::now() + limit;
    while (got.size() < n) {
      const bool last = std::chrono::steady_clock::now() >= deadline;
      const int r = read_some(got, n - got.size());
      if (r < 0 || (r == 0 && last))
        break;
      if (r == 0)
        wait(POLLIN, 50);
    }
    return got;
  }

  /// Reads the server handshake CAF sends first (header and payload) within `limit`; the id of the actor published
  /// on the port.
  caf::actor_id read_server_handshake(std::chrono::milliseconds limit = std::chrono::seconds{5}) {
    const auto start = std::chrono::steady_clock::now();
    const std::string h = read(32, limit);
    REQUIRE_MESSAGE(
        h.size() == 32,
        "the server handshake: "
            << h.size() << " of its 32 header bytes after "
            << std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - start).count()
            << " ms (limit " << limit.count() << " ms)");
    CHECK(static_cast<uint8_t>(h[0]) == basp_server_handshake);
    uint32_t len = 0;
    for (int i = 4; i < 8; ++i)
      len = (len << 8) | static_cast<uint8_t>(h[i]);
    const std::string payload = read(len);
    REQUIRE(payload.size() == len);
    caf::binary_deserializer source{static_cast<caf::execution_unit*>(nullptr), payload.data(), payload.size()};
    caf::node_id node;
    std::vector<std::string> app_ids;
    caf::actor_id published = 0;
    REQUIRE_FALSE(source(node, app_ids, published));
    return published;
  }

  /// A client handshake from a made-up node.
  static std::string client_handshake(caf::actor_system& sys, uint32_t process = 4242) {
    auto node = caf::make_node_id(process, "0123456789abcdef0123456789abcdef01234567");
    REQUIRE(node);
    const std::string payload = caf_bytes(sys, *node);
    return basp_header(basp_client_handshake, 0, static_cast<uint32_t>(payload.size()), 0, 0, 0) + payload;
  }

  /// A direct message to actor `dest` whose payload (the forwarding stack and the message) is `payload`.
  static std::string direct_message(caf::actor_id dest, const std::string& payload) {
    return basp_header(basp_direct_message, 0, static_cast<uint32_t>(payload.size()), 0, 0, dest) + payload;
  }

  /// The payload of a direct message carrying `msg`, serialized by CAF.
  static std::string message_payload(caf::actor_system& sys, caf::message msg) {
    std::vector<caf::strong_actor_ptr> stages;
    return caf_bytes(sys, stages, msg);
  }

  /// Whether the other side closes the connection within `limit` (what it sends meanwhile is dropped).
  bool closed_within(std::chrono::milliseconds limit) {
    const auto deadline = std::chrono::steady_clock::now() + limit;
    std::string sink;
    while (std::chrono::steady_clock::now() < deadline) {
      sink.clear();
      const int r = read_some(sink, 4096);
      if (r < 0)
        return true;
      if (r == 0)
        wait(POLLIN, 50);
    }
    return false;
  }

  int fd() const { return fd_; }

 private:
  /// >0: bytes read; 0: nothing now; <0: closed or broken.
  int read_some(std::string& out, std::size_t n) {
    if (ssl_ != nullptr) {
      std::string reason;
      const std::size_t before = out.size();
      const auto step = actors::tls_read(ssl_, out, n, reason);
      if (out.size() > before)
        return static_cast<int>(out.size() - before);
      return step == actors::tls_step::failed ? -1 : 0;
    }
    char buf[4096];
    const ssize_t r = ::recv(fd_, buf, std::min(n, sizeof buf), MSG_DONTWAIT);
    if (r > 0) {
      out.append(buf, static_cast<std::size_t>(r));
      return static_cast<int>(r);
    }
    if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
      return 0;
    return -1;
  }

  void wait(short events, int ms) {
    pollfd p{fd_, events, 0};
    ::poll(&p, 1, ms);
  }

  int fd_ = -1;
  SSL* ssl_ = nullptr;
};

}  // namespace actorllm::test
