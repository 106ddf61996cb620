// A step's per-token inputs on the backend, prepared once per step and read by every layer: token ids, positions,
// the cache slot of each new token, the per-sequence views of the block tables, and the rows to sample.
#pragma once

#include "kernels/backend.hpp"
#include "model/forward_batch.hpp"
#include "model/kv_cache.hpp"

#include <cstdint>
#include <span>

namespace actorllm::model {

/// What the layers of one step read (views into step_input_builder's buffers, valid until its next prepare()).
struct step_inputs {
  int64_t n_tokens = 0;
  tensor tokens;         ///< i32 [n_tokens] (read by the first stage)
  attention_batch attn;  ///< positions, slots, sequences and block tables
  tensor sample_rows;    ///< i32 [n_sample]: rows whose logits the last stage returns
  int64_t n_sample = 0;
  bool lora = false;  ///< some row applies a LoRA adapter: the layers run backend::lora_add with lora_slots
  tensor lora_slots;  ///< i32 [n_tokens]: each row's LoRA slot, -1 for the base model (set only when `lora`)
};

/// Builds step_inputs on one backend, reusing its device buffers from step to step (grown when a batch needs more).
class step_input_builder {
 public:
  explicit step_input_builder(backend& be) : be_(be) {}

  /// The inputs of `batch` for a cache of `shape`: with the plain layout slot[t] = block_table[pos / block_size] *
  /// block_size + pos % block_size; under decode context parallelism a row whose position another rank keeps gets
  /// slot -1 and an owned one block_table[pos / positions_per_block] * block_size + its local index % block_size
  /// (kv_shard_layout). The batch must have passed forward_batch::validate(shape.positions_per_block(), ...).
  /// `sequence_lora_slots`, when not empty, holds each sequence's LoRA slot (-1: none), given to every row of the
  /// sequence.
  const step_inputs& prepare(const forward_batch& batch, const kv_cache_shape& shape,
                             std::span<const int32_t> sequence_lora_slots = {});

 private:
  /// `t` with room for n elements of `type` (reallocated when smaller), as a 1-D view of exactly n.
  tensor sized(tensor& t, dtype type, int64_t n);

  backend& be_;
  step_inputs in_;
  tensor tokens_, positions_, slots_, seqs_, tables_, sample_rows_, lora_slots_;
  std::vector<int64_t> host_slots_;
  std::vector<int32_t> host_lora_slots_;
};

}  // namespace actorllm::model
