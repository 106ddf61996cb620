// A shard: one tensor-parallel rank of one pipeline stage, as an actor. Its model_runner (a plain class) owns the
// backend (with its kernel threads), the weight slice, the slice of the paged KV cache and the sampler state, and
// runs each step; the actor only loads, answers the startup requests, pairs each plan (sent by the scheduler to every
// shard) with the previous stage's output (step_inbox), and moves hidden states and results on.
// It lives in a detached actor (its own thread), so loading and forward passes never block CAF's scheduler
// threads; the ranks of a stage meet in the TP collective inside the forward pass.
#pragma once

#include "actorllm/proto/interfaces.hpp"
#include "actorllm/proto/worker.hpp"
#include "comm/activation_link.hpp"
#include "comm/shared_memory_collective.hpp"
#include "kernels/backend.hpp"
#include "kernels/device.hpp"
#include "kernels/kv_cache_dtype.hpp"
#include "kernels/tensor.hpp"
#include "model/lora_slots.hpp"
#include "model/model_source.hpp"
#include "model/weight_table.hpp"

#include <caf/fwd.hpp>

#include <filesystem>
#include <functional>
#include <memory>
#include <vector>

namespace actorllm::runner {
struct graph_options;  // runner/model_runner.hpp
}  // namespace actorllm::runner

namespace actorllm::actors {

/// Everything a shard is built from: its assignment (every executor describes a shard the same way,
/// make_shard_assignment) and what its process adds: shared-memory groups in process, or builders of the collective
/// and stage links in a worker process.
struct shard_args {
  proto::shard_assignment assignment;
  // Read from the assignment by shard_args_of:
  model::shard_spec spec;                 ///< tp rank and size, layer range, context and expert parallelism
  model::load_options load;               ///< load format, weight dtype, quantization, seed
  device_kind device = device_kind::cpu;  ///< the backend the shard runs on (--device, resolved)
  model::lora_limits lora;                ///< --enable-lora's slots (max_loras 0: LoRA off)
  kv_cache_dtype_choice kv_dtype;         ///< --kv-cache-dtype (auto: the loaded model's dtype)
  /// The stage's TP group (one per stage, shared by its ranks); null when tp_size is 1.
  std::shared_ptr<comm::shared_memory_group> group;
  /// Lockstep expert parallelism: the EP group over every replica's TP ranks (spec.ep_size() ranks; this shard is
  /// spec.ep_rank()), whose MoE exchanges the shard runs also in idle steps; null: the TP group is the EP group.
  std::shared_ptr<comm::shared_memory_group> expert_group;
  /// Worker processes: builds the TP collective when the shard loads, on the shard's backend (NCCL between GPUs of
  /// their own, else shared memory or Gloo); null: shared memory through `group`.
  std::function<std::unique_ptr<tp_collective>(backend&)> make_collective;
  /// Worker processes under lockstep expert parallelism: builds the EP group's collective (after the TP one), whose
  /// ranks are every replica's shards of this stage; null: `expert_group`, or the TP group is the EP group.
  std::function<std::unique_ptr<tp_collective>(backend&)> make_expert_collective;
  /// Worker processes: build the links to the previous and next stage when the shard loads (after the
  /// collective), on the shard's backend (NCCL between GPUs of their own, else Gloo); null: hidden states travel
  /// inside stage_handoff.
  std::function<std::unique_ptr<activation_link>(backend&)> make_prev_link;
  std::function<std::unique_ptr<activation_link>(backend&)> make_next_link;
};

/// shard_args for `a`: its spec, load options, device, LoRA slots and KV cache dtype read from it. Throws
/// actorllm::error (invalid_config) for a load format, dtype, KV cache dtype or device this process cannot run (a
/// worker's binary, on another node, may lack a backend the engine's has; the CPU has no fp8 KV cache).
shard_args shard_args_of(proto::shard_assignment a);

/// What the shard's model_runner does about decode graphs (captured unless enforce_eager, where the shard can: a CUDA
/// backend, one stage, one TP rank, a dense model, for batches up to max_num_seqs and block tables of max_model_len).
runner::graph_options shard_graph_options(const proto::shard_assignment& a);

/// Spawns a shard in a detached actor. It loads nothing until asked (load_atom).
proto::shard_actor spawn_shard(caf::actor_system& sys, shard_args args);

}  // namespace actorllm::actors
