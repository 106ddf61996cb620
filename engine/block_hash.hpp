// The identity of a full KV-cache block for prefix caching: a chained SHA-256 over the parent block's digest, the
// block's token ids and extra keys (the request's cache_salt), so that two blocks share a hash only when they hold
// the same tokens at the same positions after the same prefix, under the same salt. vLLM moved from Python's hash
// to SHA-256 after a collision report: a weak hash would let one tenant's prompt match another's blocks.
#pragma once

#include "util/sha256.hpp"

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace actorllm::engine {

/// The full 32-byte digest of a block (never truncated: it is the cache key).
using block_hash = util::sha256_digest;

/// The parent digest of a sequence's first block.
inline constexpr block_hash root_block_hash{};

/// SHA-256 over (`parent` || `tokens` as little-endian int32 || `extra_keys`).
block_hash hash_block(const block_hash& parent, std::span<const int32_t> tokens, std::string_view extra_keys);

/// The extra keys of a request's first block: empty without a salt or a LoRA adapter; else a tag, the salt's length
/// and its bytes (self-delimiting, so no salt can make a block look unsalted or like another salt's), then a tag and
/// the adapter's id (its KV differs from the base model's). Later blocks need none: the chain carries the first
/// block's digest into every descendant.
std::string first_block_extra_keys(const std::optional<std::string>& cache_salt, int32_t lora_id = 0);

/// Extends `hashes` (the digests of the first hashes.size() full blocks of `tokens`) to the first `n_blocks` full
/// blocks of `block_size` tokens; `tokens` must hold at least n_blocks * block_size ids.
void extend_block_hashes(std::vector<block_hash>& hashes, std::span<const int32_t> tokens, int32_t block_size,
                         size_t n_blocks, std::string_view first_block_extra_keys);

/// Hashing a digest for unordered containers: its first 8 bytes, which SHA-256 makes uniform.
struct block_hash_hasher {
  size_t operator()(const block_hash& h) const noexcept {
    size_t v = 0;
    std::memcpy(&v, h.data(), sizeof v);
    return v;
  }
};

}  // namespace actorllm::engine
