// The HTTP front end's fuzzer (tests/fuzz) for a bounded time against the in-process server: no crash (ASan+UBSan
// in CI: the test is tagged [asan]), no connection left neither answered nor closed, the server answering a valid
// request every half second and stopping at once at the end (no connection leaked). ACTORLLM_FUZZ_SECONDS makes the
// run longer (default 20); ACTORLLM_FUZZ_SEED replays one (the seed is printed either way). For hours of fuzzing, or
// fuzzing a running `actorllm serve`, see fuzz_http (tests/fuzz/fuzz_http_main.cpp).
#include "fuzz/http_fuzz.hpp"
#include "fuzz/test_server.hpp"
#include "util/log.hpp"

#include <doctest/doctest.h>
#include <fmt/format.h>

#include <cstdlib>
#include <random>
#include <string>

using namespace actorllm;
using namespace std::chrono_literals;

namespace {

uint64_t env_number(const char* name, uint64_t fallback) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0')
    return fallback;
  char* end = nullptr;
  const unsigned long long n = std::strtoull(v, &end, 0);  // decimal or 0x...
  REQUIRE_MESSAGE((end != nullptr && *end == '\0'), name << "='" << v << "' is not a number");
  return n;
}

/// Restores the log threshold on every path out.
struct quiet_log {
  log::level before = log::threshold();
  quiet_log() { log::set_threshold(log::level::error); }  // one info line per request would drown the output
  ~quiet_log() { log::set_threshold(before); }
};

}  // namespace

TEST_CASE("http fuzz: raw-byte clients never crash, hang or stop the in-process server [asan]") {
  const uint64_t seed =
      env_number("ACTORLLM_FUZZ_SEED", (uint64_t{std::random_device{}()} << 32) ^ std::random_device{}());
  const uint64_t seconds = env_number("ACTORLLM_FUZZ_SECONDS", 20);
  MESSAGE(fmt::format("http fuzz: seed {:#x} for {} s (replay: ACTORLLM_FUZZ_SEED={:#x})", seed, seconds, seed));
  quiet_log quiet;
  fuzz::test_server server;
  fuzz::campaign_options o;
  o.seed = seed;
  o.duration = std::chrono::seconds{seconds};
  o.port = server.port();
  o.health = [&server] {
    if (!server.running())
      return "the server stopped: " + server.failure();
    if (server.connection_errors() > 0)
      return fmt::format("{} connection(s) ended on an exception (see the log)", server.connection_errors());
    return std::string{};
  };
  const fuzz::campaign_report report = fuzz::run_campaign(o);
  MESSAGE(report.summary());
  CHECK(report.failures.empty());
  CHECK(report.inputs > 0);
  CHECK(report.statuses.count(200) == 1);  // valid requests got through: the generator is not all noise
  const auto took = server.stop();
  CHECK_MESSAGE(took < 5s, "stopping took " << took.count() << " ms: a connection was not let go");
  CHECK(server.failure().empty());
  CHECK(server.connection_errors() == 0);
}
