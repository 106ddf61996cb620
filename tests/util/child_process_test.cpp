// child_process: a child that dies with its parent process lives as long as the process, not as long as the thread
// that started it (Linux's parent-death signal follows the forking thread), and reports how it ended.
#include "util/child_process.hpp"

#include <doctest/doctest.h>

#include <chrono>
#include <csignal>
#include <memory>
#include <thread>

using namespace actorllm;
using namespace std::chrono_literals;

TEST_CASE("a child started from a thread that has ended keeps running until killed, and reports the signal") {
  std::unique_ptr<util::child_process> child;
  std::thread starter{[&] {
    util::child_process::options o;
    o.program = "/bin/sleep";
    o.args = {"30"};
    child = std::make_unique<util::child_process>(o);
  }};
  starter.join();
  REQUIRE(child);
  // Had the ended thread forked it, the parent-death signal would have killed it by now.
  CHECK_FALSE(child->wait_for(300ms));
  CHECK(child->running());
  child->kill(SIGKILL);
  const auto status = child->wait_for(5s);
  REQUIRE(status);
  CHECK(*status == 128 + SIGKILL);
}

TEST_CASE("a child's exit status comes back, and a program that cannot be executed exits 127") {
  util::child_process::options o;
  o.program = "/bin/sh";
  o.args = {"-c", "exit 3"};
  util::child_process three{o};
  CHECK(three.wait_for(5s) == 3);
  o.program = "/nonexistent/program";
  o.args = {};
  util::child_process missing{o};
  CHECK(missing.wait_for(5s) == 127);
}
