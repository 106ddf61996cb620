// A shard: one tensor-parallel rank of one pipeline stage, as an actor. Its model_runner (a plain class) owns the
// backend (with its kernel threads), the weight slice, the slice of the paged KV cache and the sampler state, and
// runs each step; the actor only loads, answers the startup requests, pairs each plan (sent by the scheduler to every
// shard) with the previous stage's output (step_inbox), and moves hidden states and results on.
// It lives in a detached actor (its own thread), so loading and forward passes never block CAF's scheduler
// threads; the ranks of a stage meet in the TP collective inside the forward pass.
#pragma once

#include "actorllm/proto/interfaces.hpp"
#include "comm/shared_memory_collective.hpp"
#include "kernels/backend.hpp"
#include "kernels/device.hpp"
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

/// Carries hidden states between the same tp rank of two adjacent stages when they live in different processes
/// (the data plane): the plan reaches every shard from the scheduler in a CAF message, the floats never do.
class activation_link {
 public:
  virtual ~activation_link() = default;
  /// Sends step `step_id`'s hidden states (an f32 backend tensor) to the next stage.
  virtual void send(uint64_t step_id, const tensor& hidden) = 0;
  /// Receives step `step_id`'s hidden states from the previous stage into `hidden` (allocated by the receiver with
  /// the expected shape). Throws on timeout or a lost peer.
  virtual void recv(uint64_t step_id, const tensor& hidden) = 0;
  /// Whether send and recv take tensors on the shard's GPU (NCCL); false: host memory (Gloo).
  virtual bool takes_device_tensors() const { return false; }
  /// Throws when a transfer queued earlier failed (a device link learns of it after send/recv returned).
  virtual void raise_if_broken() {}
};

/// Everything a shard is built from.
struct shard_args {
  std::filesystem::path model_dir;
  model::shard_spec spec;  ///< tp rank and size, layer range
  int32_t stage = 0;
  model::load_options load;
  /// The stage's TP group (one per stage, shared by its ranks); null when tp_size is 1.
  std::shared_ptr<comm::shared_memory_group> group;
  /// Lockstep expert parallelism: the EP group over every replica's TP ranks (spec.ep_size() ranks; this shard is
  /// spec.ep_rank()), whose MoE exchanges the shard runs also in idle steps; null: the TP group is the EP group.
  std::shared_ptr<comm::shared_memory_group> expert_group;
  device_kind device = device_kind::cpu;  ///< the backend the shard runs on (--device)
  int32_t n_threads = 1;                  ///< kernel threads, this shard's thread included
  /// Added to the shard's rank (stage × tp + tp rank) when it picks its GPU: the first rank of its data-parallel
  /// replica among this node's devices (replica_share::device_offset), so that replicas get GPUs of their own.
  int32_t device_offset = 0;
  bool samples = false;  ///< tp rank 0 of the last stage: samples and returns tokens
  /// engine_config::enforce_eager: no decode graphs (model_runner's graph_options); else they are captured where the
  /// shard can (a CUDA backend, one stage, one TP rank, a dense model) for batches up to max_num_seqs.
  bool enforce_eager = false;
  int32_t max_num_seqs = 0;   ///< the engine's max_num_seqs (the largest decode graph)
  int32_t max_model_len = 0;  ///< the replica's context limit (the graphs' block-table width); 0: the model's
  model::lora_limits lora;    ///< --enable-lora's slots (max_loras 0: LoRA off)
  proto::shard_link next;     ///< the same tp rank of the next stage; null on the last stage
  /// Worker processes: builds the TP collective when the shard loads, on the shard's backend (NCCL between GPUs of
  /// their own, else shared memory or Gloo); null: shared memory through `group`.
  std::function<std::unique_ptr<tp_collective>(backend&)> make_collective;
  /// Worker processes: build the links to the previous and next stage when the shard loads (after the
  /// collective), on the shard's backend (NCCL between GPUs of their own, else Gloo); null: hidden states travel
  /// inside stage_handoff.
  std::function<std::unique_ptr<activation_link>(backend&)> make_prev_link;
  std::function<std::unique_ptr<activation_link>(backend&)> make_next_link;
};

/// What the shard's model_runner does about decode graphs, from its args.
runner::graph_options shard_graph_options(const shard_args& a);

/// Spawns a shard in a detached actor. It loads nothing until asked (load_atom).
proto::shard_actor spawn_shard(caf::actor_system& sys, shard_args args);

}  // namespace actorllm::actors
