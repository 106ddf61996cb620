// Issue 30, item 3: a member of the control plane (it holds the key) sends malformed BASP after the gate. Each case
// once crashed or bloated the process that parsed it (CAF 0.17.6 trusts what it parses); now the BASP screen
// (actors/cluster/basp_screen.hpp) closes that connection and the process keeps serving a well-behaved client. Then a
// seeded fuzzer of the framing after the handshake, bounded in time (ACTORLLM_FUZZ_SECONDS, default 4;
// ACTORLLM_FUZZ_SEED replays a run).
#include "actors/cluster/basp_screen.hpp"
#include "actors/cluster/gated_multiplexer.hpp"
#include "basp_peer.hpp"

#include <doctest/doctest.h>

#include <chrono>
#include <cstdlib>
#include <random>
#include <string>

using namespace actorllm;
using namespace std::chrono_literals;
using test::basp_peer;
using test::basp_target;

namespace {

const std::string key = "a-cluster-token-for-the-basp-tests-0123456789";

/// A message nested `depth` times in a message, as CAF serializes it ("@<>+@message" each level).
std::string nested_messages(std::size_t depth) {
  const std::string level = std::string{"\0\0", 2} + '\x0c' + "@<>+@message";
  std::string out;
  out.reserve(level.size() * depth + 8);
  for (std::size_t i = 0; i < depth; ++i)
    out += level;
  out += std::string{"\0\0", 2} + '\x03' + "@<>";
  return out;
}

/// A peer that completed the gate and CAF's handshake with `target`.
std::unique_ptr<basp_peer> member_of(basp_target& target) {
  auto peer = std::make_unique<basp_peer>(target.port(), key);
  peer->read_server_handshake();
  REQUIRE(peer->send(basp_peer::client_handshake(target.sys())));
  return peer;
}

}  // namespace

TEST_CASE(
    "control BASP: a well-formed message from a member reaches the actor (the bytes these tests build are "
    "BASP)") {
  basp_target target{key};
  auto peer = member_of(target);
  caf::message msg = caf::make_message(std::string{"hello"});
  REQUIRE(peer->send(basp_peer::direct_message(target.echo_id(), basp_peer::message_payload(target.sys(), msg))));
  const auto deadline = std::chrono::steady_clock::now() + 5s;
  while (target.echoed() == 0 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(10ms);  // polling a counter the actor bumps: there is nothing to wait on
  CHECK(target.echoed() == 1);
  CHECK_FALSE(peer->closed_within(200ms));
}

TEST_CASE("control BASP: a message nested 200,000 deep closes the connection (CAF overflowed its stack)") {
  basp_target target{key};
  const uint64_t refused = actors::screen_refusals();
  auto peer = member_of(target);
  const std::string payload = std::string{"\0", 1} + nested_messages(200'000);  // no stages, then the message
  REQUIRE(peer->send(basp_peer::direct_message(target.echo_id(), payload)));
  CHECK(peer->closed_within(5s));
  CHECK(actors::screen_refusals() == refused + 1);
  CHECK(target.serves());
}

TEST_CASE(
    "control BASP: a payload length over --max-control-message-bytes closes the connection before CAF "
    "allocates it") {
  basp_target target{key, {}, std::size_t{1} << 20};
  auto peer = member_of(target);
  const long before = test::resident_kb();
  // 768 MiB announced: CAF resized its read buffer to that (zero-filled) before reading a byte of it.
  REQUIRE(peer->send(test::basp_header(test::basp_direct_message, 0, 768u << 20, 0, 0, target.echo_id())));
  CHECK(peer->closed_within(5s));
  const long grown_kb = test::resident_kb() - before;
  MESSAGE("resident set grew by " << grown_kb << " kB");
  CHECK(grown_kb < 64 * 1024);
  CHECK(target.serves());
}

TEST_CASE("control BASP: a byte sequence claiming 1 GiB in a small message closes the connection") {
  basp_target target{key};
  auto peer = member_of(target);
  const long before = test::resident_kb();
  // "@<>+@charbuf" (std::vector<char>) whose length says 2^30: CAF resized the vector before checking the bytes.
  std::string payload = std::string{"\0\0\0", 3} + '\x0c' + "@<>+@charbuf";
  payload += std::string{"\x80\x80\x80\x80\x04", 5};  // varbyte 2^30
  payload += "only a few bytes follow";
  REQUIRE(peer->send(basp_peer::direct_message(target.echo_id(), payload)));
  CHECK(peer->closed_within(5s));
  const long grown_kb = test::resident_kb() - before;
  MESSAGE("resident set grew by " << grown_kb << " kB");
  CHECK(grown_kb < 64 * 1024);
  CHECK(target.serves());
}

TEST_CASE("control BASP: messages out of order, unknown operations and a peer claiming our node id are refused") {
  basp_target target{key};
  SUBCASE("a direct message before the client handshake") {
    basp_peer peer{target.port(), key};
    peer.read_server_handshake();
    caf::message msg = caf::make_message(std::string{"early"});
    REQUIRE(peer.send(basp_peer::direct_message(target.echo_id(), basp_peer::message_payload(target.sys(), msg))));
    CHECK(peer.closed_within(5s));
  }
  SUBCASE("an unknown operation") {
    auto peer = member_of(target);
    REQUIRE(peer->send(test::basp_header(42, 0, 0, 0, 0, 0)));
    CHECK(peer->closed_within(5s));
  }
  SUBCASE("a client handshake naming the target's own node") {
    basp_peer peer{target.port(), key};
    peer.read_server_handshake();
    auto own = target.sys().node();
    const std::string payload = test::caf_bytes(target.sys(), own);
    REQUIRE(peer.send(
        test::basp_header(test::basp_client_handshake, 0, static_cast<uint32_t>(payload.size()), 0, 0, 0) + payload));
    CHECK(peer.closed_within(5s));
  }
  CHECK(target.echoed() == 0);
  CHECK(target.serves());
}

TEST_CASE("control BASP: a seeded fuzzer of the framing after the handshake keeps the process serving [asan]") {
  const char* seconds_env = std::getenv("ACTORLLM_FUZZ_SECONDS");
  const char* seed_env = std::getenv("ACTORLLM_FUZZ_SEED");
  const auto budget = std::chrono::seconds{seconds_env != nullptr && *seconds_env != '\0' ? std::stoi(seconds_env) : 4};
  const uint64_t seed = seed_env != nullptr && *seed_env != '\0' ? std::stoull(seed_env) : std::random_device{}();
  MESSAGE("BASP fuzz: seed " << seed << " for " << budget.count() << " s (replay: ACTORLLM_FUZZ_SEED=" << seed << ")");
  std::mt19937_64 gen{seed};
  auto pick = [&](std::size_t n) { return n == 0 ? std::size_t{0} : static_cast<std::size_t>(gen() % n); };

  basp_target target{key, {}, std::size_t{4} << 20};
  // The corpus: well-formed BASP as CAF writes it, and the shapes that broke CAF.
  std::vector<std::string> corpus;
  for (const caf::message& m : {caf::make_message(std::string{"ping"}), caf::make_message(int32_t{7}, std::string{"x"}),
                                caf::make_message(std::vector<std::string>{"a", "b"}),
                                caf::make_message(caf::error{caf::sec::bad_function_call}),
                                caf::make_message(caf::make_message(std::string{"inner"}))})
    corpus.push_back(basp_peer::direct_message(target.echo_id(), basp_peer::message_payload(target.sys(), m)));
  corpus.push_back(test::basp_header(test::basp_heartbeat, 0, 0, 0, 0, 0));
  corpus.push_back(basp_peer::direct_message(target.echo_id(), std::string{"\0", 1} + nested_messages(64)));
  const std::vector<std::string> type_names = {"@message", "@charbuf", "@config_value", "@strong_actor_ptr",
                                               "@error",   "@node",    "@actorvec",     "@strmap",
                                               "@group",   "@down",    "@str",          "@u64"};

  std::size_t inputs = 0;
  std::chrono::milliseconds slowest{0};  // the longest wait for a server handshake
  const auto deadline = std::chrono::steady_clock::now() + budget;
  while (std::chrono::steady_clock::now() < deadline) {
    std::string stream = basp_peer::client_handshake(target.sys(), static_cast<uint32_t>(1000 + pick(1000)));
    for (std::size_t k = 0, n = 1 + pick(3); k < n; ++k)
      stream += corpus[pick(corpus.size())];
    const std::size_t start = pick(2) == 0 ? 0 : 32 + pick(stream.size() - 32);  // the handshake too, at times
    switch (pick(6)) {
      case 0:  // bit flips
        for (std::size_t k = 0, n = 1 + pick(8); k < n; ++k)
          stream[start + pick(stream.size() - start)] ^= static_cast<char>(1 << pick(8));
        break;
      case 1:  // a random byte anywhere
        for (std::size_t k = 0, n = 1 + pick(4); k < n; ++k)
          stream[start + pick(stream.size() - start)] = static_cast<char>(gen());
        break;
      case 2: {  // a hostile payload length in some header
        const std::size_t at = 32 + pick(stream.size() - 32);
        for (std::size_t i = 0; i < 4 && at + 4 + i < stream.size(); ++i)
          stream[at + 4 + i] = static_cast<char>(pick(2) == 0 ? 0xff : gen());
        break;
      }
      case 3: {  // a hostile varbyte length somewhere in a payload
        const std::size_t at = start + pick(stream.size() - start);
        stream.insert(at, std::string{"\xff\xff\xff\xff\x0f", 5});
        break;
      }
      case 4: {  // a type name of CAF's swapped in
        const std::size_t at = stream.find("@<>+");
        if (at != std::string::npos)
          stream.insert(at + 4, type_names[pick(type_names.size())] + "+");
        break;
      }
      default:  // truncated, then random bytes
        stream.resize(32 + pick(stream.size() - 32));
        for (std::size_t k = 0, n = pick(64); k < n; ++k)
          stream += static_cast<char>(gen());
        break;
    }
    basp_peer peer{target.port(), key};
    // The property is that the process goes on serving; a handshake held up by a loaded machine is not a failure
    // of it, so the limit is generous and the slowest handshake is reported.
    const auto asked = std::chrono::steady_clock::now();
    peer.read_server_handshake(std::chrono::seconds{20});
    slowest = std::max(slowest,
                       std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - asked));
    peer.send(stream);
    ++inputs;
    if (inputs % 50 == 0)
      REQUIRE_MESSAGE(target.serves(),
                      "the target stopped serving after " << inputs << " inputs (seed " << seed << ")");
  }
  MESSAGE("BASP fuzz: " << inputs << " inputs, " << actors::screen_refusals()
                        << " connections screened out so far, the slowest server handshake in " << slowest.count()
                        << " ms");
  CHECK(inputs > 0);
  CHECK(target.serves());
}

TEST_CASE("control BASP: the screen alone refuses deep nesting, huge sequences and foreign types") {
  caf::actor_system_config cfg;
  proto::add_message_types(cfg);
  caf::actor_system sys{cfg};
  caf::scoped_execution_unit ctx{&sys};
  auto screened = [&](const std::string& payload) {
    actors::basp_screen screen{actors::basp_role::acceptor, std::size_t{16} << 20};
    const std::string stream = basp_peer::client_handshake(sys) + basp_peer::direct_message(7, payload);
    return screen.feed(&ctx, stream.data(), stream.size());
  };
  caf::message fine = caf::make_message(std::string{"fine"});
  CHECK(screened(basp_peer::message_payload(sys, fine)).empty());
  CHECK(screened(std::string{"\0", 1} + nested_messages(8)).empty());
  const std::string deep = screened(std::string{"\0", 1} + nested_messages(100));
  CHECK_MESSAGE(deep.find("nested deeper than") != std::string::npos, deep);
  std::string charbuf = std::string{"\0\0\0", 3} + '\x0c' + "@<>+@charbuf" + std::string{"\x80\x80\x80\x80\x04", 5};
  const std::string huge = screened(charbuf);
  CHECK_MESSAGE(huge.find("a sequence of 1073741824 elements") != std::string::npos, huge);
  const std::string group = screened(std::string{"\0\0\0", 3} + '\x0a' + "@<>+@group" + std::string(8, 'x'));
  CHECK_MESSAGE(group.find("never sends") != std::string::npos, group);
}
