// Where a shard's weights come from.
#include "model/model_source.hpp"

#include "model/model_error.hpp"

#include <fmt/format.h>

namespace actorllm::model {

std::optional<load_format> parse_load_format(std::string_view s) {
  if (s == "auto")
    return load_format::automatic;
  if (s == "safetensors")
    return load_format::safetensors;
  if (s == "dummy")
    return load_format::dummy;
  return std::nullopt;
}

bool has_safetensors_checkpoint(const std::filesystem::path& dir) {
  return std::filesystem::exists(dir / "model.safetensors") ||
         std::filesystem::exists(dir / "model.safetensors.index.json");
}

loaded_shard load_shard(const std::filesystem::path& dir, const shard_spec& shard, const load_options& options) {
  model_config cfg = load_model_config(dir);
  cfg.quant = resolve_quantization(cfg.quant, options.quantization);
  weight_table table = llama_weight_table(cfg, shard);
  if (options.format == load_format::dummy) {
    dtype type = options.weight_dtype.value_or(cfg.torch_dtype);
    model_weights weights = make_dummy_weights(cfg, table, shard, type, options.seed);
    quantize_dummy_weights(cfg, table, shard, type, options.seed, weights);
    return loaded_shard{cfg, std::move(weights)};
  }
  if (!has_safetensors_checkpoint(dir))
    throw model_error(
        fmt::format("{}: no model.safetensors or model.safetensors.index.json (use --load-format dummy "
                    "to run with random weights)",
                    dir.string()));
  return loaded_shard{cfg, load_weights(cfg, table, dir, shard, options.weight_dtype)};
}

}  // namespace actorllm::model
