// The TP collective over a shared-memory segment: ranks as threads (the segment works within a process too) give
// sums bit-identical to shared_memory_collective's, in pieces when larger than a slot; gathers are exact; a rank
// that cannot map the segment makes every rank fall back alike; a peer that never calls fails the others within
// the timeout; and between forked processes, a peer that exits fails the survivor at once.
#include "comm/interprocess_collective.hpp"
#include "collective_test_inputs.hpp"
#include "comm/comm_error.hpp"
#include "comm/memory_store.hpp"
#include "comm/shared_memory_collective.hpp"
#include "process_test_support.hpp"
#include "rank_threads.hpp"
#include "support/test_paths.hpp"

#include <doctest/doctest.h>
#include <sys/wait.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

using namespace actorllm;
using namespace std::chrono_literals;

namespace {

using test::random_inputs;

/// Runs body(collective) on `n` threads, each rank of group `name`; collects what each rank's try_create gave
/// (null or not) and rethrows the first exception after every thread has finished.
template <class F>
std::vector<bool> run_ranks(comm::rendezvous_store& store, const std::string& name, int n,
                            comm::interprocess_options options, F&& body) {
  std::vector<char> created(static_cast<size_t>(n), 0);
  test::run_rank_threads(n, [&](int r) {
    auto c = comm::interprocess_collective::try_create(store, name, r, n, options);
    created[static_cast<size_t>(r)] = c != nullptr;
    if (c)
      body(*c);
  });
  return {created.begin(), created.end()};
}

/// A store that shows one rank a segment name nobody created, as if that rank lived on another host.
class elsewhere_store final : public comm::rendezvous_store {
 public:
  explicit elsewhere_store(comm::rendezvous_store& inner) : inner_(inner) {}
  void set(const std::string& key, const std::vector<char>& value) override { inner_.set(key, value); }
  std::vector<char> get(const std::string& key, std::chrono::milliseconds timeout) override {
    auto value = inner_.get(key, timeout);
    if (key.ends_with("/segment")) {
      const std::string missing = "/actorllm-test-no-such-segment";
      return {missing.begin(), missing.end()};
    }
    return value;
  }

 private:
  comm::rendezvous_store& inner_;
};

}  // namespace

TEST_CASE("interprocess all_reduce_sum equals shared_memory_collective's bit for bit, in pieces too [asan]") {
  for (int n_rank : {2, 3, 4}) {
    for (int64_t n : {int64_t{1}, int64_t{2048}, int64_t{2500}}) {
      CAPTURE(n_rank);
      CAPTURE(n);
      const auto inputs = random_inputs(n_rank, n, static_cast<uint32_t>(n_rank * 1000 + n));

      auto reference = inputs;
      auto shared = std::make_shared<comm::shared_memory_group>(n_rank);
      test::run_rank_threads(n_rank, [&](int r) {
        comm::shared_memory_collective c{shared, r};
        c.all_reduce_sum(reference[static_cast<size_t>(r)].data(), n);
      });

      comm::memory_store store;
      auto outputs = inputs;
      comm::interprocess_options options;
      options.capacity_floats = 1000;  // 2500 floats go in three pieces
      const auto created = run_ranks(store, "sum", n_rank, options, [&](comm::interprocess_collective& c) {
        auto& v = outputs[static_cast<size_t>(c.rank())];
        for (int repeat = 0; repeat < 3; ++repeat) {  // both slot parities, several times over
          v = inputs[static_cast<size_t>(c.rank())];
          c.all_reduce_sum(v.data(), n);
        }
      });
      for (int r = 0; r < n_rank; ++r) {
        CHECK(created[static_cast<size_t>(r)]);
        CHECK(outputs[static_cast<size_t>(r)] == reference[0]);
      }
    }
  }
}

TEST_CASE("interprocess all_gather concatenates in rank order, in pieces and in place [asan]") {
  const int n_rank = 3;
  const int64_t per_rank = 700;
  const auto inputs = random_inputs(n_rank, per_rank, 7);
  std::vector<float> expected;
  for (const auto& v : inputs)
    expected.insert(expected.end(), v.begin(), v.end());

  comm::memory_store store;
  comm::interprocess_options options;
  options.capacity_floats = 256;
  std::vector<std::vector<float>> copied(n_rank), in_place(n_rank);
  run_ranks(store, "gather", n_rank, options, [&](comm::interprocess_collective& c) {
    const auto r = static_cast<size_t>(c.rank());
    copied[r].assign(expected.size(), 0.0f);
    c.all_gather(inputs[r].data(), per_rank, copied[r].data());
    in_place[r].assign(expected.size(), -1.0f);
    std::copy(inputs[r].begin(), inputs[r].end(), in_place[r].begin() + static_cast<ptrdiff_t>(r) * per_rank);
    c.all_gather(in_place[r].data() + r * per_rank, per_rank, in_place[r].data());
  });
  for (int r = 0; r < n_rank; ++r) {
    CHECK(copied[static_cast<size_t>(r)] == expected);
    CHECK(in_place[static_cast<size_t>(r)] == expected);
  }
}

TEST_CASE("interprocess group: when one rank cannot map the segment, every rank falls back alike") {
  comm::memory_store store;
  elsewhere_store elsewhere{store};
  std::vector<char> created(2, 1);
  std::thread other(
      [&] { created[1] = comm::interprocess_collective::try_create(elsewhere, "split", 1, 2) != nullptr; });
  created[0] = comm::interprocess_collective::try_create(store, "split", 0, 2) != nullptr;
  other.join();
  CHECK_FALSE(created[0]);
  CHECK_FALSE(created[1]);
}

TEST_CASE("interprocess group: a rank that never comes fails the rendezvous within the timeout") {
  comm::memory_store store;
  comm::interprocess_options options;
  options.timeout = 300ms;
  CHECK_THROWS_AS(comm::interprocess_collective::try_create(store, "alone", 1, 2, options), comm::comm_error);
}

TEST_CASE("interprocess all_reduce_sum: a peer that never calls fails this rank within the timeout, naming it") {
  comm::memory_store store;
  comm::interprocess_options options;
  options.timeout = 500ms;
  std::string message;
  std::chrono::steady_clock::duration waited{};
  std::unique_ptr<comm::interprocess_collective> idle;
  std::thread peer([&] { idle = comm::interprocess_collective::try_create(store, "idle", 1, 2, options); });
  auto c = comm::interprocess_collective::try_create(store, "idle", 0, 2, options);
  peer.join();
  REQUIRE(c != nullptr);
  std::vector<float> v(16, 1.0f);
  const auto start = std::chrono::steady_clock::now();
  try {
    c->all_reduce_sum(v.data(), 16);
  } catch (const comm::comm_error& e) {
    message = e.what();
  }
  waited = std::chrono::steady_clock::now() - start;
  INFO(message);
  CHECK(message.find("rank 1") != std::string::npos);
  CHECK(message.find("did not arrive within 500 ms") != std::string::npos);
  CHECK(waited < 5s);
  // The group stays broken, and the peer that comes late is told so instead of waiting in turn.
  CHECK_THROWS_AS(c->all_reduce_sum(v.data(), 16), comm::comm_error);
  CHECK_THROWS_WITH_AS(idle->all_reduce_sum(v.data(), 16), doctest::Contains("rank 0 gave up"), comm::comm_error);
}

TEST_CASE(
    "interprocess between processes: sums across forked children, then a peer that exits fails the survivor "
    "at once") {
  const auto dir = test::make_temp_dir("actorllm-shm-");
  const auto timeout = 30s;
  const auto statuses = test::run_children(2, [&](int rank) {
    test::file_store store{dir.string()};
    comm::interprocess_options options;
    options.timeout = timeout;
    auto c = comm::interprocess_collective::try_create(store, "procs", rank, 2, options);
    if (!c)
      return 4;
    std::vector<float> v(5000);
    for (size_t i = 0; i < v.size(); ++i)
      v[i] = static_cast<float>((rank + 1) * 3 + static_cast<int>(i % 1000));
    c->all_reduce_sum(v.data(), static_cast<int64_t>(v.size()));
    for (size_t i = 0; i < v.size(); ++i)
      if (v[i] != static_cast<float>(3 + 6 + 2 * static_cast<int>(i % 1000)))
        return 1;
    if (rank == 1)
      _exit(0);  // dies without a word; stays a zombie until rank 0 has been reaped
    const auto start = std::chrono::steady_clock::now();
    try {
      c->all_reduce_sum(v.data(), static_cast<int64_t>(v.size()));
    } catch (const comm::comm_error& e) {
      std::fprintf(stderr, "rank %d (expected): %s\n", rank, e.what());
      const bool named = std::string{e.what()}.find("exited") != std::string::npos;
      return named && std::chrono::steady_clock::now() - start < 5s ? 0 : 1;
    }
    return 1;  // the all-reduce "succeeded" with a dead peer
  });
  for (int rank = 0; rank < 2; ++rank) {
    CAPTURE(rank);
    CHECK_MESSAGE(statuses[static_cast<size_t>(rank)] == 0, test::describe_status(statuses[static_cast<size_t>(rank)]));
  }
  std::filesystem::remove_all(dir);
}
