// Where a shard's weights come from: a Hugging Face checkpoint directory, or seeded random weights for its
// config.json alone (`--load-format dummy`).
#pragma once

#include "kernels/dtype.hpp"
#include "model/model_config.hpp"
#include "model/weight_loader.hpp"
#include "model/weight_table.hpp"

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>

namespace actorllm::model {

/// vLLM's --load-format values that actorllm supports.
enum class load_format : uint8_t { automatic, safetensors, dummy };

/// Parses "auto", "safetensors" or "dummy"; nullopt otherwise.
std::optional<load_format> parse_load_format(std::string_view s);

/// Whether `dir` holds a checkpoint the safetensors loader opens: model.safetensors or model.safetensors.index.json.
bool has_safetensors_checkpoint(const std::filesystem::path& dir);

struct load_options {
  load_format format = load_format::automatic;
  /// Weight dtype to convert to (dummy: to generate); nullopt keeps the checkpoint's (dummy: config's torch_dtype).
  std::optional<dtype> weight_dtype;
  /// Seed of dummy weights.
  uint64_t seed = 0;
  /// --quantization (model::resolve_quantization): nullopt follows the checkpoint's quantization_config.
  std::optional<std::string> quantization;
};

/// A model's configuration and one shard's weights.
struct loaded_shard {
  model_config config;
  model_weights weights;
};

/// Reads DIR/config.json and loads the weights of `shard` (sliced for its TP rank and layer range while reading).
/// Throws model_error naming what is wrong.
loaded_shard load_shard(const std::filesystem::path& dir, const shard_spec& shard, const load_options& options);

}  // namespace actorllm::model
