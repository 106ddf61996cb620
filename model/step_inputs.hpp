// A step's per-token inputs on the backend, prepared once per step and read by every layer: token ids, positions,
// the cache slot of each new token, the per-sequence views of the block tables, and the rows to sample.
#pragma once

#include "kernels/backend.hpp"
#include "model/forward_batch.hpp"
#include "model/kv_cache.hpp"

#include <cstdint>
#include <span>

namespace actorllm::model {

/// How a step's rows are split between the copies of a stage's TP group under prefill context parallelism: copy
/// `rank` of `n_ranks` runs the contiguous rows [rank × per_rank, rank × per_rank + count) of the batch through its
/// dense layers, per_rank = ceil(n_tokens / n_ranks) (the last copies may hold fewer, or none; their buffers keep
/// per_rank rows, the rest padding that no real row reads).
struct row_split {
  int32_t n_ranks = 1;
  int32_t rank = 0;
};

/// What the layers of one step read (views into step_input_builder's buffers, valid until its next prepare()).
struct step_inputs {
  int64_t n_tokens = 0;
  tensor tokens;         ///< i32 [n_tokens] (read by the first stage)
  attention_batch attn;  ///< positions, slots, sequences and block tables
  tensor sample_rows;    ///< i32 [n_sample]: rows whose logits the last stage returns
  int64_t n_sample = 0;
  bool lora = false;  ///< some row applies a LoRA adapter: the layers run backend::lora_add with lora_slots
  tensor lora_slots;  ///< i32 [n_tokens]: each row's LoRA slot, -1 for the base model (set only when `lora`)
  /// This copy's rows under prefill context parallelism (row_split): rows [local_begin, local_begin + local_count)
  /// of the batch, in buffers of local_rows rows (padded with token 0 at position 0). Without it: every row
  /// (local_rows = n_tokens) and local_tokens / local_positions are tokens / attn.positions.
  int64_t local_rows = 0;
  int64_t local_begin = 0;
  int64_t local_count = 0;
  tensor local_tokens;     ///< i32 [local_rows]
  tensor local_positions;  ///< i32 [local_rows]
};

/// Builds step_inputs on one backend, reusing its device buffers from step to step (grown when a batch needs more).
class step_input_builder {
 public:
  explicit step_input_builder(backend& be, row_split split = {}) : be_(be), split_(split) {}
  void set_row_split(row_split split) { split_ = split; }

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
  row_split split_;
  step_inputs in_;
  tensor tokens_, positions_, slots_, seqs_, tables_, sample_rows_, lora_slots_, local_tokens_, local_positions_;
  std::vector<int32_t> host_local_tokens_, host_local_positions_;
  std::vector<int64_t> host_slots_;
  std::vector<int32_t> host_lora_slots_;
};

}  // namespace actorllm::model
