// Per-step inputs of the forward pass.
#include "model/step_inputs.hpp"

#include "util/check.hpp"

#include <algorithm>

namespace actorllm::model {

tensor step_input_builder::sized(tensor& t, dtype type, int64_t n) {
  if (t.empty() || t.numel() < n)
    t = be_.alloc(type, {std::max<int64_t>(n, 1) * 2});  // doubling keeps reallocations rare
  return t.slice_rows(0, n);
}

const step_inputs& step_input_builder::prepare(const forward_batch& batch, const kv_cache_shape& shape,
                                               std::span<const int32_t> sequence_lora_slots) {
  const int64_t n = batch.n_tokens();
  const int64_t block_size = shape.block_size, per_block = shape.positions_per_block();
  const kv_shard_layout& layout = shape.layout;
  in_.n_tokens = n;
  in_.attn.n_tokens = n;
  in_.attn.n_seqs = static_cast<int64_t>(batch.sequences.size());
  in_.attn.kv_layout = layout;

  host_slots_.resize(static_cast<size_t>(n));
  auto& host_seqs = in_.attn.host_seqs;
  auto& host_tables = in_.attn.host_block_tables;
  host_seqs.clear();
  host_tables.clear();
  for (const auto& seq : batch.sequences) {
    for (int32_t r = seq.query_begin; r < seq.query_begin + seq.n_query; ++r) {
      const int64_t pos = batch.positions[static_cast<size_t>(r)];
      host_slots_[static_cast<size_t>(r)] =
          !layout.owns(pos) ? -1
                            : static_cast<int64_t>(seq.block_table[static_cast<size_t>(pos / per_block)]) * block_size +
                                  layout.local_count(pos) % block_size;
    }
    host_seqs.insert(host_seqs.end(), {seq.query_begin, seq.n_query, static_cast<int32_t>(host_tables.size()),
                                       static_cast<int32_t>(seq.block_table.size())});
    host_tables.insert(host_tables.end(), seq.block_table.begin(), seq.block_table.end());
  }

  in_.tokens = sized(tokens_, dtype::i32, n);
  in_.attn.positions = sized(positions_, dtype::i32, n);
  in_.attn.slots = sized(slots_, dtype::i64, n);
  in_.attn.seqs = sized(seqs_, dtype::i32, static_cast<int64_t>(host_seqs.size()));
  in_.attn.block_tables = sized(tables_, dtype::i32, static_cast<int64_t>(host_tables.size()));
  in_.n_sample = static_cast<int64_t>(batch.sample_rows.size());
  in_.sample_rows = sized(sample_rows_, dtype::i32, in_.n_sample);

  auto upload = [&](const tensor& dst, const auto& host) {
    if (!host.empty())
      be_.upload(dst, host.data(), host.size() * sizeof(host[0]));
  };
  upload(in_.tokens, batch.tokens);
  upload(in_.attn.positions, batch.positions);
  upload(in_.attn.slots, host_slots_);
  upload(in_.attn.seqs, host_seqs);
  upload(in_.attn.block_tables, host_tables);
  upload(in_.sample_rows, batch.sample_rows);
  ACTORLLM_CHECK(sequence_lora_slots.empty() || sequence_lora_slots.size() == batch.sequences.size(),
                 "step_input_builder::prepare: one LoRA slot per sequence, or none");
  in_.lora = std::any_of(sequence_lora_slots.begin(), sequence_lora_slots.end(), [](int32_t s) { return s >= 0; });
  in_.lora_slots = tensor{};
  if (in_.lora) {
    host_lora_slots_.assign(static_cast<size_t>(n), -1);
    for (size_t i = 0; i < batch.sequences.size(); ++i) {
      const auto& seq = batch.sequences[i];
      std::fill_n(host_lora_slots_.begin() + seq.query_begin, seq.n_query, sequence_lora_slots[i]);
    }
    in_.lora_slots = sized(lora_slots_, dtype::i32, n);
    upload(in_.lora_slots, host_lora_slots_);
  }
  in_.attn.seqs = in_.attn.seqs.reshape({in_.attn.n_seqs, 4});
  if (split_.n_ranks <= 1) {
    in_.local_rows = n;
    in_.local_begin = 0;
    in_.local_count = n;
    in_.local_tokens = in_.tokens;
    in_.local_positions = in_.attn.positions;
    return in_;
  }
  const int64_t per_rank = (n + split_.n_ranks - 1) / split_.n_ranks;
  in_.local_rows = per_rank;
  in_.local_begin = std::min<int64_t>(n, split_.rank * per_rank);
  in_.local_count = std::min<int64_t>(n, in_.local_begin + per_rank) - in_.local_begin;
  host_local_tokens_.assign(static_cast<size_t>(per_rank), 0);
  host_local_positions_.assign(static_cast<size_t>(per_rank), 0);
  std::copy_n(batch.tokens.begin() + in_.local_begin, in_.local_count, host_local_tokens_.begin());
  std::copy_n(batch.positions.begin() + in_.local_begin, in_.local_count, host_local_positions_.begin());
  in_.local_tokens = sized(local_tokens_, dtype::i32, per_rank);
  in_.local_positions = sized(local_positions_, dtype::i32, per_rank);
  upload(in_.local_tokens, host_local_tokens_);
  upload(in_.local_positions, host_local_positions_);
  return in_;
}

}  // namespace actorllm::model
