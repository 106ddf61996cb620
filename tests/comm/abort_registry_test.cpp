// The failure path's registry of communicator aborts: each entry is aborted once with the reason, removed entries
// never, entries added after the abort at once; safe from several threads.
#include "comm/abort_registry.hpp"
#include "rank_threads.hpp"

#include <doctest/doctest.h>

#include <atomic>
#include <string>
#include <vector>

using actorllm::comm::abort_registry;

TEST_CASE("abort registry: every entry once, with the reason, removed ones never") {
  abort_registry reg;
  std::vector<std::string> seen;
  reg.add([&](const std::string& r) { seen.push_back("a:" + r); });
  const uint64_t gone = reg.add([&](const std::string& r) { seen.push_back("b:" + r); });
  reg.add([&](const std::string& r) { seen.push_back("c:" + r); });
  reg.remove(gone);
  reg.remove(12345);  // unknown: ignored
  CHECK(reg.size() == 2);
  CHECK_FALSE(reg.aborted());
  reg.abort_all("worker 1 is dead");
  CHECK(seen == std::vector<std::string>{"a:worker 1 is dead", "c:worker 1 is dead"});
  CHECK(reg.size() == 0);
  CHECK(reg.aborted());
  reg.abort_all("again");
  CHECK(seen.size() == 2);
}

TEST_CASE("abort registry: an entry added after the abort is aborted at once with the first reason") {
  abort_registry reg;
  reg.abort_all("engine gone");
  std::string got;
  reg.add([&](const std::string& r) { got = r; });
  CHECK(got == "engine gone");
  CHECK(reg.size() == 0);
}

TEST_CASE("abort registry: 4 threads adding while another aborts: each entry aborted exactly once") {
  abort_registry reg;
  constexpr int per_thread = 200;
  std::vector<std::atomic<int>> calls(4 * per_thread);
  actorllm::test::run_rank_threads(5, [&](int t) {
    if (t == 4) {
      reg.abort_all("stop");
      return;
    }
    for (int i = 0; i < per_thread; ++i)
      reg.add([&calls, k = t * per_thread + i](const std::string&) { ++calls[static_cast<size_t>(k)]; });
  });
  for (auto& c : calls)
    CHECK(c.load() == 1);
}
