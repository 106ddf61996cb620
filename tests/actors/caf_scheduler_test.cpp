// CAF's scheduler as a process that runs the model configures it (actors/runtime/caf_scheduler.hpp): the settings
// reach the actor system, and idle scheduler threads wait for messages instead of waking every 50 us to poll.
#include "actors/runtime/caf_scheduler.hpp"

#include <doctest/doctest.h>
#include <caf/all.hpp>

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <thread>

using namespace actorllm::actors;

namespace {

// This process's thread ids (/proc/self/task).
std::set<std::string> thread_ids() {
  std::set<std::string> ids;
  for (const auto& entry : std::filesystem::directory_iterator("/proc/self/task"))
    ids.insert(entry.path().filename().string());
  return ids;
}

// Context switches (voluntary and not) of the given threads so far; a thread that has ended counts nothing.
int64_t context_switches(const std::set<std::string>& ids) {
  int64_t total = 0;
  for (const std::string& id : ids) {
    std::ifstream status("/proc/self/task/" + id + "/status");
    for (std::string line; std::getline(status, line);)
      if (line.rfind("voluntary_ctxt_switches:", 0) == 0 || line.rfind("nonvoluntary_ctxt_switches:", 0) == 0)
        total += std::stoll(line.substr(line.find(':') + 1));
  }
  return total;
}

}  // namespace

TEST_CASE("caf scheduler: the thread count and the polling setting reach the configuration") {
  caf::actor_system_config cfg;
  configure_caf_scheduler(cfg, 3);
  CHECK(caf::get_or(cfg, "scheduler.max-threads", size_t{0}) == 3);
  CHECK(caf::get_or(cfg, "work-stealing.moderate-poll-attempts", size_t{500}) == 0);
}

TEST_CASE("caf scheduler: idle scheduler threads sleep between messages instead of polling") {
  const std::set<std::string> before = thread_ids();
  caf::actor_system_config cfg;
  configure_caf_scheduler(cfg, 2);
  caf::actor_system sys{cfg};
  std::set<std::string> created;
  for (const std::string& id : thread_ids())
    if (before.count(id) == 0)
      created.insert(id);
  REQUIRE_FALSE(created.empty());
  auto echo = sys.spawn([]() -> caf::behavior { return {[](int32_t x) { return x; }}; });
  caf::scoped_actor self{sys};
  auto ask = [&](int32_t i) {
    int32_t answer = -1;
    self->request(echo, std::chrono::seconds{10}, i)
        .receive([&](int32_t x) { answer = x; }, [&](caf::error&) { answer = -2; });
    return answer;
  };
  REQUIRE(ask(0) == 0);
  // A message every 5 ms for 200 ms, as a decode step's messages come: a thread that polled every 50 us (CAF's
  // default "moderate" phase, which such a rhythm never leaves) switched about 1,000-2,000 times in that window; one
  // that waits on its condition variable a few times a message.
  const int64_t start = context_switches(created);
  for (int32_t i = 1; i <= 40; ++i) {
    CHECK(ask(i) == i);
    std::this_thread::sleep_for(std::chrono::milliseconds{5});
  }
  const int64_t switches = context_switches(created) - start;
  MESSAGE("context switches of CAF's threads over 40 messages: ", switches);
  CHECK(switches < 600);
}
