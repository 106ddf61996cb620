// make_temp_dir's directories go away when the process that made them exits, and only then; those of a process killed
// by a signal are swept by a later test process.
#include <doctest/doctest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "support/test_paths.hpp"

namespace fs = std::filesystem;
using actorllm::test::make_temp_dir;

namespace {

// Runs `body` in a forked child that then leaves through exit() (static destructors run), and waits for it.
template <class F>
int in_child(F body) {
  const pid_t pid = ::fork();
  if (pid == 0) {
    body();
    std::exit(0);
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

}  // namespace

TEST_CASE("make_temp_dir: a child's directory is removed when the child exits, the parent's one survives it") {
  const fs::path parents = make_temp_dir("temp-dir-test");
  std::ofstream{parents / "kept.txt"} << "kept";
  const fs::path note = parents / "child_dir.txt";
  REQUIRE(in_child([&] {
            const fs::path childs = make_temp_dir("temp-dir-test-child");
            std::ofstream{childs / "file.txt"} << "x";
            std::ofstream{note} << childs.string();
          }) == 0);
  std::string child_dir;
  std::ifstream{note} >> child_dir;
  REQUIRE_FALSE(child_dir.empty());
  CHECK_FALSE(fs::exists(child_dir));       // the child made it and exited: gone
  CHECK(fs::exists(parents / "kept.txt"));  // the child inherited the parent's list but left its directory alone
}

TEST_CASE("make_temp_dir: every call gives a fresh empty directory") {
  const fs::path a = make_temp_dir("temp-dir-test");
  const fs::path b = make_temp_dir("temp-dir-test");
  CHECK(a != b);
  CHECK(fs::is_directory(a));
  CHECK(fs::is_empty(b));
}

TEST_CASE("sweep_stale_temp_dirs: removes what a dead maker left long ago, keeps a live maker's and a recent one") {
  const fs::path root = make_temp_dir("temp-dir-sweep");
  const pid_t dead = [] {  // a child that has exited and been reaped: its pid names no process (until reused)
    const pid_t pid = ::fork();
    if (pid == 0)
      ::_exit(0);
    int status = 0;
    ::waitpid(pid, &status, 0);
    return pid;
  }();
  const auto two_hours_ago = fs::file_time_type::clock::now() - std::chrono::hours{2};
  auto made = [&](const std::string& name, bool old) {
    const fs::path dir = root / name;
    fs::create_directories(dir / "inner");
    std::ofstream{dir / "inner" / "file.txt"} << "x";
    if (old)
      fs::last_write_time(dir, two_hours_ago);
    return dir;
  };
  const fs::path stale = made("actorllm-test-pwc-" + std::to_string(dead) + "-3", true);
  const fs::path stale_dashed = made("actorllm-test-actorllm-gloo--" + std::to_string(dead) + "-0", true);
  const fs::path recent = made("actorllm-test-pwc-" + std::to_string(dead) + "-4", false);
  const fs::path live = made("actorllm-test-pwc-" + std::to_string(::getpid()) + "-9", true);
  const fs::path foreign = made("other-tool-" + std::to_string(dead) + "-1", true);
  const fs::path no_pid = made("actorllm-test-pwc-x" + std::to_string(dead) + "-1", true);

  CHECK(actorllm::test::sweep_stale_temp_dirs(root, std::chrono::hours{1}) == 2);
  CHECK_FALSE(fs::exists(stale));
  CHECK_FALSE(fs::exists(stale_dashed));
  CHECK(fs::exists(recent));   // a dead maker, but changed within the hour
  CHECK(fs::exists(live));     // this process made it
  CHECK(fs::exists(foreign));  // not a make_temp_dir name
  CHECK(fs::exists(no_pid));
  CHECK(actorllm::test::sweep_stale_temp_dirs(root / "missing", std::chrono::hours{1}) == 0);
}

TEST_CASE("make_temp_dir: the name carries the tag, the prefix and this process's pid") {
  const fs::path dir = make_temp_dir("temp-dir-test");
  const std::string name = dir.filename().string();
  CHECK(name.rfind("actorllm-test-temp-dir-test-" + std::to_string(::getpid()) + "-", 0) == 0);
}
