// Sizing the KV cache from the shards' profiles: kv_cache_memory for host shards, vLLM's gpu_memory_utilization rule
// per GPU for device shards (shards that share a GPU share its budget).
#include "actors/executors/cache_plan.hpp"
#include "kernels/kv_cache_dtype.hpp"
#include "model/kv_cache.hpp"

#include <doctest/doctest.h>

#include <fmt/format.h>

#include <string>
#include <vector>

using namespace actorllm;

namespace {

constexpr uint64_t gib = uint64_t{1} << 30;

proto::shard_profile gpu_shard(std::string device, uint64_t total, uint64_t used, uint64_t in_use, uint64_t peak,
                               uint64_t bytes_per_block) {
  proto::shard_profile p;
  p.bytes_per_block = bytes_per_block;
  p.device = std::move(device);
  p.device_total = total;
  p.device_used = used;
  p.in_use = in_use;
  p.peak_in_use = peak;
  return p;
}

}  // namespace

TEST_CASE("cache plan: host shards take the fewest blocks that fit kv_cache_memory") {
  proto::shard_profile a, b;
  a.bytes_per_block = 1000;
  a.n_blocks_fit = 40;
  b.bytes_per_block = 2000;
  b.n_blocks_fit = 20;
  const actors::cache_plan plan = actors::plan_cache({a, b}, 16, 40000, 128);
  CHECK(plan.error.empty());
  CHECK(plan.config.n_blocks == 20);
  CHECK(plan.config.max_bytes_per_block == 2000);
}

TEST_CASE("cache plan: one GPU: total x utilization less others and the non-KV peak, over the block bytes") {
  // 80 GiB at 0.9 = 72 GiB; this shard holds 16 GiB (weights) and peaked at 18 GiB; others use 1 GiB (context,
  // cuBLAS): used 17 GiB - in_use 16 GiB. Left: 72 - 1 - 18 = 53 GiB, blocks of 2 MiB: 27136.
  const auto p = gpu_shard("n/cuda:0", 80 * gib, 17 * gib, 16 * gib, 18 * gib, 2 << 20);
  const actors::cache_plan plan = actors::plan_cache({p}, 16, 0, 4096, 0.9);
  REQUIRE(plan.error.empty());
  CHECK(plan.config.n_blocks == 27136);
}

TEST_CASE("cache plan: shards sharing a GPU split its budget, and the fewest blocks over the GPUs win") {
  // tp 2 on one GPU: both shards' peaks and block bytes count against the one budget.
  const auto a = gpu_shard("n/cuda:0", 80 * gib, 20 * gib, 9 * gib, 10 * gib, 1 << 20);
  const auto b = gpu_shard("n/cuda:0", 80 * gib, 19 * gib, 9 * gib, 10 * gib, 1 << 20);
  // 72 - (20 - 18) - 20 = 50 GiB over 2 MiB per block (both shards): 25600 blocks.
  actors::cache_plan plan = actors::plan_cache({a, b}, 16, 0, 4096, 0.9);
  REQUIRE(plan.error.empty());
  CHECK(plan.config.n_blocks == 25600);
  // The same node's second GPU and another node's cuda:0 are separate budgets; the smaller one bounds the cache.
  const auto c = gpu_shard("n/cuda:1", 40 * gib, 10 * gib, 9 * gib, 10 * gib, 1 << 20);
  const auto d = gpu_shard("m/cuda:0", 80 * gib, 10 * gib, 9 * gib, 10 * gib, 1 << 20);
  plan = actors::plan_cache({a, b, c, d}, 16, 0, 4096, 0.9);
  REQUIRE(plan.error.empty());
  // cuda:1: 36 - 1 - 10 = 25 GiB over 1 MiB = 25600 as well; m/cuda:0: 72 - 1 - 10 = 61 GiB = 62464.
  CHECK(plan.config.n_blocks == 25600);
  plan = actors::plan_cache({c}, 16, 0, 4096, 0.5);  // 20 - 1 - 10 = 9 GiB
  REQUIRE(plan.error.empty());
  CHECK(plan.config.n_blocks == 9216);
}

TEST_CASE("cache plan: a GPU with no room for one block, or too few tokens for max_model_len, is refused by name") {
  const auto full = gpu_shard("n/cuda:0", 80 * gib, 70 * gib, 70 * gib, 72 * gib, 2 << 20);  // 72 - 0 - 72 = 0
  actors::cache_plan plan = actors::plan_cache({full}, 16, 0, 128, 0.9);
  CHECK(plan.error.find("n/cuda:0") != std::string::npos);
  CHECK(plan.error.find("--gpu-memory-utilization") != std::string::npos);
  const auto small = gpu_shard("n/cuda:0", 80 * gib, 17 * gib, 16 * gib, 18 * gib, gib);  // 53 blocks of 16 tokens
  plan = actors::plan_cache({small}, 16, 0, 4096, 0.9);
  CHECK(plan.config.n_blocks == 53);
  CHECK(plan.error.find("max seq len (4096)") != std::string::npos);
  CHECK(plan.error.find("--gpu-memory-utilization") != std::string::npos);
}

TEST_CASE("cache plan: a bf16 KV cache logs twice the blocks and tokens of an f32 one in the same memory") {
  // Llama-3.1-8B's shard at tp 1 (32 layers, 8 kv heads of 128) in 4 GiB of kv_cache_memory, and on a GPU with
  // 40 GiB left after the weights.
  auto lines_for = [](dtype type, bool gpu) {
    model::kv_cache_shape shape{32, 8, 128, 16, {}, type};
    proto::shard_profile p;
    p.bytes_per_block = shape.bytes_per_block();
    p.n_blocks_fit = shape.blocks_in(4 * gib);
    p.kv_cache_dtype = std::string{kv_cache_dtype_name(type)};
    if (gpu)
      p = [&] {
        proto::shard_profile g = gpu_shard("h/cuda:0", 80 * gib, 20 * gib, 20 * gib, 20 * gib, shape.bytes_per_block());
        g.kv_cache_dtype = p.kv_cache_dtype;
        return g;
      }();
    const actors::cache_plan plan = actors::plan_cache({p}, 16, 4 * gib, 8192, 0.75);
    REQUIRE(plan.error.empty());
    return actors::cache_plan_lines(plan.config, {gpu ? "GPU" : "CPU", 1, 1, 8192, p.kv_cache_dtype});
  };
  for (bool gpu : {false, true}) {
    CAPTURE(gpu);
    const std::vector<std::string> f32 = lines_for(dtype::f32, gpu), bf16 = lines_for(dtype::bf16, gpu);
    for (const auto& l : f32)
      MESSAGE(l);
    for (const auto& l : bf16)
      MESSAGE(l);
    // f32: 32 x 2 x 16 x 8 x 128 x 4 = 4 MiB per block; bf16 2 MiB. CPU: 4 GiB / 4 MiB = 1024 blocks, 16384 tokens.
    // GPU: 80 x 0.75 - 20 = 40 GiB: 10240 blocks (163840 tokens) f32.
    const int64_t blocks = gpu ? 10240 : 1024;
    const std::string device = gpu ? "GPU" : "CPU";
    CHECK(f32.at(0) == fmt::format("# {} blocks: {}", device, blocks));
    CHECK(bf16.at(0) == fmt::format("# {} blocks: {}", device, 2 * blocks));
    CHECK(f32.at(1) == fmt::format("{} KV cache size: {} tokens ({} blocks of 16, 4194304 bytes per block on the "
                                   "largest shard, kv_cache_dtype float32)",
                                   device, blocks * 16, blocks));
    CHECK(bf16.at(1) == fmt::format("{} KV cache size: {} tokens ({} blocks of 16, 2097152 bytes per block on the "
                                    "largest shard, kv_cache_dtype bfloat16)",
                                    device, 2 * blocks * 16, 2 * blocks));
  }
}
