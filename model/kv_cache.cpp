// The paged KV cache a shard owns.
#include "model/kv_cache.hpp"

#include "util/check.hpp"

namespace actorllm::model {

kv_cache::kv_cache(backend& be, const kv_cache_shape& shape, int64_t n_blocks)
    : be_(be), shape_(shape), n_blocks_(n_blocks) {
  ACTORLLM_CHECK(n_blocks >= 0 && shape.block_size > 0, "kv cache needs a positive block size");
  // The backend leaves the memory untouched, so host pages are only committed when a step writes them.
  data_ = be_.alloc(dtype::f32, {shape.n_layer * 2 * n_blocks, shape.block_size, shape.n_head_kv, shape.head_dim});
}

kv_layer kv_cache::layer(int64_t layer) const {
  ACTORLLM_CHECK(layer >= 0 && layer < shape_.n_layer, "kv cache layer out of range");
  return kv_layer{data_.slice_rows(layer * 2 * n_blocks_, n_blocks_),
                  data_.slice_rows((layer * 2 + 1) * n_blocks_, n_blocks_)};
}

void kv_cache::copy_block(int64_t src, int64_t dst) {
  ACTORLLM_CHECK(src >= 0 && src < n_blocks_ && dst >= 0 && dst < n_blocks_, "kv cache block copy out of range");
  if (src == dst)
    return;
  for (int64_t l = 0; l < shape_.n_layer; ++l) {
    kv_layer kv = layer(l);
    be_.copy_row(kv.k, src, dst);
    be_.copy_row(kv.v, src, dst);
  }
}

}  // namespace actorllm::model
