// The control plane's gate handshake: see control_gate.hpp.
#include "actors/cluster/control_gate.hpp"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>

#include <fmt/format.h>

#include <poll.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>

namespace actorllm::actors::gate {
namespace {

constexpr std::string_view acceptor_label = "actorllm gate acceptor";
constexpr std::string_view connector_label = "actorllm gate connector";

std::string random_nonce() {
  std::string out(nonce_bytes, '\0');
  if (RAND_bytes(reinterpret_cast<unsigned char*>(out.data()), static_cast<int>(out.size())) != 1)
    throw std::runtime_error("control gate: OpenSSL has no randomness for a nonce");
  return out;
}

std::string proof(std::string_view key, std::string_view label, std::string_view first, std::string_view second) {
  std::string message;
  message.reserve(label.size() + first.size() + second.size());
  message.append(label).append(first).append(second);
  return hmac_sha256(key, message);
}

bool same_bytes(std::string_view a, std::string_view b) {
  return a.size() == b.size() && CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

}  // namespace

std::string hmac_sha256(std::string_view key, std::string_view message) {
  unsigned char out[EVP_MAX_MD_SIZE];
  unsigned int n = 0;
  static const unsigned char empty = 0;
  const void* key_bytes = key.empty() ? static_cast<const void*>(&empty) : key.data();
  if (HMAC(EVP_sha256(), key_bytes, static_cast<int>(key.size()),
           reinterpret_cast<const unsigned char*>(message.data()), message.size(), out, &n) == nullptr ||
      n != mac_bytes)
    throw std::runtime_error("control gate: OpenSSL cannot compute HMAC-SHA256");
  return std::string(reinterpret_cast<const char*>(out), n);
}

// -- acceptor -----------------------------------------------------------------------------------------------------

acceptor_handshake::acceptor_handshake(std::string key) : key_(std::move(key)), own_nonce_(random_nonce()) {}

std::size_t acceptor_handshake::wanted() const {
  if (state_ != outcome::pending)
    return 0;
  return peer_nonce_.empty() ? hello_bytes - received_.size() : proof_bytes - received_.size();
}

std::string acceptor_handshake::feed(std::string_view bytes) {
  if (bytes.size() > wanted())
    throw std::logic_error("acceptor_handshake::feed: more bytes than wanted()");
  received_.append(bytes);
  if (state_ != outcome::pending || wanted() != 0)
    return {};
  if (peer_nonce_.empty()) {
    if (!same_bytes(std::string_view{received_}.substr(0, magic.size()), magic)) {
      state_ = outcome::refused;
      reason_ = "it did not open with actorllm's control handshake (not actorllm, an older version, or it speaks TLS)";
      return {};
    }
    peer_nonce_ = received_.substr(magic.size());
    received_.clear();
    return std::string{magic} + own_nonce_;
  }
  if (!same_bytes(received_, proof(key_, connector_label, own_nonce_, peer_nonce_))) {
    state_ = outcome::refused;
    reason_ = "it does not hold the cluster token";
    return std::string{refusal};
  }
  state_ = outcome::accepted;
  return proof(key_, acceptor_label, peer_nonce_, own_nonce_);
}

// -- connector ----------------------------------------------------------------------------------------------------

connector_handshake::connector_handshake(std::string key) : key_(std::move(key)), own_nonce_(random_nonce()) {
  hello_ = std::string{magic} + own_nonce_;
}

std::size_t connector_handshake::wanted() const {
  if (state_ != outcome::pending)
    return 0;
  return peer_nonce_.empty() ? challenge_bytes - received_.size() : verdict_bytes - received_.size();
}

std::string connector_handshake::feed(std::string_view bytes) {
  if (bytes.size() > wanted())
    throw std::logic_error("connector_handshake::feed: more bytes than wanted()");
  received_.append(bytes);
  // The magic is checked as soon as it is here: a peer that answers otherwise may never send 48 bytes.
  if (peer_nonce_.empty()) {
    const std::size_t head = std::min(received_.size(), magic.size());
    if (state_ == outcome::pending && !same_bytes(std::string_view{received_}.substr(0, head), magic.substr(0, head))) {
      state_ = outcome::refused;
      no_gate_ = true;
      reason_ =
          "the peer did not answer with actorllm's control handshake (does it use TLS, or another actorllm version?)";
      return {};
    }
  }
  if (state_ != outcome::pending || wanted() != 0)
    return {};
  if (peer_nonce_.empty()) {
    peer_nonce_ = received_.substr(magic.size());
    received_.clear();
    return proof(key_, connector_label, peer_nonce_, own_nonce_);
  }
  if (same_bytes(received_, refusal)) {
    state_ = outcome::refused;
    reason_ =
        "wrong cluster token: the peer refused ours (give both the same --cluster-token or $ACTORLLM_CLUSTER_TOKEN)";
    return {};
  }
  if (!same_bytes(received_, proof(key_, acceptor_label, own_nonce_, peer_nonce_))) {
    state_ = outcome::refused;
    reason_ = "the peer could not prove the cluster token (it is not the head or worker it claims to be)";
    return {};
  }
  state_ = outcome::accepted;
  return {};
}

// -- blocking client ----------------------------------------------------------------------------------------------

std::optional<gate_failure> connect_through_gate(int fd, const std::string& key, std::chrono::milliseconds timeout) {
  using clock = std::chrono::steady_clock;
  const auto deadline = clock::now() + timeout;
  // Waits until `fd` is ready for `events`; false at the deadline.
  auto wait = [&](short events) {
    for (;;) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - clock::now()).count();
      if (left <= 0)
        return false;
      pollfd p{fd, events, 0};
      const int n = ::poll(&p, 1, static_cast<int>(left));
      if (n > 0)
        return true;
      if (n < 0 && errno != EINTR)
        return false;
    }
  };
  auto send_all = [&](std::string_view bytes) -> std::optional<gate_failure> {
    while (!bytes.empty()) {
      if (!wait(POLLOUT))
        return gate_failure{true, "the peer did not take the control handshake in time"};
      const ssize_t n = ::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
        continue;
      if (n <= 0)
        return gate_failure{true, fmt::format("the connection broke during the control handshake: {}",
                                              n < 0 ? std::strerror(errno) : "closed")};
      bytes.remove_prefix(static_cast<std::size_t>(n));
    }
    return std::nullopt;
  };

  connector_handshake hs{key};
  if (auto failed = send_all(hs.hello()))
    return failed;
  char buf[gate::max_message_bytes];
  while (hs.state() == outcome::pending) {
    if (!wait(POLLIN))
      return gate_failure{true, fmt::format("no control handshake from the peer within {} ms", timeout.count())};
    const ssize_t n = ::recv(fd, buf, hs.wanted(), MSG_DONTWAIT);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
      continue;
    if (n == 0 && hs.proved())  // a refusing acceptor sends its verdict first; one that only closes most likely refused
      return gate_failure{false,
                          "the peer closed the connection after our proof (does it hold another cluster token?)"};
    if (n <= 0)
      return gate_failure{
          true, n == 0 ? "the peer closed the connection during the control handshake"
                       : fmt::format("the connection broke during the control handshake: {}", std::strerror(errno))};
    const std::string answer = hs.feed(std::string_view{buf, static_cast<std::size_t>(n)});
    if (!answer.empty())
      if (auto failed = send_all(answer))
        return failed;
  }
  if (hs.state() == outcome::accepted)
    return std::nullopt;
  return gate_failure{hs.no_gate(), hs.reason()};
}

}  // namespace actorllm::actors::gate
