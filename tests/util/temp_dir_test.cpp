// make_temp_dir's directories go away when the process that made them exits, and only then.
#include <doctest/doctest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

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
