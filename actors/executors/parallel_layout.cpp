// The pipeline split and the tensor-parallel head check.
#include "actors/executors/parallel_layout.hpp"

#include "model/model_error.hpp"
#include "model/weight_table.hpp"

#include <fmt/format.h>

#include <charconv>
#include <numeric>

namespace actorllm::actors {

layout_result split_layers(int64_t n_layer, int32_t pp_size, std::string_view partition) {
  if (pp_size < 1)
    return fmt::format("pipeline_parallel_size must be at least 1, got {}", pp_size);
  if (pp_size > n_layer)
    return fmt::format("pipeline_parallel_size {} is larger than the model's {} layers (num_hidden_layers)", pp_size,
                       n_layer);
  std::vector<int64_t> sizes;
  if (!partition.empty()) {
    size_t i = 0;
    while (i <= partition.size()) {
      size_t comma = partition.find(',', i);
      if (comma == std::string_view::npos)
        comma = partition.size();
      std::string_view part = partition.substr(i, comma - i);
      while (!part.empty() && part.front() == ' ')
        part.remove_prefix(1);
      while (!part.empty() && part.back() == ' ')
        part.remove_suffix(1);
      int64_t v = 0;
      auto [end, ec] = std::from_chars(part.data(), part.data() + part.size(), v);
      if (part.empty() || ec != std::errc{} || end != part.data() + part.size())
        return fmt::format("pp_layer_partition \"{}\": '{}' is not a layer count", partition, part);
      if (v < 1)
        return fmt::format("pp_layer_partition \"{}\": every stage needs at least 1 layer, got {}", partition, v);
      sizes.push_back(v);
      i = comma + 1;
    }
    if (static_cast<int64_t>(sizes.size()) != pp_size)
      return fmt::format("pp_layer_partition \"{}\" has {} stages but pipeline_parallel_size is {}", partition,
                         sizes.size(), pp_size);
    const int64_t sum = std::accumulate(sizes.begin(), sizes.end(), int64_t{0});
    if (sum != n_layer)
      return fmt::format("pp_layer_partition \"{}\" sums to {} layers but the model has {} (num_hidden_layers)",
                         partition, sum, n_layer);
  } else {
    sizes.assign(static_cast<size_t>(pp_size), n_layer / pp_size);
    // vLLM: the remainder goes to the stages before the last, nearest to it first.
    const int64_t remainder = n_layer % pp_size;
    for (int64_t i = 2; i < remainder + 2; ++i)
      ++sizes[static_cast<size_t>(pp_size - i)];
  }
  std::vector<stage_range> stages;
  int64_t begin = 0;
  for (int64_t n : sizes) {
    stages.push_back({begin, begin + n});
    begin += n;
  }
  return stages;
}

std::string check_tensor_parallel(const model::model_config& cfg, int32_t tp_size) {
  if (tp_size < 1)
    return fmt::format("tensor_parallel_size must be at least 1, got {}", tp_size);
  const int64_t tp = tp_size;
  const bool heads_ok = cfg.n_head % tp == 0;
  const bool kv_ok = cfg.n_head_kv % tp == 0 || (tp > cfg.n_head_kv && tp % cfg.n_head_kv == 0);
  if (!heads_ok && !kv_ok)
    return fmt::format("{} attention heads and {} kv heads are not divisible by tensor_parallel_size {}", cfg.n_head,
                       cfg.n_head_kv, tp);
  if (!heads_ok)
    return fmt::format("{} attention heads are not divisible by tensor_parallel_size {}", cfg.n_head, tp);
  if (!kv_ok)
    return fmt::format("{} kv heads are neither divisible by tensor_parallel_size {} nor divide it (to be replicated)",
                       cfg.n_head_kv, tp);
  return {};
}

layout_result plan_layout(const model::model_config& cfg, int32_t tp_size, int32_t pp_size, std::string_view partition,
                          bool expert_parallel) {
  if (auto err = check_tensor_parallel(cfg, tp_size); !err.empty())
    return err;
  auto split = split_layers(cfg.n_layer, pp_size, partition);
  if (std::holds_alternative<std::string>(split))
    return split;
  const auto& stages = std::get<std::vector<stage_range>>(split);
  try {
    for (const auto& stage : stages)
      for (int rank = 0; rank < tp_size; ++rank)
        model::llama_weight_table(
            cfg, model::shard_spec{rank, tp_size, stage.layer_begin, stage.layer_end, expert_parallel});
  } catch (const model::model_error& e) {
    return std::string{e.what()};
  }
  return split;
}

}  // namespace actorllm::actors
