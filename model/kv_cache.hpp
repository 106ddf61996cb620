// The paged KV cache a shard owns, allocated through its backend: for each of its layers, k and v blocks of
// block_size token slots.
#pragma once

#include "kernels/backend.hpp"

#include <cstddef>
#include <cstdint>
#include <vector>

namespace actorllm::model {

/// What one shard caches per token slot: its layers, its kv heads (after the TP split) and the head size; and which
/// positions it keeps (decode context parallelism: a share of them, `layout`).
struct kv_cache_shape {
  int64_t n_layer = 0;
  int64_t n_head_kv = 0;
  int64_t head_dim = 0;
  int64_t block_size = 16;  ///< token slots of a block in this shard's cache
  kv_shard_layout layout;   ///< the positions this shard keeps
  dtype type = dtype::f32;  ///< the element type k and v are stored in (--kv-cache-dtype)

  /// Positions a block covers in the scheduler's block tables: block_size, times the DCP group's ranks.
  int64_t positions_per_block() const { return block_size * layout.n_shards; }

  /// Bytes one block takes over all layers, k and v, in the cache's element type (fp8's per-tensor scales live
  /// apart from the blocks).
  size_t bytes_per_block() const {
    return static_cast<size_t>(2 * n_layer * block_size * n_head_kv * head_dim) * dtype_size(type);
  }
  /// How many whole blocks fit in `bytes`.
  int64_t blocks_in(size_t bytes) const {
    size_t per = bytes_per_block();
    return per == 0 ? 0 : static_cast<int64_t>(bytes / per);
  }
};

/// One allocation on the backend, laid out [layer][k|v][block][slot][kv head][head_dim] in the shape's element type, or
/// [layer][k|v][block][kv head][slot][head_dim] where the backend reads it faster so (backend::kv_heads_outer).
/// Slots are not initialised: attention only reads positions that a step has written. An fp8 cache has a k and a v
/// scale per layer (1 unless set_scales is given the checkpoint's).
class kv_cache {
 public:
  /// Throws std::bad_alloc when the backend cannot hold it.
  kv_cache(backend& be, const kv_cache_shape& shape, int64_t n_blocks);

  const kv_cache_shape& shape() const { return shape_; }
  int64_t n_blocks() const { return n_blocks_; }
  int64_t block_size() const { return shape_.block_size; }
  /// The k and v tensors of local layer `layer` (0-based within the shard's layer range), with its scales.
  kv_layer layer(int64_t layer) const;
  /// Sets local layer `layer`'s k and v scales (positive and finite: a checkpoint's k_scale / v_scale).
  void set_scales(int64_t layer, float k_scale, float v_scale);

 private:
  backend& be_;
  kv_cache_shape shape_;
  int64_t n_blocks_ = 0;
  bool heads_outer_ = false;
  tensor data_;  // [n_layer * 2 * n_blocks, block_size, n_head_kv, head_dim] (heads_outer_: n_head_kv, block_size)
  std::vector<float> k_scales_, v_scales_;  // [n_layer]
};

}  // namespace actorllm::model
