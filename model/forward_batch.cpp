// One step's input to the model, flattened over sequences.
#include "model/forward_batch.hpp"

#include <fmt/format.h>

namespace actorllm::model {

void forward_batch::add_sequence(std::span<const int32_t> new_tokens, int32_t start_pos,
                                 std::vector<int32_t> block_table, bool sample_last) {
  batch_sequence seq;
  seq.query_begin = static_cast<int32_t>(tokens.size());
  seq.n_query = static_cast<int32_t>(new_tokens.size());
  seq.block_table = std::move(block_table);
  for (size_t i = 0; i < new_tokens.size(); ++i) {
    tokens.push_back(new_tokens[i]);
    positions.push_back(start_pos + static_cast<int32_t>(i));
  }
  if (sample_last && seq.n_query > 0)
    sample_rows.push_back(seq.query_begin + seq.n_query - 1);
  sequences.push_back(std::move(seq));
}

std::string forward_batch::validate(int64_t block_size, int64_t n_blocks) const {
  if (positions.size() != tokens.size())
    return fmt::format("{} positions for {} tokens", positions.size(), tokens.size());
  int64_t next_row = 0;
  for (size_t s = 0; s < sequences.size(); ++s) {
    const auto& seq = sequences[s];
    if (seq.query_begin != next_row || seq.n_query <= 0)
      return fmt::format("sequence {} covers rows [{}, +{}) but the next row is {}", s, seq.query_begin, seq.n_query,
                         next_row);
    next_row += seq.n_query;
    if (next_row > n_tokens())
      return fmt::format("sequence {} runs past the {} tokens of the batch", s, n_tokens());
    for (int32_t b : seq.block_table)
      if (b < 0 || b >= n_blocks)
        return fmt::format("sequence {} uses block {} outside the cache's {} blocks", s, b, n_blocks);
    for (int32_t r = seq.query_begin; r < seq.query_begin + seq.n_query; ++r) {
      int64_t pos = positions[static_cast<size_t>(r)];
      if (pos < 0 || pos / block_size >= static_cast<int64_t>(seq.block_table.size()))
        return fmt::format("row {} of sequence {} has position {} beyond its {} blocks", r, s, pos,
                           seq.block_table.size());
    }
  }
  if (next_row != n_tokens())
    return fmt::format("sequences cover {} rows of a {}-token batch", next_row, n_tokens());
  for (int32_t r : sample_rows)
    if (r < 0 || r >= n_tokens())
      return fmt::format("sample row {} outside the batch of {} tokens", r, n_tokens());
  return {};
}

}  // namespace actorllm::model
