// Chained block digests for the prefix cache.
#include "engine/block_hash.hpp"

#include "util/check.hpp"

namespace actorllm::engine {

block_hash hash_block(const block_hash& parent, std::span<const int32_t> tokens, std::string_view extra_keys) {
  std::vector<uint8_t> bytes;
  bytes.reserve(parent.size() + tokens.size() * 4 + extra_keys.size());
  bytes.insert(bytes.end(), parent.begin(), parent.end());
  for (int32_t t : tokens) {
    const auto u = static_cast<uint32_t>(t);
    for (int shift = 0; shift < 32; shift += 8)
      bytes.push_back(static_cast<uint8_t>(u >> shift));
  }
  bytes.insert(bytes.end(), extra_keys.begin(), extra_keys.end());
  return util::sha256(bytes);
}

std::string first_block_extra_keys(const std::optional<std::string>& cache_salt, int32_t lora_id) {
  std::string keys;
  auto append_u32 = [&keys](uint32_t n) {
    for (int shift = 0; shift < 32; shift += 8)
      keys.push_back(static_cast<char>(static_cast<uint8_t>(n >> shift)));
  };
  if (cache_salt) {
    keys = "salt:";
    append_u32(static_cast<uint32_t>(cache_salt->size()));
    keys += *cache_salt;
  }
  if (lora_id != 0) {
    keys += "lora:";
    append_u32(static_cast<uint32_t>(lora_id));
  }
  return keys;
}

void extend_block_hashes(std::vector<block_hash>& hashes, std::span<const int32_t> tokens, int32_t block_size,
                         size_t n_blocks, std::string_view first_block_extra_keys) {
  ACTORLLM_CHECK(tokens.size() >= n_blocks * static_cast<size_t>(block_size),
                 "extend_block_hashes: fewer tokens than the blocks to hash");
  const auto bs = static_cast<size_t>(block_size);
  while (hashes.size() < n_blocks) {
    const size_t i = hashes.size();
    const block_hash& parent = i == 0 ? root_block_hash : hashes.back();
    hashes.push_back(hash_block(parent, tokens.subspan(i * bs, bs), i == 0 ? first_block_extra_keys : ""));
  }
}

}  // namespace actorllm::engine
