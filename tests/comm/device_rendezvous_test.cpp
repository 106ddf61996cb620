// How a device communicator's ranks meet over a rendezvous_store, with 4 threads on a memory_store standing in for
// the CAF-backed store: rank 0's unique id reaches every rank, keys carry the epoch so a re-created group never reads
// an aborted one's id, every rank learns every rank's device, and a rank that never comes is named.
#include "comm/device_rendezvous.hpp"
#include "comm/comm_error.hpp"
#include "comm/memory_store.hpp"
#include "rank_threads.hpp"

#include <doctest/doctest.h>

#include <atomic>
#include <string>
#include <vector>

using namespace actorllm;
using namespace std::chrono_literals;

namespace {
std::vector<char> bytes(const std::string& s) { return {s.begin(), s.end()}; }
}  // namespace

TEST_CASE("device group keys: the group's name, then the epoch") {
  CHECK(comm::device_group_key("r0g3/tp/1", 0) == "r0g3/tp/1/nccl/e0/");
  CHECK(comm::device_group_key("r0g3/tp/1", 7) == "r0g3/tp/1/nccl/e7/");
  CHECK(comm::device_group_key("r0g3/tp/1", 0) != comm::device_group_key("r0g3/tp/1", 1));
  CHECK(comm::device_group_key("a/tp/1", 0) != comm::device_group_key("a/tp/10", 0));
}

TEST_CASE("unique id: rank 0 makes it once and all 4 ranks get the same bytes") {
  comm::memory_store store;
  const std::string key = comm::device_group_key("g", 0);
  std::atomic<int> made{0};
  std::vector<std::vector<char>> got(4);
  test::run_rank_threads(4, [&](int rank) {
    got[static_cast<size_t>(rank)] = comm::exchange_unique_id(
        store, key, rank,
        [&] {
          ++made;
          return bytes(std::string(128, 'x') + "rank0");
        },
        5000ms);
  });
  CHECK(made == 1);
  for (const auto& id : got)
    CHECK(id == got[0]);
  CHECK(got[0].size() == 133);
}

TEST_CASE("unique id: a re-created group (next epoch) gets its own id, never the aborted one's") {
  comm::memory_store store;
  std::vector<std::vector<char>> first(2), second(2);
  test::run_rank_threads(2, [&](int rank) {
    first[static_cast<size_t>(rank)] = comm::exchange_unique_id(
        store, comm::device_group_key("g", 0), rank, [] { return bytes("old"); }, 5000ms);
  });
  test::run_rank_threads(2, [&](int rank) {
    second[static_cast<size_t>(rank)] = comm::exchange_unique_id(
        store, comm::device_group_key("g", 1), rank, [] { return bytes("new"); }, 5000ms);
  });
  CHECK(first[1] == bytes("old"));
  CHECK(second[1] == bytes("new"));
}

TEST_CASE("unique id: without rank 0 the others fail naming the group and themselves") {
  comm::memory_store store;
  try {
    comm::exchange_unique_id(
        store, "grp/nccl/e0/", 2, [] { return bytes("never"); }, 50ms);
    FAIL("no error without rank 0");
  } catch (const comm::comm_error& e) {
    const std::string what = e.what();
    CAPTURE(what);
    CHECK(what.find("grp/nccl/e0/") != std::string::npos);
    CHECK(what.find("rank 2 never received rank 0's unique id") != std::string::npos);
  }
  CHECK_THROWS_AS(comm::exchange_unique_id(
                      store, "p/", 0, [] { return std::vector<char>{}; }, 50ms),
                  comm::comm_error);
}

TEST_CASE("rank devices: every one of 4 ranks learns the same list in rank order") {
  comm::memory_store store;
  const std::string key = comm::device_group_key("g", 0);
  std::vector<std::vector<comm::rank_device>> got(4);
  test::run_rank_threads(4, [&](int rank) {
    comm::rank_device mine{rank == 3 ? std::string{} : "host/0000:0" + std::to_string(rank) + ":00.0", rank != 1};
    got[static_cast<size_t>(rank)] = comm::exchange_rank_devices(store, key, rank, 4, mine, 5000ms);
  });
  for (const auto& list : got) {
    REQUIRE(list.size() == 4);
    CHECK(list[0].identity == "host/0000:00:00.0");
    CHECK(list[0].nccl);
    CHECK(list[1].identity == "host/0000:01:00.0");
    CHECK_FALSE(list[1].nccl);
    CHECK(list[3].identity.empty());  // a CPU rank
    CHECK(list[3].nccl);
  }
}

TEST_CASE("rank devices: a rank that never publishes is named") {
  comm::memory_store store;
  try {
    comm::exchange_rank_devices(store, "k/", 0, 2, comm::rank_device{"h/x", true}, 50ms);
    FAIL("no error for a missing rank");
  } catch (const comm::comm_error& e) {
    CHECK(std::string{e.what()}.find("rank 0 never heard which device rank 1 runs on") != std::string::npos);
  }
  CHECK_THROWS_AS(comm::exchange_rank_devices(store, "k/", 2, 2, {}, 50ms), comm::comm_error);
}
