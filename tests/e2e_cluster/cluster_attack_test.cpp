// Issue 30, items 3 and 4, against a real cluster head (`actorllm node --head`, tests/e2e_cluster/cluster_harness.hpp):
// a member holding the token sends malformed BASP after the gate; a TLS client whose certificate the CA signed
// but that holds no token; a silent connection that never starts TLS; and a head at its descriptor limit under a
// flood of such connections. The head must stay up, close the hostile connection, keep its CPU idle, and keep
// serving `actorllm status` and node joins.
#include "actors/basp_peer.hpp"
#include "actors/cluster/tls_relay.hpp"
#include "e2e_cluster/cluster_harness.hpp"
#include "support/test_pki.hpp"

#include <doctest/doctest.h>

#include <sys/resource.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

using namespace actorllm;
using namespace std::chrono_literals;

namespace {

bool contains(const std::string& s, std::string_view part) { return s.find(part) != std::string::npos; }

/// CPU seconds (user + system) process `pid` has used.
double cpu_seconds(pid_t pid) {
  std::ifstream in{fmt::format("/proc/{}/stat", pid)};
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::istringstream fields{text.substr(text.rfind(')') + 2)};  // after "pid (comm) "
  std::string f;
  unsigned long long utime = 0;
  unsigned long long stime = 0;
  for (int i = 3; i <= 15 && fields >> f; ++i) {
    if (i == 14)
      utime = std::stoull(f);
    if (i == 15)
      stime = std::stoull(f);
  }
  return static_cast<double>(utime + stime) / static_cast<double>(::sysconf(_SC_CLK_TCK));
}

/// VmHWM (peak resident set, kB) of process `pid`.
long peak_kb(pid_t pid) {
  std::ifstream in{fmt::format("/proc/{}/status", pid)};
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("VmHWM:", 0) == 0)
      return std::stol(line.substr(6));
  return -1;
}

std::size_t open_descriptors(pid_t pid) {
  std::size_t n = 0;
  for ([[maybe_unused]] const auto& e : std::filesystem::directory_iterator{fmt::format("/proc/{}/fd", pid)})
    ++n;
  return n;
}

/// A message nested `depth` times in a message, as CAF serializes it.
std::string nested_messages(std::size_t depth) {
  const std::string level = std::string{"\0\0", 2} + '\x0c' + "@<>+@message";
  std::string out;
  for (std::size_t i = 0; i < depth; ++i)
    out += level;
  return out + std::string{"\0\0", 2} + '\x03' + "@<>";
}

/// Asserts that `actorllm status` answers within its usual time and lists `n` healthy nodes.
void expect_serving(const test::sim_cluster& cluster, int n) {
  const auto start = std::chrono::steady_clock::now();
  const auto listed = cluster.status();
  const auto took = std::chrono::steady_clock::now() - start;
  INFO(listed.out);
  CHECK(listed.status == 0);
  CHECK(contains(listed.out, fmt::format("{} node(s), {} healthy", n, n)));
  CHECK(took < 5s);
}

}  // namespace

TEST_CASE(
    "a member's malformed BASP after the gate closes its connection, and the head keeps serving status and "
    "joins") {
  test::sim_cluster cluster{1, 1};
  auto& head = cluster.head();
  const long peak_before = peak_kb(head.pid);
  {
    // Deep nesting: CAF's parser recursed until the head's stack overflowed (SIGSEGV).
    test::basp_peer peer{cluster.head_port(), cluster.token()};
    const caf::actor_id registry = peer.read_server_handshake();
    caf::actor_system_config cfg;
    caf::actor_system local{cfg};
    REQUIRE(peer.send(test::basp_peer::client_handshake(local)));
    REQUIRE(peer.send(test::basp_peer::direct_message(registry, std::string{"\0", 1} + nested_messages(200'000))));
    CHECK(peer.closed_within(5s));
  }
  {
    // A payload length of 3 GiB: CAF allocated (and zero-filled) it before reading a byte.
    test::basp_peer peer{cluster.head_port(), cluster.token()};
    const caf::actor_id registry = peer.read_server_handshake();
    caf::actor_system_config cfg;
    caf::actor_system local{cfg};
    REQUIRE(peer.send(test::basp_peer::client_handshake(local)));
    REQUIRE(peer.send(test::basp_header(test::basp_direct_message, 0, 3u << 30, 0, 0, registry)));
    CHECK(peer.closed_within(5s));
  }
  REQUIRE(head.running());
  const long grown = peak_kb(head.pid) - peak_before;
  MESSAGE("the head's peak resident set grew by " << grown << " kB");
  CHECK(grown < 100 * 1024);
  CHECK(contains(head.log_text(), "after the handshake it sent"));
  expect_serving(cluster, 1);
  cluster.start_agent("late", 1, cluster.token());
  CHECK(cluster.wait_for_nodes(2, 20s));
}

TEST_CASE("a TLS client with a certificate of the cluster's CA but no token is refused before CAF reads a byte") {
  test::test_pki pki;
  test::sim_cluster::options o;
  o.n_nodes = 1;
  o.node_args = pki.flags();
  test::sim_cluster cluster{o};
  const actors::tls_context tls{pki.cert, pki.key, pki.ca};
  {
    test::basp_peer stranger{cluster.head_port(), "", &tls, false};
    // CAF's OpenSSL module answered the TLS handshake with BASP's server handshake at once; the gate waits for our
    // hello instead.
    const std::string first = stranger.read(32, 1s);
    CHECK(first.empty());
    caf::actor_system_config cfg;
    caf::actor_system local{cfg};
    stranger.send(test::basp_peer::client_handshake(local));
    CHECK(stranger.closed_within(6s));
  }
  {
    // The right certificate and a wrong token: refused at the gate inside TLS.
    const int fd = test::dial(cluster.head_port());
    REQUIRE(fd >= 0);
    SSL* ssl = nullptr;
    auto failed = actors::connect_through_tls_gate(fd, tls, "not-the-token", 5s, ssl);
    CHECK(failed.has_value());
    if (ssl != nullptr)
      SSL_free(ssl);
    ::close(fd);
  }
  CHECK(cluster.head().running());
  CHECK(contains(cluster.head().log_text(), "refused a control-plane connection"));
  expect_serving(cluster, 1);
}

TEST_CASE("a silent connection to a TLS head is closed within the handshake timeout, the head's CPU idle") {
  test::test_pki pki;
  test::sim_cluster::options o;
  o.n_nodes = 1;
  o.node_args = pki.flags();
  test::sim_cluster cluster{o};
  auto& head = cluster.head();
  const int fd = test::dial(cluster.head_port());
  REQUIRE(fd >= 0);
  const double cpu_before = cpu_seconds(head.pid);
  const auto start = std::chrono::steady_clock::now();
  pollfd p{fd, POLLIN, 0};
  const int ready = ::poll(&p, 1, 8000);  // the head closes it: readable, with nothing to read
  const auto waited = std::chrono::steady_clock::now() - start;
  char c = 0;
  const bool closed = ready == 1 && ::recv(fd, &c, 1, MSG_DONTWAIT) <= 0;
  const double cpu = cpu_seconds(head.pid) - cpu_before;
  ::close(fd);
  MESSAGE("closed after " << std::chrono::duration_cast<std::chrono::milliseconds>(waited).count()
                          << " ms; the head used " << cpu << " s of CPU meanwhile");
  CHECK(closed);
  CHECK(waited < 7s);
  CHECK(cpu < 0.5 * std::chrono::duration<double>(waited).count());
  CHECK(head.running());
  expect_serving(cluster, 1);
}

TEST_CASE("a TLS head at its descriptor limit under a flood of silent connections backs off and keeps serving") {
  test::test_pki pki;
  test::sim_cluster::options o;
  o.n_nodes = 1;
  o.node_args = pki.flags();
  test::sim_cluster cluster{o};
  auto& head = cluster.head();
  rlimit original{};
  REQUIRE(::prlimit(head.pid, RLIMIT_NOFILE, nullptr, &original) == 0);
  const rlimit tight{open_descriptors(head.pid) + 16, original.rlim_max};
  REQUIRE(::prlimit(head.pid, RLIMIT_NOFILE, &tight, nullptr) == 0);
  std::vector<int> silent;
  for (int i = 0; i < 100; ++i) {
    const int fd = test::dial(cluster.head_port());
    if (fd >= 0)
      silent.push_back(fd);
  }
  const double cpu_before = cpu_seconds(head.pid);
  // Long enough for the head to meet the limit (each connection it takes costs it descriptors).
  pollfd p{silent.back(), POLLIN, 0};
  ::poll(&p, 1, 1500);
  const double cpu = cpu_seconds(head.pid) - cpu_before;
  MESSAGE("at the limit the head used " << cpu << " s of CPU in 1.5 s");
  CHECK(head.running());
  CHECK(cpu < 0.75);
  for (int fd : silent)
    ::close(fd);
  REQUIRE(::prlimit(head.pid, RLIMIT_NOFILE, &original, nullptr) == 0);
  CHECK(head.running());
  CHECK(contains(head.log_text(), "cannot accept a control-plane connection"));
  expect_serving(cluster, 1);
}
