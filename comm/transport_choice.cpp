// The transport choices: NCCL or host-staged for a GPU group, shared memory or Gloo for a host group, the path of one
// device all-reduce.
#include "comm/transport_choice.hpp"

#include <fmt/format.h>
#include <cstdlib>
#include <map>
#include <string_view>

namespace actorllm::comm {

std::optional<nccl_mode> parse_nccl_mode(const char* value) {
  if (value == nullptr)
    return nccl_mode::automatic;
  const std::string_view v{value};
  if (v.empty() || v == "auto")
    return nccl_mode::automatic;
  if (v == "1")
    return nccl_mode::required;
  if (v == "0")
    return nccl_mode::off;
  return std::nullopt;
}

device_transport_choice choose_device_transport(std::span<const rank_device> ranks, nccl_mode mode) {
  device_transport_choice out;
  // Host-staged, for `why`; an error instead when NCCL was required.
  auto staged = [&](std::string why) {
    out.transport = device_transport::host_staged;
    if (mode == nccl_mode::required)
      out.error = fmt::format("NCCL was required (ACTORLLM_NCCL=1) but cannot be used: {}", why);
    out.reason = std::move(why);
    return out;
  };
  if (mode == nccl_mode::off)
    return staged("NCCL is turned off (ACTORLLM_NCCL=0)");
  if (ranks.size() < 2)
    return staged("a group of one rank has nothing to communicate");
  std::map<std::string_view, size_t> first_rank;  // identity -> the first rank on it
  for (size_t r = 0; r < ranks.size(); ++r) {
    if (ranks[r].identity.empty())
      return staged(fmt::format("rank {} is not on a GPU", r));
    if (!ranks[r].nccl)
      return staged(fmt::format("rank {}'s build has no NCCL", r));
    auto [it, fresh] = first_rank.emplace(ranks[r].identity, r);
    if (!fresh)
      return staged(fmt::format("ranks {} and {} share the GPU {} (NCCL needs a GPU per rank)", it->second, r,
                                ranks[r].identity));
  }
  out.transport = device_transport::nccl;
  out.reason = fmt::format("{} ranks on {} distinct GPUs", ranks.size(), ranks.size());
  return out;
}

bool shm_collective_allowed() {
  const char* env = std::getenv("ACTORLLM_SHM_COLLECTIVE");
  if (env == nullptr)
    return true;
  const std::string_view v{env};
  return v != "0" && v != "off" && v != "false";
}

}  // namespace actorllm::comm

namespace actorllm {

const char* to_string(all_reduce_path p) {
  switch (p) {
    case all_reduce_path::identity:
      return "identity";
    case all_reduce_path::custom_one_shot:
      return "custom one-shot";
    case all_reduce_path::custom_two_shot:
      return "custom two-shot";
    case all_reduce_path::nccl:
      return "nccl";
    case all_reduce_path::host_staged:
      return "host-staged";
  }
  return "?";
}

std::string custom_all_reduce_refusal(const all_reduce_topology& group, const all_reduce_message& msg,
                                      const all_reduce_limits& limits) {
  if (group.world_size <= 1)
    return {};
  if (group.world_size > limits.custom_max_ranks)
    return fmt::format("{} ranks: the custom all-reduce serves at most {}", group.world_size, limits.custom_max_ranks);
  if (!group.single_node)
    return "the ranks span nodes (CUDA IPC maps memory within one node)";
  if (!group.all_pairs_ipc)
    return "some pair of ranks cannot map each other's memory (no peer access)";
  if (group.world_size > 2 && !group.fully_connected)
    return fmt::format("{} ranks without NVLink between every pair (over PCIe only 2 ranks take the custom path)",
                       group.world_size);
  if (group.shared_device && !limits.custom_on_shared_device)
    return "ranks share a device (their kernels are time-sliced: the custom path only when asked)";
  if (msg.type != dtype::f32 && msg.type != dtype::bf16)
    return fmt::format("{} tensors: the custom kernels sum f32 and bf16", dtype_name(msg.type));
  if (msg.bytes >= limits.custom_max_bytes)
    return fmt::format("{} bytes: the custom path takes messages below {}", msg.bytes, limits.custom_max_bytes);
  if (msg.bytes > msg.staging_capacity)
    return fmt::format("{} bytes: larger than the {}-byte IPC buffer", msg.bytes, msg.staging_capacity);
  if (msg.address % custom_all_reduce_alignment != 0)
    return fmt::format("the data is not {}-byte aligned", custom_all_reduce_alignment);
  return {};
}

all_reduce_path custom_all_reduce_shot(int world_size, size_t bytes, const all_reduce_limits& limits) {
  if (world_size <= 2)
    return all_reduce_path::custom_one_shot;
  const size_t one_shot_max = world_size <= 4 ? limits.one_shot_max_bytes_4 : limits.one_shot_max_bytes_8;
  return bytes < one_shot_max ? all_reduce_path::custom_one_shot : all_reduce_path::custom_two_shot;
}

all_reduce_path choose_all_reduce(const all_reduce_topology& group, const all_reduce_message& msg,
                                  const all_reduce_limits& limits) {
  if (group.world_size <= 1)
    return all_reduce_path::identity;
  if (custom_all_reduce_refusal(group, msg, limits).empty())
    return custom_all_reduce_shot(group.world_size, msg.bytes, limits);
  // NCCL refuses two ranks on one device; everything else it serves (within a node over P2P/SHM, across nodes over
  // the network).
  return group.shared_device ? all_reduce_path::host_staged : all_reduce_path::nccl;
}

}  // namespace actorllm
