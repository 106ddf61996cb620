// The choice between NCCL and the host-staged collective.
#include "comm/device_transport_choice.hpp"

#include <fmt/format.h>

#include <map>

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

}  // namespace actorllm::comm
