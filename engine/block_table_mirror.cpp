// The shards' block tables, mirrored on the scheduler's side.
#include "engine/block_table_mirror.hpp"

#include <algorithm>

namespace actorllm::engine {

table_delta block_table_mirror::update(seq_id seq, std::span<const block_id> table) {
  table_delta out;
  auto [it, inserted] = tables_.try_emplace(seq);
  std::vector<block_id>& held = it->second;
  const bool extends = !inserted && held.size() <= table.size() && std::equal(held.begin(), held.end(), table.begin());
  if (extends) {
    out.blocks.assign(table.begin() + static_cast<std::ptrdiff_t>(held.size()), table.end());
    held.insert(held.end(), out.blocks.begin(), out.blocks.end());
  } else {
    out.new_table = true;
    out.blocks.assign(table.begin(), table.end());
    held = out.blocks;
  }
  return out;
}

void block_table_mirror::forget(seq_id seq) {
  if (tables_.erase(seq) > 0)
    dropped_.push_back(seq);
}

std::vector<seq_id> block_table_mirror::take_dropped() {
  std::vector<seq_id> out = std::move(dropped_);
  dropped_.clear();
  return out;
}

const std::vector<block_id>* block_table_mirror::table(seq_id seq) const {
  auto it = tables_.find(seq);
  return it == tables_.end() ? nullptr : &it->second;
}

}  // namespace actorllm::engine
