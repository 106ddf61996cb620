// The paged KV cache's layout is the backend's choice: the CPU backend allocates each block's rows grouped by kv
// head (kv_layer::heads_outer), and the layer's accessors read its shape either way.
#include "kernels/cpu/cpu_backend.hpp"
#include "model/kv_cache.hpp"

#include <doctest/doctest.h>

using namespace actorllm;

TEST_CASE("the CPU backend's KV cache is laid out kv heads outer, and a layer reports its block size and kv heads") {
  cpu::cpu_backend be{1};
  REQUIRE(be.kv_heads_outer());
  model::kv_cache_shape shape;
  shape.n_layer = 2;
  shape.n_head_kv = 3;
  shape.head_dim = 8;
  shape.block_size = 16;
  shape.type = dtype::bf16;
  const model::kv_cache cache{be, shape, 5};
  for (int64_t l = 0; l < 2; ++l) {
    const kv_layer layer = cache.layer(l);
    CHECK(layer.heads_outer);
    CHECK(layer.k.dim(1) == 3);  // [n_blocks, n_head_kv, block_size, head_dim]
    CHECK(layer.k.dim(2) == 16);
    CHECK(layer.n_blocks() == 5);
    CHECK(layer.block_size() == 16);
    CHECK(layer.n_head_kv() == 3);
    CHECK(layer.head_dim() == 8);
    CHECK(layer.k.type == dtype::bf16);
    CHECK(layer.v.shape == layer.k.shape);
  }
}

TEST_CASE("a kv_layer slot by slot reads its block size and kv heads from dims 1 and 2") {
  cpu::cpu_backend be{1};
  const tensor k = be.alloc(dtype::f32, {4, 16, 2, 8});
  const kv_layer layer{k, k};
  CHECK_FALSE(layer.heads_outer);
  CHECK(layer.block_size() == 16);
  CHECK(layer.n_head_kv() == 2);
  const kv_layer outer{be.alloc(dtype::f32, {4, 2, 16, 8}), be.alloc(dtype::f32, {4, 2, 16, 8}), 1.0f, 1.0f, true};
  CHECK(outer.block_size() == 16);
  CHECK(outer.n_head_kv() == 2);
}
