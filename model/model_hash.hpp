// A content hash of a model directory, cheap enough to compute on every node of a cluster: it tells an engine
// whether a node holds the same checkpoint it does without reading gigabytes of weights.
#pragma once

#include <filesystem>
#include <string>

namespace actorllm::model {

/// "" when `dir` holds no config.json. Otherwise a 16-digit hex FNV-1a (64-bit) digest over config.json's bytes
/// and, for every *.safetensors and *.json file of `dir` in name order, its name, size and first 64 KiB (a
/// safetensors header lists every tensor's dtype, shape and offsets, so it identifies the checkpoint).
std::string model_content_hash(const std::filesystem::path& dir);

}  // namespace actorllm::model
