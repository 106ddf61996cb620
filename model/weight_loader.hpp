// Filling a shard's model_weights: from a safetensors checkpoint (slicing while reading), or with seeded random
// values for `--load-format dummy`.
#pragma once

#include "kernels/dtype.hpp"
#include "model/model_config.hpp"
#include "model/model_weights.hpp"
#include "model/weight_table.hpp"

#include <cstdint>
#include <filesystem>
#include <optional>

namespace actorllm::model {

/// Loads the `shard` slice of every weight in `table` from the checkpoint in `dir` (model.safetensors, or an index
/// and its shards). A slice that keeps its dtype and lies in one piece in the file (a whole tensor, or rows of one) is
/// used in place: a host_tensor::view of the file mapping, which stays mapped while any such view (or the backend
/// tensor made from it) lives. A matrix's columns that keep their dtype (a row-parallel weight at tp > 1) are a
/// host_tensor::deferred copy, named by their place in the file (a strided file_origin) and copied out of the mapping
/// only when first read. Other slices are copied out of the mapping; the full tensor is never materialised. Tensors
/// keep the checkpoint's dtype unless `convert_to` is given. Throws model_error naming the tensor when a required
/// weight is missing or its full shape differs from the declaration (expected and found shapes), and whatever
/// safetensors_checkpoint::open throws for a malformed checkpoint.
model_weights load_weights(const model_config& cfg, const weight_table& table, const std::filesystem::path& dir,
                           const shard_spec& shard, std::optional<dtype> convert_to = std::nullopt);

/// `--load-format dummy`: random weights of dtype `type` for the shapes in `table`, laid out as load_weights would.
/// Matrices and embeddings are uniform with HF's init std (0.02), biases small, norm weights near 1. Every value is a
/// pure function of (seed, tensor name, index in the full tensor), so the TP slices made with one seed are slices of
/// one full random tensor, whatever tp_size.
model_weights make_dummy_weights(const model_config& cfg, const weight_table& table, const shard_spec& shard,
                                 dtype type, uint64_t seed);

/// `--load-format dummy` of a quantized config: the dummy Linear weights (not the routers) made what the format
/// would hold: integer formats by round-to-nearest quantization with the config's bits, group size and symmetry
/// (quantize_linear_rtn), fp8 by rounding each row to e4m3 with scale max|w| / 448 and back to bf16. Per-channel
/// scales come from the full row (regenerated from `seed` for a row-parallel slice), so every layout quantizes
/// alike. No-op for a float config.
void quantize_dummy_weights(const model_config& cfg, const weight_table& table, const shard_spec& shard, dtype type,
                            uint64_t seed, model_weights& weights);

}  // namespace actorllm::model
