// The LoRA adapters one shard holds on its device (vLLM's LoRA manager): max_loras slots in every adapted Linear's
// lora_stack, filled on demand from the adapters a step names (least recently used slot first), with the parsed
// adapters kept in host memory for max_cpu_loras of them, so that an adapter coming back skips the disk.
#pragma once

#include "kernels/backend.hpp"
#include "model/forward_batch.hpp"
#include "model/layer_weights.hpp"
#include "model/lora_adapter.hpp"
#include "model/model_config.hpp"
#include "model/weight_table.hpp"

#include <cstdint>
#include <list>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

namespace actorllm::model {

/// vLLM's --max-loras, --max-lora-rank and --max-cpu-loras.
struct lora_limits {
  int32_t max_loras = 0;       ///< device slots: adapters one step may apply; 0: LoRA off
  int32_t max_lora_rank = 16;  ///< the slots' rank: larger adapters are refused, smaller ones zero-padded
  int32_t max_cpu_loras = 0;   ///< parsed adapters kept in host memory; below max_loras: max_loras
};

/// Where a step's adapter lives: its id (forward_batch's batch_sequence::lora_id) and its PEFT directory.
struct lora_source {
  int32_t id = 0;
  std::string path;
};

/// The device slots of one shard's adapters.
class lora_slots {
 public:
  /// Allocates zeroed stacks of limits.max_loras slots in the `lora` members of `layers` (the shard's layers, from
  /// shard.layer_begin) for every Linear a layer has (not the MLP of a MoE layer). `shard` must be resolved
  /// (layer_end set).
  lora_slots(backend& be, const model_config& cfg, const shard_spec& shard, const lora_limits& limits,
             std::vector<layer_weights>& layers);

  /// Each sequence of `batch`'s slot (-1 for lora_id 0), after loading every adapter it names that no slot holds
  /// into a slot no sequence of this batch uses (the least recently used). `sources` names the path of every id in
  /// the batch. Throws model_error when the batch names more adapters than there are slots, an id `sources` lacks,
  /// or an adapter that cannot be loaded (the message names it).
  std::vector<int32_t> assign(const forward_batch& batch, std::span<const lora_source> sources);

  /// The slots' rank (limits.max_lora_rank).
  int64_t max_lora_rank() const { return limits_.max_lora_rank; }
  /// Device bytes of the stacks.
  size_t device_bytes() const { return device_bytes_; }
  /// Adapters read from disk so far (a host-cache hit does not count); for tests.
  uint64_t disk_loads() const { return disk_loads_; }

 private:
  std::shared_ptr<const lora_adapter> adapter(const lora_source& source);
  void fill_slot(int32_t slot, const lora_adapter& adapter);

  backend& be_;
  model_config cfg_;
  shard_spec shard_;
  lora_limits limits_;
  std::vector<layer_weights>& layers_;
  std::vector<int32_t> slot_ids_;    // the adapter id each slot holds (0: none)
  std::vector<uint64_t> slot_used_;  // the assign() call that last used each slot
  uint64_t tick_ = 0;
  std::list<std::pair<int32_t, std::shared_ptr<const lora_adapter>>> host_;  // most recently used first
  size_t device_bytes_ = 0;
  uint64_t disk_loads_ = 0;
};

}  // namespace actorllm::model
