// The paged KV cache a shard owns.
#include "model/kv_cache.hpp"

#include "util/check.hpp"

#include <cmath>

namespace actorllm::model {

kv_cache::kv_cache(backend& be, const kv_cache_shape& shape, int64_t n_blocks)
    : be_(be), shape_(shape), n_blocks_(n_blocks) {
  ACTORLLM_CHECK(n_blocks >= 0 && shape.block_size > 0, "kv cache needs a positive block size");
  // The backend leaves the memory untouched, so host pages are only committed when a step writes them.
  heads_outer_ = be_.kv_heads_outer();
  const int64_t rows = shape.n_layer * 2 * n_blocks;
  data_ = be_.alloc_kv_cache(shape.type, heads_outer_
                                             ? tensor_shape{rows, shape.n_head_kv, shape.block_size, shape.head_dim}
                                             : tensor_shape{rows, shape.block_size, shape.n_head_kv, shape.head_dim});
  k_scales_.assign(static_cast<size_t>(shape.n_layer), 1.0f);
  v_scales_.assign(static_cast<size_t>(shape.n_layer), 1.0f);
}

kv_layer kv_cache::layer(int64_t layer) const {
  ACTORLLM_CHECK(layer >= 0 && layer < shape_.n_layer, "kv cache layer out of range");
  return kv_layer{data_.slice_rows(layer * 2 * n_blocks_, n_blocks_),
                  data_.slice_rows((layer * 2 + 1) * n_blocks_, n_blocks_), k_scales_[static_cast<size_t>(layer)],
                  v_scales_[static_cast<size_t>(layer)], heads_outer_};
}

void kv_cache::set_scales(int64_t layer, float k_scale, float v_scale) {
  ACTORLLM_CHECK(layer >= 0 && layer < shape_.n_layer, "kv cache layer out of range");
  ACTORLLM_CHECK(k_scale > 0 && v_scale > 0 && std::isfinite(k_scale) && std::isfinite(v_scale),
                 "kv cache scales must be positive and finite");
  k_scales_[static_cast<size_t>(layer)] = k_scale;
  v_scales_[static_cast<size_t>(layer)] = v_scale;
}

}  // namespace actorllm::model
