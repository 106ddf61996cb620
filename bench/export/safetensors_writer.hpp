// Writes weights held in memory (the dummy weights of a config's shape) as a Hugging Face checkpoint directory, so
// that another engine can read the very bytes actorllm computes with (bench/compare_llama_cpp.sh).
#pragma once

#include "model/model_weights.hpp"

#include <filesystem>

namespace actorllm::bench {

/// Writes every float tensor of `weights` to `file` as safetensors (in name order, each in its own dtype, with
/// "__metadata__": {"format": "pt"} as transformers writes it). std::runtime_error naming the file or tensor when it
/// cannot be written or `weights` holds quantized tensors (which have no single safetensors dtype).
void write_safetensors(const std::filesystem::path& file, const model::model_weights& weights);

/// A checkpoint directory: `config_dir`'s config.json copied into `dir` (created) and the weights as
/// dir/model.safetensors.
void write_checkpoint_dir(const std::filesystem::path& dir, const std::filesystem::path& config_dir,
                          const model::model_weights& weights);

}  // namespace actorllm::bench
