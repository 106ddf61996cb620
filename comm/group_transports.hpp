// What a shard in a worker process builds for its communication, as comm/transport_choice decides: the collective
// of its stage's group (NCCL between GPUs of their own, else shared memory within a host, else Gloo) and the link of
// each pipeline hop (NCCL between GPUs, else Gloo over host memory). Ranks meet through a rendezvous store.
#pragma once

#include "comm/activation_link.hpp"
#include "comm/collective.hpp"
#include "comm/gloo_group.hpp"
#include "comm/rendezvous_store.hpp"
#include "kernels/backend.hpp"

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

namespace actorllm::comm {

/// The collective of group `name` (this rank `rank` of `size`, on `be`; `stage` for the log): NCCL when every rank
/// is on a GPU of its own with NCCL, else shared memory when every rank is on this host (unless
/// ACTORLLM_SHM_COLLECTIVE=0), else Gloo. Throws comm_error when ACTORLLM_NCCL is malformed, or is 1 and NCCL is
/// impossible (naming why), or a rendezvous times out.
/// `kind` names the group in the log ("TP", "EP").
std::unique_ptr<tp_collective> make_group_collective(rendezvous_store& store, const std::string& name, int rank,
                                                     int size, backend& be, const gloo_group_options& options,
                                                     int32_t stage, std::string_view kind = "TP");

/// The link of one pipeline hop (group `name`, this side `rank`: 0 sends, 1 receives): NCCL when both sides are on
/// GPUs of their own with NCCL (as for a TP group), else Gloo over host memory.
std::unique_ptr<activation_link> make_activation_link(rendezvous_store& store, const std::string& name, int rank,
                                                      backend& be, const gloo_group_options& options);

}  // namespace actorllm::comm
