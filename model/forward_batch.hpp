// One step's input to the model, flattened over sequences: the shape the scheduler feeds a shard.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace actorllm::model {

/// One sequence's part of a step: `n_query` consecutive rows of the flattened batch (a prefill chunk, or one decode
/// token), and the blocks of the paged KV cache that hold the sequence (block_table[i] holds positions
/// [i * block_size, (i + 1) * block_size)).
struct batch_sequence {
  int32_t query_begin = 0;
  int32_t n_query = 0;
  std::vector<int32_t> block_table;
  int32_t lora_id = 0;  ///< the LoRA adapter its rows apply; 0: none
};

/// A flattened batch: every token of every sequence scheduled in this step, with its absolute position.
struct forward_batch {
  std::vector<int32_t> tokens;     ///< [n_tokens] token ids (read by the first pipeline stage)
  std::vector<int32_t> positions;  ///< [n_tokens] absolute position of each token in its sequence
  std::vector<batch_sequence> sequences;
  std::vector<int32_t> sample_rows;  ///< rows whose logits the last stage returns, in this order

  int64_t n_tokens() const { return static_cast<int64_t>(tokens.size()); }

  /// Appends a sequence whose `tokens` occupy positions [start_pos, start_pos + tokens.size()). When `sample_last`,
  /// the last of them is a sampling row (a decode token, or the final chunk of a prefill).
  void add_sequence(std::span<const int32_t> new_tokens, int32_t start_pos, std::vector<int32_t> block_table,
                    bool sample_last);

  /// Empty when the batch is consistent with a cache of `n_blocks` blocks of `block_size` tokens; otherwise what is
  /// wrong (row counts, positions beyond a block table, block ids out of range, sample rows out of range).
  std::string validate(int64_t block_size, int64_t n_blocks) const;
};

}  // namespace actorllm::model
