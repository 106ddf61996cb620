// The data plane between real processes: two forked children rendezvous through Gloo's FileStore in a temp dir,
// all-reduce 1 MiB and pass 1 MiB each way through a gloo_pipe; each exits 0 iff its results are right.
#include "comm/comm_error.hpp"
#include "comm/gloo_collective.hpp"
#include "comm/gloo_pipe.hpp"
#include "process_test_support.hpp"
#include "support/test_paths.hpp"

#include <doctest/doctest.h>
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

using test::file_store;
using test::run_children;

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

}  // namespace

TEST_CASE("gloo between processes: all-reduce and pipe of 1 MiB between two forked children") {
  const auto dir = test::make_temp_dir("gloo");
  const auto statuses = run_children(2, [&](int rank) { return run_rank(dir.string(), rank) ? 0 : 1; });
  for (int rank = 0; rank < 2; ++rank) {
    CAPTURE(rank);
    CHECK_MESSAGE(statuses[static_cast<size_t>(rank)] == 0, test::describe_status(statuses[static_cast<size_t>(rank)]));
  }
  std::filesystem::remove_all(dir);
}

TEST_CASE("gloo between processes: a rank that dies fails the survivor long before the timeout") {
  const auto dir = test::make_temp_dir("gloo");
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
  CHECK_MESSAGE(statuses[0] == 0, test::describe_status(statuses[0]));
  CHECK_MESSAGE(statuses[1] == 0, test::describe_status(statuses[1]));
  std::filesystem::remove_all(dir);
}
