// The data plane between real processes: two forked children rendezvous through Gloo's FileStore in a temp dir,
// all-reduce 1 MiB and pass 1 MiB each way through a gloo_pipe; each exits 0 iff its results are right.
#include "comm/comm_error.hpp"
#include "comm/gloo_collective.hpp"
#include "comm/gloo_pipe.hpp"
#include "test_paths.hpp"

#include <doctest/doctest.h>
#include <gloo/rendezvous/file_store.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <vector>

using namespace actorllm;
using namespace std::chrono_literals;

namespace {

/// Our rendezvous_store over Gloo's FileStore (one file per key in a shared directory), for processes of one host.
class file_store final : public comm::rendezvous_store {
 public:
  explicit file_store(const std::string& dir) : store_(dir) {}
  void set(const std::string& key, const std::vector<char>& value) override { store_.set(file_name(key), value); }
  std::vector<char> get(const std::string& key, std::chrono::milliseconds timeout) override {
    try {
      store_.wait({file_name(key)}, timeout);
    } catch (const std::exception& e) {
      throw comm::comm_error("rendezvous: key '" + key + "' not set within " + std::to_string(timeout.count()) +
                             " ms: " + e.what());
    }
    return store_.get(file_name(key));
  }

 private:
  static std::string file_name(std::string key) {
    std::replace(key.begin(), key.end(), '/', '_');  // keys are file names in one directory
    return key;
  }
  gloo::rendezvous::FileStore store_;
};

constexpr int64_t n_floats = (1 << 20) / sizeof(float);  // 1 MiB

float value(int rank, int64_t i) { return static_cast<float>((rank + 1) * 3 + i % 1000); }

/// One rank's whole run; true iff every result is right. Runs in a forked child.
bool run_rank(const std::string& dir, int rank) {
  file_store store{dir};
  auto group = std::make_shared<comm::gloo_group>(store, "procs", rank, 2, comm::gloo_group_options{.timeout = 20s});
  comm::gloo_collective collective{group};
  std::vector<float> v(n_floats);
  for (int64_t i = 0; i < n_floats; ++i)
    v[static_cast<size_t>(i)] = value(rank, i);
  collective.all_reduce_sum(v.data(), n_floats);
  bool ok = true;
  for (int64_t i = 0; i < n_floats; ++i)
    ok = ok && v[static_cast<size_t>(i)] == value(0, i) + value(1, i);  // small integers: exact in any order

  comm::gloo_pipe pipe{group};
  const int peer = 1 - rank;
  std::vector<float> out(n_floats), in(n_floats);
  for (int64_t i = 0; i < n_floats; ++i)
    out[static_cast<size_t>(i)] = value(rank, i) * 2;
  pipe.send(peer, 1'000'000'007, out.data(), n_floats);
  pipe.recv(peer, 1'000'000'007, in.data(), n_floats);
  pipe.flush();
  for (int64_t i = 0; i < n_floats; ++i)
    ok = ok && in[static_cast<size_t>(i)] == value(peer, i) * 2;
  return ok;
}

/// Forks one child per rank (before any Gloo context exists in this process: Gloo starts a thread per device),
/// runs body(rank) in each and returns their exit statuses: body's result, 2 when it threw, 3 when it threw
/// something else, a signal when it hung past the alarm.
template <class F>
std::vector<int> run_children(int n_rank, F&& body) {
  std::vector<pid_t> children;
  for (int rank = 0; rank < n_rank; ++rank) {
    const pid_t pid = fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
      alarm(60);  // a hung child dies instead of hanging the test
      int code = 3;
      try {
        code = body(rank);
      } catch (const std::exception& e) {
        std::fprintf(stderr, "rank %d: %s\n", rank, e.what());
        code = 2;
      } catch (...) {
      }
      _exit(code);
    }
    children.push_back(pid);
  }
  std::vector<int> statuses;
  for (pid_t pid : children) {
    int status = 0;
    REQUIRE(waitpid(pid, &status, 0) == pid);
    statuses.push_back(status);
  }
  return statuses;
}

}  // namespace

TEST_CASE("gloo between processes: all-reduce and pipe of 1 MiB between two forked children") {
  const auto dir = test::make_temp_dir("actorllm-gloo-");
  const auto statuses = run_children(2, [&](int rank) { return run_rank(dir.string(), rank) ? 0 : 1; });
  for (int rank = 0; rank < 2; ++rank) {
    CAPTURE(rank);
    CHECK(WIFEXITED(statuses[static_cast<size_t>(rank)]));
    CHECK(WEXITSTATUS(statuses[static_cast<size_t>(rank)]) == 0);
  }
  std::filesystem::remove_all(dir);
}

TEST_CASE("gloo between processes: a rank that dies fails the survivor long before the timeout") {
  const auto dir = test::make_temp_dir("actorllm-gloo-");
  const auto timeout = 30s;
  const auto statuses = run_children(2, [&](int rank) {
    file_store store{dir.string()};
    const auto start = std::chrono::steady_clock::now();
    try {
      auto group =
          std::make_shared<comm::gloo_group>(store, "dying", rank, 2, comm::gloo_group_options{.timeout = timeout});
      comm::gloo_collective collective{group};
      std::vector<float> v(1000, 1.0f);
      collective.all_reduce_sum(v.data(), 1000);  // both connected and working
      if (rank == 1)
        _exit(0);  // then dies without a word: the OS closes its sockets
      collective.all_reduce_sum(v.data(), 1000);
    } catch (const comm::comm_error& e) {
      // The survivor learns from the closed connection, not from its timeout.
      std::fprintf(stderr, "rank %d (expected): %s\n", rank, e.what());
      return std::chrono::steady_clock::now() - start < timeout / 3 ? 0 : 1;
    }
    return 1;  // the all-reduce "succeeded" with a dead peer
  });
  CHECK(WIFEXITED(statuses[0]));
  CHECK(WEXITSTATUS(statuses[0]) == 0);
  CHECK(WIFEXITED(statuses[1]));
  CHECK(WEXITSTATUS(statuses[1]) == 0);
  std::filesystem::remove_all(dir);
}
