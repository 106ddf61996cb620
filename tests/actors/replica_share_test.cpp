// A data-parallel replica's share of its node: its own devices (GPU ranks offset by the replicas before it) and
// its part of the kernel threads. Pure arithmetic over engine_config, no actors.
#include "actors/executors/replica.hpp"

#include <doctest/doctest.h>

using namespace actorllm;
using actors::replica_slot;
using actors::share_of;

namespace {

engine_config parallel(int32_t tp, int32_t pp, int32_t threads = 0) {
  engine_config c;
  c.tensor_parallel_size = tp;
  c.pipeline_parallel_size = pp;
  c.threads = threads;
  return c;
}

}  // namespace

TEST_CASE("one replica: every thread and the devices from 0") {
  const auto s = share_of(parallel(2, 2), replica_slot{}, 16);
  CHECK(s.local_replicas == 1);
  CHECK(s.local_index == 0);
  CHECK(s.device_offset == 0);
  CHECK(s.threads == 16);
}

TEST_CASE("dp 2 on 2 cores: each replica gets one kernel thread, replica 1's devices follow replica 0's") {
  const auto c = parallel(1, 1);
  const auto r0 = share_of(c, replica_slot{0, 2}, 2);
  const auto r1 = share_of(c, replica_slot{1, 2}, 2);
  CHECK(r0.threads == 1);
  CHECK(r1.threads == 1);
  CHECK(r0.device_offset == 0);
  CHECK(r1.device_offset == 1);
}

TEST_CASE("dp 2 × tp 2 × pp 2: replica r's GPU ranks start at r × 4, --num-threads is split, never below 1") {
  auto c = parallel(2, 2, 12);
  CHECK(share_of(c, replica_slot{0, 2}, 64).device_offset == 0);
  CHECK(share_of(c, replica_slot{1, 2}, 64).device_offset == 4);
  CHECK(share_of(c, replica_slot{1, 2}, 64).threads == 6);
  c.threads = 1;
  CHECK(share_of(c, replica_slot{1, 2}, 64).threads == 1);
}

TEST_CASE("--data-parallel-size-local: only the local replicas share the node, numbered from 0 on it") {
  auto c = parallel(2, 1);
  c.data_parallel_size = 4;
  c.data_parallel_size_local = 2;
  const auto r3 = share_of(c, replica_slot{3, 4}, 8);
  CHECK(r3.local_replicas == 2);
  CHECK(r3.local_index == 1);
  CHECK(r3.device_offset == 2);
  CHECK(r3.threads == 4);
  // More local replicas than replicas: capped.
  c.data_parallel_size_local = 9;
  CHECK(share_of(c, replica_slot{0, 4}, 8).local_replicas == 4);
}

TEST_CASE("external load balancing: rank R's process uses R's share of the node") {
  auto c = parallel(2, 1);
  c.data_parallel_size = 2;
  c.data_parallel_rank = 1;
  const auto s = share_of(c, replica_slot{1, 2}, 8);
  CHECK(s.device_offset == 2);
  CHECK(s.threads == 4);
}

TEST_CASE("replica_prefix names the replica only when there are several") {
  CHECK(actors::replica_prefix(0, 1).empty());
  CHECK(actors::replica_prefix(1, 2) == "replica 1: ");
}
