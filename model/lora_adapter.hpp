// A PEFT LoRA adapter (adapter_config.json + adapter_model.safetensors) read for one shard: checked against the base
// model and the engine's limits, its low-rank matrices sliced the way the base weights they modify are sliced for
// tensor parallelism, limited to the shard's pipeline stage, and the scaling (lora_alpha / r, or / sqrt(r) with
// use_rslora) folded into B. vLLM's LoRAModel.from_local_checkpoint.
#pragma once

#include "model/model_config.hpp"
#include "model/weight_table.hpp"

#include <array>
#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

namespace actorllm::model {

/// The Linear layers an adapter may modify, in the order layers.cpp applies them.
enum class lora_target : uint8_t { q, k, v, o, gate, up, down };
inline constexpr size_t n_lora_targets = 7;

/// The module name PEFT uses: "q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj".
std::string_view lora_target_module(lora_target t);

/// What an adapter directory declares, once checked.
struct lora_adapter_info {
  int64_t rank = 0;                            ///< r
  double alpha = 0;                            ///< lora_alpha
  double scaling = 0;                          ///< alpha / r, or alpha / sqrt(r) with use_rslora
  std::array<bool, n_lora_targets> targets{};  ///< which modules it has weights for (at least one)
};

/// Reads and checks `dir` against `cfg`: adapter_config.json (peft_type "LORA" when present; r in
/// [1, max_lora_rank]; lora_alpha; use_rslora; target_modules a list (an entry matches a module named like it or
/// ending in "." + it), a regular expression matched against whole module names ("model.layers.3.self_attn.q_proj"),
/// "all-linear", or null/absent (then the tensors alone say); exclude_modules likewise) and the safetensors header
/// (for every layer that has a targeted module, base_model.model.model.layers.{i}.{self_attn|mlp}.{module}.lora_A
/// .weight [r, in] and lora_B.weight [out, r] with the base Linear's in/out sizes, F32/F16/BF16; an adapter name
/// segment, lora_A.default.weight, is accepted; every layer or none of a module, the MLP of a mixture-of-experts
/// model's dense layers counting as every layer). Keys that do not change the math (base_model_name_or_path,
/// task_type, lora_dropout, init_lora_weights, unknown ones, ...) are ignored. Refused by name (model_error naming
/// the key or the tensor and the file): DoRA (use_dora, magnitude vectors), bias other than "none", lora_bias,
/// modules_to_save, fan_in_fan_out, layers_to_transform / layers_pattern, rank_pattern / alpha_pattern with entries,
/// use_qalora, layer_replication, trainable_token_indices, target_parameters, aLoRA, Arrow, target_modules matching
/// only some layers of a module, embedding or lm_head targets, a module this engine does not know, MLP targets on a
/// mixture-of-experts layer, a tensor target_modules does not match, a missing, duplicate, misshapen or non-float
/// tensor, a rank above max_lora_rank, missing files (adapter_model.bin alone: .bin is not supported).
lora_adapter_info inspect_lora_adapter(const std::filesystem::path& dir, const model_config& cfg,
                                       int64_t max_lora_rank);

/// One module's matrices on one shard, f32 row-major: a [rank, in_local] and b [out_local, rank] (scaling folded
/// in: each element is float(scaling * lora_B), rounded once). Both empty when the adapter does not target the
/// module, or the module is the MLP of a mixture-of-experts layer (which has none).
struct lora_matrices {
  int64_t in = 0;   ///< in_local
  int64_t out = 0;  ///< out_local
  std::vector<float> a, b;

  bool empty() const { return a.empty(); }
};

/// An adapter as one shard applies it: per layer of the shard's stage (shard.layer_begin ..), per lora_target.
struct lora_adapter {
  int64_t rank = 0;
  std::vector<std::array<lora_matrices, n_lora_targets>> layers;
};

/// Loads `dir` (checked as inspect_lora_adapter does) for `shard`: column-parallel modules (q/k/v/gate/up) keep all
/// of A and the rows of B this rank's base weight holds (slice_for of the base declaration, GQA kv-head replication
/// included); row-parallel ones (o/down) keep the columns of A this rank's base weight holds and all of B, so that
/// the ranks' partial outputs sum to the whole update in the all-reduce the base layer already does. Any stored float
/// type is read exactly and converted to f32.
lora_adapter load_lora_adapter(const std::filesystem::path& dir, const model_config& cfg, const shard_spec& shard,
                               int64_t max_lora_rank);

}  // namespace actorllm::model
