// Where each shard of a replica sits: which layers each pipeline stage runs (vLLM's split, or an explicit
// partition) and whether the model's heads split over the TP size. Checked from config.json alone, before any
// weight is read, so a bad layout fails at once with the numbers in the message.
#pragma once

#include "model/model_config.hpp"

#include <cstdint>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

namespace actorllm::actors {

/// The layers [layer_begin, layer_end) of one pipeline stage.
struct stage_range {
  int64_t layer_begin = 0;
  int64_t layer_end = 0;

  int64_t n_layers() const { return layer_end - layer_begin; }
  friend bool operator==(const stage_range&, const stage_range&) = default;
};

/// The stages of a replica, in pipeline order, or a message saying why the layout cannot work.
using layout_result = std::variant<std::vector<stage_range>, std::string>;

/// Layer ranges for `pp_size` stages of `n_layer` layers. `partition` ("3,2": layers per stage) overrides the
/// default, which is vLLM's get_pp_indices: n_layer / pp_size each, and the remainder one layer apiece to the stages
/// before the last, nearest to it first (the last stage also runs the norm and lm_head). Errors name the numbers: a
/// pp size below 1 or above the layer count, a partition that does not parse, has the wrong number of entries, an
/// entry below 1, or does not sum to the layer count.
layout_result split_layers(int64_t n_layer, int32_t pp_size, std::string_view partition = {});

/// Empty when `tp_size` ranks can split the model's attention: query heads divisible by tp, and kv heads either
/// divisible by tp or dividing it (then replicated). Otherwise the message, e.g. "8 attention heads and 4 kv heads
/// are not divisible by tensor_parallel_size 3".
std::string check_tensor_parallel(const model::model_config& cfg, int32_t tp_size);

/// The whole layout check for a model: the TP split of the heads, the layer split, then the weight table of every
/// (stage, rank) so that any further split the model cannot take is found before loading. Returns the stages.
layout_result plan_layout(const model::model_config& cfg, int32_t tp_size, int32_t pp_size, std::string_view partition,
                          bool expert_parallel = false);

}  // namespace actorllm::actors
