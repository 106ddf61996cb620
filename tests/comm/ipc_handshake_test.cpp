// The IPC handshake of the custom all-reduce on threads with memory_store and a fake backend: 2, 4 and 8 ranks map
// each other's buffers (never their own), mismatched sizes and foreign records fail naming the rank and the field,
// a missing rank times out by name, a dead epoch's keys are never read, and every mapping is closed on destruction
// or when the handshake fails half-way.
#include "comm/ipc_handshake.hpp"

#include "comm/comm_error.hpp"
#include "comm/memory_store.hpp"
#include "fake_ipc_backend.hpp"

#include <doctest/doctest.h>

#include <memory>
#include <string>
#include <thread>
#include <vector>

using namespace actorllm;
using namespace actorllm::comm;
using namespace std::chrono_literals;

namespace {

// One rank's host "device" buffers.
struct rank_memory {
  std::vector<char> data;
  std::vector<char> signal;
  rank_memory(size_t data_bytes, size_t signal_bytes) : data(data_bytes), signal(signal_bytes) {}
};

// Runs the handshake on `ranks` (a subset of 0..world-1) as threads, each with its own fake backend; keeps each
// rank's result or error message.
struct group_run {
  int world;
  test::fake_ipc_registry registry;
  memory_store store;
  std::vector<std::unique_ptr<test::fake_ipc_backend>> backends;
  std::vector<std::unique_ptr<rank_memory>> memory;
  std::vector<std::unique_ptr<ipc_peer_buffers>> results;
  std::vector<std::string> errors;
  std::vector<int> opens_at_return;  // per rank: the mappings every rank had made when this rank's handshake returned

  explicit group_run(int world_size, size_t data_bytes = 4096, size_t signal_bytes = 512) : world(world_size) {
    for (int r = 0; r < world; ++r) {
      backends.push_back(std::make_unique<test::fake_ipc_backend>(registry, r, /*device=*/r));
      memory.push_back(std::make_unique<rank_memory>(data_bytes, signal_bytes));
    }
    results.resize(static_cast<size_t>(world));
    errors.resize(static_cast<size_t>(world));
    opens_at_return.resize(static_cast<size_t>(world));
  }

  ipc_handshake_config config(int r, uint64_t epoch = 1) const {
    ipc_handshake_config c;
    c.group = "tp0";
    c.epoch = epoch;
    c.rank = r;
    c.world_size = world;
    c.data = memory[static_cast<size_t>(r)]->data.data();
    c.data_bytes = memory[static_cast<size_t>(r)]->data.size();
    c.signal = memory[static_cast<size_t>(r)]->signal.data();
    c.signal_bytes = memory[static_cast<size_t>(r)]->signal.size();
    c.timeout = 5000ms;
    return c;
  }

  template <class Configure>
  void run(const std::vector<int>& ranks, Configure&& configure) {
    std::vector<std::thread> threads;
    for (int r : ranks)
      threads.emplace_back([&, r] {
        auto c = config(r);
        configure(c);
        try {
          results[static_cast<size_t>(r)] = ipc_handshake(store, *backends[static_cast<size_t>(r)], c);
        } catch (const comm_error& e) {
          errors[static_cast<size_t>(r)] = e.what();
        }
        std::lock_guard lock{registry.mutex};
        opens_at_return[static_cast<size_t>(r)] = registry.opens;
      });
    for (auto& t : threads)
      t.join();
  }
  // A record as rank r would publish it (this test's sizes), for a test to put in the store itself.
  ipc_rank_record record(int r, const std::string& group, uint64_t epoch) const {
    ipc_rank_record rec;
    rec.group = group;
    rec.epoch = epoch;
    rec.rank = r;
    rec.world_size = world;
    rec.data_bytes = memory[static_cast<size_t>(r)]->data.size();
    rec.signal_bytes = memory[static_cast<size_t>(r)]->signal.size();
    return rec;
  }
  void run_all() {
    std::vector<int> all;
    for (int r = 0; r < world; ++r)
      all.push_back(r);
    run(all, [](ipc_handshake_config&) {});
  }
};

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

}  // namespace

TEST_CASE("ipc handshake: 2, 4 and 8 ranks map every peer's buffers and never their own") {
  for (int world : {2, 4, 8}) {
    CAPTURE(world);
    group_run g(world);
    g.run_all();
    for (int r = 0; r < world; ++r) {
      CAPTURE(r);
      REQUIRE_MESSAGE(g.errors[static_cast<size_t>(r)].empty(), g.errors[static_cast<size_t>(r)]);
      const auto& bufs = *g.results[static_cast<size_t>(r)];
      CHECK(bufs.rank() == r);
      CHECK(bufs.size() == world);
      CHECK(bufs.data_bytes() == 4096);
      CHECK(bufs.signal_bytes() == 512);
      for (int q = 0; q < world; ++q) {
        CHECK(bufs.at(q).data == g.memory[static_cast<size_t>(q)]->data.data());
        CHECK(bufs.at(q).signal == g.memory[static_cast<size_t>(q)]->signal.data());
        CHECK(bufs.at(q).device_id == q);
      }
      CHECK_FALSE(bufs.any_shared_device());
      const auto& be = *g.backends[static_cast<size_t>(r)];
      CHECK_FALSE(be.opened_own);
      CHECK(be.opens == 2 * (world - 1));  // data and signal of each peer
      CHECK(be.closes == 0);
    }
  }
}

TEST_CASE("ipc handshake: every peer mapping is closed when the result is destroyed") {
  group_run g(4);
  g.run_all();
  for (int r = 0; r < 4; ++r) {
    CAPTURE(r);
    REQUIRE(g.results[static_cast<size_t>(r)] != nullptr);
    g.results[static_cast<size_t>(r)].reset();
    const auto& be = *g.backends[static_cast<size_t>(r)];
    CHECK(be.closes == 6);
    CHECK(be.open.empty());
    CHECK_FALSE(be.closed_unknown);
  }
}

TEST_CASE("ipc handshake: a different buffer size fails on every rank, naming the rank and the field") {
  group_run g(2);
  g.memory[1] = std::make_unique<rank_memory>(8192, 512);  // rank 1's data buffer is twice as large
  g.run_all();
  CHECK(g.results[0] == nullptr);
  CHECK(g.results[1] == nullptr);
  CHECK(contains(g.errors[0], "group 'tp0' (epoch 1), rank 0: rank 1 reports data_bytes = 8192, this rank has 4096"));
  CHECK(contains(g.errors[1], "rank 0 reports data_bytes = 4096, this rank has 8192"));
  // Nothing was mapped: a group that does not belong together opens no handle.
  CHECK(g.backends[0]->opens == 0);
  CHECK(g.backends[1]->opens == 0);

  group_run s(2);
  s.memory[0] = std::make_unique<rank_memory>(4096, 256);
  s.run_all();
  CHECK(contains(s.errors[1], "rank 0 reports signal_bytes = 256, this rank has 512"));
}

TEST_CASE("ipc handshake: a different world size or group name is named") {
  group_run g(2);
  g.run({0, 1}, [](ipc_handshake_config& c) {
    if (c.rank == 1)
      c.world_size = 3;
  });
  CHECK(contains(g.errors[0], "rank 1 reports world_size = 3, this rank has 2"));

  // A record of another group under this group's key (a misconfigured prefix).
  group_run h(2);
  const ipc_rank_record foreign = h.record(1, "tp1", 1);
  h.store.set(ipc_handshake_key("tp0", 1, 1), encode_ipc_record(foreign));
  h.run({0}, [](ipc_handshake_config&) {});
  CHECK(contains(h.errors[0], "rank 1 reports group = tp1, this rank has tp0"));
}

TEST_CASE("ipc handshake: a rank that never publishes times out, named") {
  group_run g(3);
  g.run({0, 1}, [](ipc_handshake_config& c) { c.timeout = 200ms; });
  for (int r : {0, 1}) {
    CAPTURE(r);
    CHECK(g.results[static_cast<size_t>(r)] == nullptr);
    CHECK(contains(g.errors[static_cast<size_t>(r)], "rank 2 did not publish its IPC buffers within 200 ms"));
    CHECK(contains(g.errors[static_cast<size_t>(r)], "tp0/ipc/1/rank2"));
  }
}

TEST_CASE("ipc handshake: a dead epoch's keys are never read") {
  group_run g(2);
  // Epoch 1 met with other sizes, then died; its records stay in the store.
  {
    ipc_rank_record stale;
    stale.group = "tp0";
    stale.epoch = 1;
    stale.world_size = 2;
    stale.data_bytes = 1024;
    stale.signal_bytes = 128;
    for (int r = 0; r < 2; ++r) {
      stale.rank = r;
      g.store.set(ipc_handshake_key("tp0", 1, r), encode_ipc_record(stale));
    }
  }
  // Epoch 2 with only rank 0 present waits for rank 1's epoch-2 key, rather than reading the stale one.
  g.run({0}, [](ipc_handshake_config& c) {
    c.epoch = 2;
    c.timeout = 100ms;
  });
  CHECK(contains(g.errors[0], "(epoch 2), rank 0: rank 1 did not publish"));
  // The group made again takes epoch 3 and meets in full, with its own sizes: neither epoch 1's records nor the
  // failed epoch 2's record and outcome of rank 0 are read.
  g.errors.assign(2, {});
  g.run({0, 1}, [](ipc_handshake_config& c) { c.epoch = 3; });
  CHECK(g.errors[0].empty());
  CHECK(g.errors[1].empty());
  REQUIRE(g.results[1] != nullptr);
  CHECK(g.results[1]->at(0).data == g.memory[0]->data.data());
}

TEST_CASE("ipc handshake: a failed open closes what was opened before, and fails every rank, naming it") {
  group_run g(4);
  g.backends[0]->fail_open_of_rank = 3;
  g.run_all();
  CHECK(g.results[0] == nullptr);
  CHECK(contains(g.errors[0], "rank 0: opening rank 3's IPC handles failed"));
  CHECK(g.backends[0]->opens == 4);  // ranks 1 and 2, data and signal
  CHECK(g.backends[0]->closes == 4);
  CHECK(g.backends[0]->open.empty());
  for (int r = 1; r < 4; ++r) {
    CAPTURE(r);
    CHECK(g.results[static_cast<size_t>(r)] == nullptr);
    CHECK(contains(g.errors[static_cast<size_t>(r)], "rank 0 could not join the group"));
    CHECK(contains(g.errors[static_cast<size_t>(r)], "opening rank 3's IPC handles failed"));
    CHECK(g.backends[static_cast<size_t>(r)]->open.empty());  // what it had mapped is closed again
  }
}

// The first GPU run: rank 0 returned from the handshake while rank 1 was still opening its handles, then failed and
// exited, and rank 1's cudaIpcOpenMemHandle of the freed memory said "invalid argument". No rank may return before
// every peer has mapped its buffers.
TEST_CASE("ipc handshake: no rank returns before every peer has mapped its buffers") {
  for (int world : {2, 4}) {
    CAPTURE(world);
    group_run g(world);
    g.backends[static_cast<size_t>(world - 1)]->open_delay = 50ms;  // the last rank maps slowly
    g.run_all();
    const int all_opens = 2 * world * (world - 1);
    for (int r = 0; r < world; ++r) {
      CAPTURE(r);
      REQUIRE_MESSAGE(g.errors[static_cast<size_t>(r)].empty(), g.errors[static_cast<size_t>(r)]);
      CHECK(g.opens_at_return[static_cast<size_t>(r)] == all_opens);
    }
  }
}

TEST_CASE("ipc handshake: a rank that maps but never reports is named after the timeout") {
  // Rank 1 publishes its record and maps, but its outcome never comes (the store drops it): rank 0 names it.
  group_run g(2);
  g.run({0}, [](ipc_handshake_config& c) { c.timeout = 300ms; });
  CHECK(contains(g.errors[0], "rank 1 did not publish its IPC buffers"));
  ipc_rank_record fake = g.record(1, "tp0", 7);
  fake.instance = 42;
  fake.data = g.backends[1]->export_handle(g.memory[1]->data.data());
  fake.signal = g.backends[1]->export_handle(g.memory[1]->signal.data());
  g.store.set(ipc_handshake_key("tp0", 7, 1), encode_ipc_record(fake));
  g.errors.assign(2, {});
  g.run({0}, [](ipc_handshake_config& c) {
    c.epoch = 7;
    c.timeout = 300ms;
  });
  CHECK(contains(g.errors[0], "rank 1 did not report mapping the group's buffers within 300 ms"));
  CHECK(contains(g.errors[0], ipc_outcome_key("tp0", 7, 1, 42)));
  CHECK(g.backends[0]->open.empty());
}

TEST_CASE("ipc handshake: a backend that cannot open its own process's handles refuses ranks of this process") {
  group_run g(2);
  for (auto& be : g.backends)
    be->allow_same_process = false;  // as CUDA: both ranks are threads of this test's process
  g.run_all();
  CHECK(contains(g.errors[0], "rank 1 runs in this process"));
  CHECK(contains(g.errors[1], "rank 0 runs in this process"));
  CHECK(g.backends[0]->opens == 0);
}

TEST_CASE("ipc handshake: another process publishing as the same rank is caught") {
  // A group of one keeps the case to the point: right after this rank published, another process (the store below
  // simulates it) publishes under the same rank's key; this rank must notice that the record is not its own.
  group_run g(1);
  struct impostor_store final : rendezvous_store {
    memory_store inner;
    std::string victim_key;
    std::vector<char> impostor;
    void set(const std::string& key, const std::vector<char>& value) override {
      inner.set(key, value);
      if (key == victim_key)
        inner.set(key, impostor);
    }
    std::vector<char> get(const std::string& key, std::chrono::milliseconds timeout) override {
      return inner.get(key, timeout);
    }
  } store;
  store.victim_key = ipc_handshake_key("tp0", 1, 0);
  ipc_rank_record other;
  other.group = "tp0";
  other.epoch = 1;
  other.rank = 0;
  other.world_size = 1;
  other.process_id = 4242;
  other.instance = 7;
  other.data_bytes = 4096;
  other.signal_bytes = 512;
  store.impostor = encode_ipc_record(other);
  std::string error;
  try {
    ipc_handshake(store, *g.backends[0], g.config(0));
  } catch (const comm_error& e) {
    error = e.what();
  }
  CHECK_MESSAGE(contains(error, "another process (pid 4242) published as rank 0 too"), error);
}

TEST_CASE("ipc handshake: records round-trip and corrupt bytes are refused") {
  ipc_rank_record r;
  r.group = "dp1-gen-abc/tp0";
  r.epoch = 0x0102030405060708ull;
  r.rank = 5;
  r.world_size = 8;
  r.device_id = 3;
  r.process_id = 123456;
  r.instance = 0xfeedfacecafebeefull;
  r.data_bytes = 8u << 20;
  r.signal_bytes = 6400;
  for (size_t i = 0; i < ipc_handle::size; ++i) {
    r.data.bytes[i] = static_cast<unsigned char>(i);
    r.signal.bytes[i] = static_cast<unsigned char>(255 - i);
  }
  const auto bytes = encode_ipc_record(r);
  const auto back = decode_ipc_record(bytes, "k");
  CHECK(back.group == r.group);
  CHECK(back.epoch == r.epoch);
  CHECK(back.rank == 5);
  CHECK(back.world_size == 8);
  CHECK(back.device_id == 3);
  CHECK(back.process_id == 123456);
  CHECK(back.instance == r.instance);
  CHECK(back.data_bytes == r.data_bytes);
  CHECK(back.signal_bytes == 6400);
  CHECK(back.data == r.data);
  CHECK(back.signal == r.signal);

  auto truncated = bytes;
  truncated.resize(bytes.size() - 1);
  CHECK_THROWS_WITH_AS(decode_ipc_record(truncated, "k"), doctest::Contains("truncated"), comm_error);
  auto longer = bytes;
  longer.push_back(0);
  CHECK_THROWS_WITH_AS(decode_ipc_record(longer, "k"), doctest::Contains("after its end"), comm_error);
  std::vector<char> other{'g', 'l', 'o', 'o'};
  CHECK_THROWS_WITH_AS(decode_ipc_record(other, "k"), doctest::Contains("not an IPC record"), comm_error);
}
