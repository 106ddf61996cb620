// The paged KV cache a shard owns.
#include "model/kv_cache.hpp"

#include "util/check.hpp"

#include <cstring>

namespace actorllm::model {

kv_cache::kv_cache(const kv_cache_shape& shape, int64_t n_blocks) : shape_(shape), n_blocks_(n_blocks) {
  ACTORLLM_CHECK(n_blocks >= 0 && shape.block_size > 0, "kv cache needs a positive block size");
  layer_floats_ = static_cast<size_t>(n_blocks * shape.block_size * shape.n_head_kv * shape.head_dim);
  // new float[] without () leaves the memory untouched, so pages are only committed when a step writes them.
  data_ = std::unique_ptr<float[]>(new float[layer_floats_ * 2 * static_cast<size_t>(shape.n_layer)]);
}

cpu::paged_kv_view kv_cache::layer(int64_t layer) {
  ACTORLLM_CHECK(layer >= 0 && layer < shape_.n_layer, "kv cache layer out of range");
  float* k = data_.get() + static_cast<size_t>(layer) * 2 * layer_floats_;
  return cpu::paged_kv_view{k, k + layer_floats_, n_blocks_, shape_.block_size, shape_.n_head_kv, shape_.head_dim};
}

void kv_cache::copy_block(int64_t src, int64_t dst) {
  ACTORLLM_CHECK(src >= 0 && src < n_blocks_ && dst >= 0 && dst < n_blocks_, "kv cache block copy out of range");
  if (src == dst)
    return;
  const size_t block_floats = static_cast<size_t>(shape_.block_size * shape_.n_head_kv * shape_.head_dim);
  for (int64_t l = 0; l < shape_.n_layer; ++l)
    for (int kv = 0; kv < 2; ++kv) {
      float* base = data_.get() + (static_cast<size_t>(l) * 2 + static_cast<size_t>(kv)) * layer_floats_;
      std::memcpy(base + static_cast<size_t>(dst) * block_floats, base + static_cast<size_t>(src) * block_floats,
                  block_floats * sizeof(float));
    }
}

}  // namespace actorllm::model
