// The all-reduce size rule: vLLM's thresholds (8 MiB, 512 KiB up to 4 ranks, 256 KiB up to 8, two ranks always
// one-shot), the conditions that send a message to NCCL or the host-staged path, and each refusal's reason.
#include "comm/transport_choice.hpp"

#include <doctest/doctest.h>

#include <string>

using namespace actorllm;

namespace {

constexpr size_t kib = 1024;
constexpr size_t mib = 1024 * 1024;

// An NVLink node of `world` GPUs, one rank per GPU.
all_reduce_topology nvlink_node(int world) {
  all_reduce_topology g;
  g.world_size = world;
  g.single_node = true;
  g.all_pairs_ipc = true;
  g.fully_connected = true;
  g.shared_device = false;
  return g;
}

// An aligned f32 message of `bytes` with a staging buffer of vLLM's max size.
all_reduce_message message(size_t bytes, dtype type = dtype::f32) { return {type, bytes, 0x7f0000000000, 8 * mib}; }

}  // namespace

TEST_CASE("all-reduce rule: one rank needs nothing") {
  CHECK(choose_all_reduce(nvlink_node(1), message(4 * kib)) == all_reduce_path::identity);
  CHECK(custom_all_reduce_refusal(nvlink_node(1), message(64 * mib)).empty());
}

TEST_CASE("all-reduce rule: two ranks take one-shot for every size below 8 MiB") {
  for (size_t bytes : {size_t{16}, size_t{4}, 256 * kib, 512 * kib, 4 * mib, 8 * mib - 16}) {
    CAPTURE(bytes);
    CHECK(choose_all_reduce(nvlink_node(2), message(bytes)) == all_reduce_path::custom_one_shot);
  }
  CHECK(choose_all_reduce(nvlink_node(2), message(8 * mib)) == all_reduce_path::nccl);
}

TEST_CASE("all-reduce rule: one-shot below 512 KiB up to 4 ranks, 256 KiB up to 8, two-shot above") {
  for (int world : {3, 4}) {
    CAPTURE(world);
    CHECK(choose_all_reduce(nvlink_node(world), message(512 * kib - 16)) == all_reduce_path::custom_one_shot);
    CHECK(choose_all_reduce(nvlink_node(world), message(512 * kib)) == all_reduce_path::custom_two_shot);
    CHECK(choose_all_reduce(nvlink_node(world), message(8 * mib - 16)) == all_reduce_path::custom_two_shot);
    CHECK(choose_all_reduce(nvlink_node(world), message(8 * mib)) == all_reduce_path::nccl);
  }
  for (int world : {5, 6, 7, 8}) {
    CAPTURE(world);
    CHECK(choose_all_reduce(nvlink_node(world), message(256 * kib - 16)) == all_reduce_path::custom_one_shot);
    CHECK(choose_all_reduce(nvlink_node(world), message(256 * kib)) == all_reduce_path::custom_two_shot);
    CHECK(choose_all_reduce(nvlink_node(world), message(300 * kib)) == all_reduce_path::custom_two_shot);
  }
}

TEST_CASE("all-reduce rule: more than 8 ranks, several nodes or no peer access go to NCCL, naming why") {
  CHECK(choose_all_reduce(nvlink_node(16), message(4 * kib)) == all_reduce_path::nccl);
  CHECK(custom_all_reduce_refusal(nvlink_node(16), message(4 * kib)).find("16 ranks") != std::string::npos);

  auto two_nodes = nvlink_node(4);
  two_nodes.single_node = false;
  CHECK(choose_all_reduce(two_nodes, message(4 * kib)) == all_reduce_path::nccl);
  CHECK(custom_all_reduce_refusal(two_nodes, message(4 * kib)).find("span nodes") != std::string::npos);

  auto no_p2p = nvlink_node(2);
  no_p2p.all_pairs_ipc = false;
  CHECK(choose_all_reduce(no_p2p, message(4 * kib)) == all_reduce_path::nccl);
  CHECK(custom_all_reduce_refusal(no_p2p, message(4 * kib)).find("peer access") != std::string::npos);
}

TEST_CASE("all-reduce rule: over PCIe only two ranks take the custom path") {
  auto pcie2 = nvlink_node(2);
  pcie2.fully_connected = false;
  CHECK(choose_all_reduce(pcie2, message(64 * kib)) == all_reduce_path::custom_one_shot);
  auto pcie4 = nvlink_node(4);
  pcie4.fully_connected = false;
  CHECK(choose_all_reduce(pcie4, message(64 * kib)) == all_reduce_path::nccl);
  CHECK(custom_all_reduce_refusal(pcie4, message(64 * kib)).find("NVLink") != std::string::npos);
}

TEST_CASE("all-reduce rule: ranks sharing a device take host-staged unless the custom path is asked for") {
  auto shared = nvlink_node(2);
  shared.shared_device = true;
  CHECK(choose_all_reduce(shared, message(64 * kib)) == all_reduce_path::host_staged);
  CHECK(custom_all_reduce_refusal(shared, message(64 * kib)).find("share a device") != std::string::npos);
  all_reduce_limits asked;
  asked.custom_on_shared_device = true;
  CHECK(choose_all_reduce(shared, message(64 * kib), asked) == all_reduce_path::custom_one_shot);
  // Too large for the custom path: NCCL would refuse the shared device, so host-staged, never NCCL.
  CHECK(choose_all_reduce(shared, message(16 * mib), asked) == all_reduce_path::host_staged);
}

TEST_CASE("all-reduce rule: dtype, alignment and the staging buffer's size") {
  const auto g = nvlink_node(2);
  CHECK(choose_all_reduce(g, message(4 * kib, dtype::bf16)) == all_reduce_path::custom_one_shot);
  CHECK(choose_all_reduce(g, message(4 * kib, dtype::f16)) == all_reduce_path::nccl);
  CHECK(custom_all_reduce_refusal(g, message(4 * kib, dtype::f16)).find("f16") != std::string::npos);

  auto unaligned = message(4 * kib);
  unaligned.address += 8;
  CHECK(choose_all_reduce(g, unaligned) == all_reduce_path::nccl);
  CHECK(custom_all_reduce_refusal(g, unaligned).find("16-byte aligned") != std::string::npos);

  // Odd sizes are served (the kernels take the tail element by element); only the start must be aligned.
  CHECK(choose_all_reduce(g, message(4 * 1001)) == all_reduce_path::custom_one_shot);
  CHECK(choose_all_reduce(g, message(2 * 7, dtype::bf16)) == all_reduce_path::custom_one_shot);

  auto small_buffer = message(64 * kib);
  small_buffer.staging_capacity = 32 * kib;
  CHECK(choose_all_reduce(g, small_buffer) == all_reduce_path::nccl);
  CHECK(custom_all_reduce_refusal(g, small_buffer).find("IPC buffer") != std::string::npos);
}

TEST_CASE("all-reduce rule: the thresholds are parameters") {
  all_reduce_limits small;
  small.custom_max_bytes = 1 * mib;
  small.one_shot_max_bytes_4 = 64 * kib;
  CHECK(choose_all_reduce(nvlink_node(4), message(32 * kib), small) == all_reduce_path::custom_one_shot);
  CHECK(choose_all_reduce(nvlink_node(4), message(64 * kib), small) == all_reduce_path::custom_two_shot);
  CHECK(choose_all_reduce(nvlink_node(4), message(1 * mib), small) == all_reduce_path::nccl);
  CHECK(std::string{to_string(all_reduce_path::custom_two_shot)} == "custom two-shot");
}
