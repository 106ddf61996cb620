// The in-process executor.
#include "actors/executors/uni_executor.hpp"

#include "actors/runtime/shard_actor.hpp"
#include "comm/shared_memory_collective.hpp"
#include "util/log.hpp"

#include <fmt/format.h>

#include <algorithm>

namespace actorllm::actors {

replica build_uni_replica(caf::actor_system& sys, const engine_config& config, const replica_slot& slot) {
  replica_plan plan = plan_replica(config, slot);
  replica& r = plan.r;
  const int32_t tp = config.tensor_parallel_size;
  const int32_t pp = config.pipeline_parallel_size;
  log::info("executor",
            "{}uni executor: {} stage(s) x {} tp rank(s) of {} (layers per stage: {}), {} kernel thread(s) "
            "per shard{}{}",
            replica_prefix(r.dp_rank, r.dp_size), pp, tp, config.model, describe_stages(r.stages),
            plan.threads_per_shard,
            plan.device == device_kind::cuda && plan.share.local_replicas > 1
                ? fmt::format(", GPUs from rank {} on", plan.share.device_offset)
                : std::string{},
            plan.lockstep ? fmt::format(", expert-parallel ranks {}..{} of {}", r.dp_rank * tp, r.dp_rank * tp + tp - 1,
                                        slot.expert_group->size())
                          : std::string{});

  // Shards, last stage first so that each one is spawned knowing its successor. Under prefill context parallelism
  // a stage has pcp copies of its TP group, copy-major, sharing one group (model::shard_spec::group_rank).
  const int32_t pcp = std::max(1, config.prefill_context_parallel_size);
  const int32_t per_stage = tp * pcp;
  r.shards.resize(static_cast<size_t>(per_stage * pp));
  for (int32_t s = pp - 1; s >= 0; --s) {
    // A lockstep set's TP groups can be aborted like its EP group: its replicas fail and restart as one.
    std::shared_ptr<comm::shared_memory_group> group;
    if (per_stage > 1)
      group = slot.expert_group ? std::make_shared<comm::shared_memory_group>(
                                      tp, fmt::format("the tensor-parallel group of replica {}", slot.dp_rank))
                                : std::make_shared<comm::shared_memory_group>(per_stage);
    for (int32_t index = 0; index < per_stage; ++index) {
      proto::shard_assignment a = make_shard_assignment(config, plan, s, index);
      if (s + 1 < pp)
        a.next = r.shards[static_cast<size_t>((s + 1) * per_stage + index)];
      shard_args args = shard_args_of(std::move(a));
      args.group = group;
      args.expert_group = slot.expert_group;
      r.shards[static_cast<size_t>(s * per_stage + index)] = spawn_shard(sys, std::move(args));
    }
  }
  finish_replica(sys, config, plan);
  return std::move(plan.r);
}

}  // namespace actorllm::actors
