// The `uni` executor: builds one replica's whole actor graph in this process (every shard a detached actor with
// its own threads, TP ranks of a stage sharing memory) and tears it down again.
#pragma once

#include "actorllm/engine_config.hpp"
#include "actorllm/proto/interfaces.hpp"
#include "actors/parallel_layout.hpp"
#include "model/model_config.hpp"
#include "text/tokenizer.hpp"

#include <caf/fwd.hpp>

#include <optional>
#include <vector>

namespace actorllm::actors {

/// The actors of one replica and the facts it was built with.
struct replica {
  proto::engine_actor engine;
  proto::scheduler_actor scheduler;
  proto::block_manager_actor block_manager;
  std::vector<proto::shard_actor> shards;  ///< stage-major: stage 0 ranks 0..tp-1, then stage 1, ...
  model::model_config model;
  std::vector<stage_range> stages;
  proto::kv_cache_config cache;
  int32_t max_model_len = 0;
  std::optional<text::tokenizer> tokenizer;
};

/// Checks `config` against the model's config.json (TP split of the heads, pipeline layout, scheduler limits)
/// before any weight is read, then spawns the shards, loads them in parallel, sizes the KV cache through the block
/// manager, and spawns the scheduler and the engine. Throws actorllm::error (invalid_config, load_failed) naming
/// the problem; actors spawned before a failure are stopped again.
replica build_uni_replica(caf::actor_system& sys, const engine_config& config);

/// Aborts what still runs, waits for the pipeline to drain, and stops every actor of `r` (the actor system's
/// destructor then joins their threads).
void stop_replica(caf::actor_system& sys, replica& r);

}  // namespace actorllm::actors
