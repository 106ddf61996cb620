// cuda::write_kv and cuda::paged_attention against kernels/cpu on the GPU: decode at several contexts with split-K
// forced on and off, prefill chunks, mixed batches, GQA 1/4/8, head_dim 64 and 128, sliding windows, padding slots,
// and sentinels after every output (out, workspace, cache) that must stay untouched. Rows of no sequence are left
// unwritten (the documented contract), so they must still hold their initial value. Shapes stay small enough for
// compute-sanitizer memcheck to run the file in seconds. The argument checks of the launchers run without a GPU.
#include "kernels/cuda/attention_plan.hpp"
#include "kernels/cuda/cuda_check.hpp"
#include "kernels/cuda/paged_attention.hpp"
#include "kernels/cuda/prefill_attention.hpp"
#include "kernels/dtype.hpp"

#include "gpu_test_util.hpp"
#include "paged_batch_fixture.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

namespace cuda = actorllm::cuda;
using actorllm::cuda_test::device_array;
using actorllm::cuda_test::gpu_available;
using actorllm::cuda_test::make_paged_batch;
using actorllm::cuda_test::paged_batch;
using actorllm::cuda_test::require_gpu;
using actorllm::cuda_test::seq_spec;

constexpr size_t k_guard = 256;  // elements after every output
constexpr float k_guard_value = 4242.0f;

bool same_bits(const std::vector<float>& a, const float* b, size_t n) { return std::memcmp(a.data(), b, n * 4) == 0; }

bool guard_intact(const std::vector<float>& v, size_t from) {
  for (size_t i = from; i < v.size(); ++i)
    if (v[i] != k_guard_value)
      return false;
  return true;
}

// The cache on the device, written by cuda::write_kv from the batch's rows (padding slots included), checked bit for
// bit against cpu::write_kv's cache; a guard follows each of k and v.
struct device_cache {
  explicit device_cache(const paged_batch& b)
      : k(with_guard(std::vector<float>(b.k_cache.size(), std::nanf("")))),
        v(with_guard(std::vector<float>(b.v_cache.size(), std::nanf("")))),
        view{k.ptr, v.ptr, b.n_blocks, b.block_size, b.n_head_kv, b.head_dim} {
    device_array<float> k_rows(b.k_rows), v_rows(b.v_rows);
    device_array<int64_t> slots(b.slots);
    cuda::write_kv(view, k_rows.ptr, v_rows.ptr, slots.ptr, static_cast<int64_t>(b.slots.size()));
    ACTORLLM_CUDA_CHECK(cudaDeviceSynchronize());
    const std::vector<float> k_host = k.to_host(), v_host = v.to_host();
    CHECK(same_bits(b.k_cache, k_host.data(), b.k_cache.size()));
    CHECK(same_bits(b.v_cache, v_host.data(), b.v_cache.size()));
    CHECK(guard_intact(k_host, b.k_cache.size()));
    CHECK(guard_intact(v_host, b.v_cache.size()));
  }
  static std::vector<float> with_guard(std::vector<float> v) {
    v.insert(v.end(), k_guard, k_guard_value);
    return v;
  }
  device_array<float> k, v;
  cuda::paged_cache_view view;
};

// Runs the batch on the GPU under a split policy and compares with the CPU reference.
void check_on_gpu(const paged_batch& b, cuda::split_policy split, int64_t partition_size = 0) {
  device_cache cache(b);
  cuda::attention_plan_options options;
  options.split = split;
  options.partition_size = partition_size;
  const cuda::attention_plan plan = cuda::plan_paged_attention(
      b.geometry(), b.seqs.data(), b.n_seqs(), static_cast<int64_t>(b.block_tables.size()), {}, options);
  INFO(b.describe() << " split " << plan.split << " partition " << plan.partition_size << " x " << plan.n_partitions);

  std::vector<float> out_init(b.q.size(), paged_batch::untouched);
  out_init.insert(out_init.end(), k_guard, k_guard_value);
  device_array<float> q(b.q), out(out_init);
  device_array<int32_t> positions(b.positions), seqs(b.seqs), tables(b.block_tables);
  const size_t ws_floats = static_cast<size_t>(plan.workspace_bytes / 4);
  std::vector<float> ws_init(ws_floats, std::nanf(""));  // stale content must not matter
  ws_init.insert(ws_init.end(), k_guard, k_guard_value);
  device_array<float> workspace(ws_init);

  cuda::paged_attention(plan, q.ptr, positions.ptr, seqs.ptr, tables.ptr, cache.view, b.scale, out.ptr, workspace.ptr);
  ACTORLLM_CUDA_CHECK(cudaDeviceSynchronize());
  const std::vector<float> got = out.to_host();
  std::string worst;
  // GPU expf and a different summation order against the CPU's vectorised exp.
  const int64_t bad = actorllm::cuda_test::count_mismatches(b, got, 5e-6, 1e-4, &worst);
  INFO(worst);
  CHECK(bad == 0);
  CHECK(guard_intact(got, b.q.size()));
  CHECK(guard_intact(workspace.to_host(), ws_floats));
}

void check_all_splits(const paged_batch& b) {
  check_on_gpu(b, cuda::split_policy::automatic);
  check_on_gpu(b, cuda::split_policy::never);
  check_on_gpu(b, cuda::split_policy::always);
  check_on_gpu(b, cuda::split_policy::always, 64);
  check_on_gpu(b, cuda::split_policy::always, 37);  // partitions straddling tiles and blocks
}

const std::vector<seq_spec> mixed = {{37, 1}, {23, 6}, {19, 19}, {1, 1}, {150, 1}, {33, 4}};

}  // namespace

TEST_CASE("cuda write_kv writes its slots, skips negative and out-of-cache ones" * doctest::skip(!gpu_available())) {
  require_gpu();
  const int64_t n_blocks = 3, bs = 4, n_head_kv = 2, hd = 64, row = n_head_kv * hd;
  const int64_t capacity = n_blocks * bs;
  const std::vector<int64_t> slots = {5, -1, 11, capacity, 0, capacity + 1000, -7};
  const auto n_tokens = static_cast<int64_t>(slots.size());
  std::vector<float> k(static_cast<size_t>(n_tokens * row)), v(k.size());
  for (size_t i = 0; i < k.size(); ++i) {
    k[i] = static_cast<float>(i) + 0.5f;
    v[i] = -static_cast<float>(i);
  }
  std::vector<float> expect_k(static_cast<size_t>(capacity * row), 0.0f), expect_v = expect_k;
  for (int64_t t = 0; t < n_tokens; ++t) {
    const int64_t slot = slots[static_cast<size_t>(t)];
    if (slot < 0 || slot >= capacity)
      continue;
    std::memcpy(&expect_k[static_cast<size_t>(slot * row)], &k[static_cast<size_t>(t * row)], row * 4);
    std::memcpy(&expect_v[static_cast<size_t>(slot * row)], &v[static_cast<size_t>(t * row)], row * 4);
  }
  std::vector<float> init(static_cast<size_t>(capacity * row), 0.0f);
  init.insert(init.end(), k_guard, k_guard_value);
  device_array<float> kc(init), vc(init), dk(k), dv(v);
  device_array<int64_t> ds(slots);
  cuda::write_kv({kc.ptr, vc.ptr, n_blocks, bs, n_head_kv, hd}, dk.ptr, dv.ptr, ds.ptr, n_tokens);
  ACTORLLM_CUDA_CHECK(cudaDeviceSynchronize());
  const std::vector<float> got_k = kc.to_host(), got_v = vc.to_host();
  CHECK(same_bits(expect_k, got_k.data(), expect_k.size()));
  CHECK(same_bits(expect_v, got_v.data(), expect_v.size()));
  CHECK(guard_intact(got_k, expect_k.size()));
  CHECK(guard_intact(got_v, expect_v.size()));
}

TEST_CASE("cuda paged_attention decode rows at several contexts, split on and off" * doctest::skip(!gpu_available())) {
  require_gpu();
  uint64_t seed = 1000;
  for (int64_t head_dim : {64, 128}) {
    for (int64_t gqa : {1, 4, 8}) {
      const paged_batch b = make_paged_batch({{1, 1}, {100, 1}, {1000, 1}, {2500, 1}}, 2, gqa, head_dim, 16, 0, ++seed);
      check_all_splits(b);
    }
  }
}

TEST_CASE("cuda paged_attention prefill chunks and mixed batches with padding rows" * doctest::skip(!gpu_available())) {
  require_gpu();
  uint64_t seed = 2000;
  for (int64_t gqa : {1, 4, 8}) {
    check_all_splits(make_paged_batch(mixed, 2, gqa, 64, 16, 0, ++seed, true));
    check_all_splits(make_paged_batch(mixed, 1, gqa, 128, 5, 0, ++seed, true));  // odd block size
  }
  check_all_splits(make_paged_batch({{300, 300}, {700, 64}, {65, 1}}, 2, 4, 128, 16, 0, ++seed, true));
  // GQA groups larger than a CTA's chunk, and the other compiled head sizes.
  check_all_splits(make_paged_batch(mixed, 1, 12, 64, 16, 0, ++seed, true));
  for (int64_t head_dim : {32, 96, 160, 192, 224, 256})
    check_all_splits(make_paged_batch(mixed, 2, 4, head_dim, 8, 0, ++seed));
}

TEST_CASE("cuda paged_attention with sliding windows" * doctest::skip(!gpu_available())) {
  require_gpu();
  uint64_t seed = 3000;
  for (int64_t window : {1, 7, 16, 21, 100, 1000}) {
    check_all_splits(make_paged_batch(mixed, 2, 4, 64, 4, window, ++seed, true));
    check_all_splits(make_paged_batch(mixed, 1, 8, 128, 16, window, ++seed));
  }
  // A window starting mid-block deep into a long context, next to a prefill chunk.
  check_all_splits(make_paged_batch({{2000, 1}, {700, 40}}, 2, 4, 128, 16, 300, ++seed, true));
}

TEST_CASE("cuda paged_attention stays stable for large scores" * doctest::skip(!gpu_available())) {
  require_gpu();
  check_all_splits(make_paged_batch(mixed, 2, 2, 64, 8, 0, 4001, true, 40.0f));
  check_all_splits(make_paged_batch(mixed, 2, 2, 128, 8, 9, 4002, true, 40.0f));
}

TEST_CASE("cuda paged_attention turns a bad block id or position into NaN rows without reading out of bounds" *
          doctest::skip(!gpu_available())) {
  require_gpu();
  paged_batch b = make_paged_batch({{40, 1}, {20, 1}}, 1, 4, 64, 16, 0, 5001);
  b.block_tables[1] = -3;                                 // sequence 0 reads its block 1 at position 39
  b.positions[1] = static_cast<int32_t>(b.seqs[7] * 16);  // sequence 1: past its blocks
  for (auto split : {cuda::split_policy::never, cuda::split_policy::always}) {
    device_cache cache(b);
    cuda::attention_plan_options options;
    options.split = split;
    const cuda::attention_plan plan = cuda::plan_paged_attention(
        b.geometry(), b.seqs.data(), b.n_seqs(), static_cast<int64_t>(b.block_tables.size()), {}, options);
    std::vector<float> out_init(b.q.size(), 0.0f);
    out_init.insert(out_init.end(), k_guard, k_guard_value);
    device_array<float> q(b.q), out(out_init), workspace(std::max<size_t>(plan.workspace_bytes / 4, 1));
    device_array<int32_t> positions(b.positions), seqs(b.seqs), tables(b.block_tables);
    cuda::paged_attention(plan, q.ptr, positions.ptr, seqs.ptr, tables.ptr, cache.view, b.scale, out.ptr,
                          workspace.ptr);
    ACTORLLM_CUDA_CHECK(cudaDeviceSynchronize());
    const std::vector<float> got = out.to_host();
    for (size_t i = 0; i < b.q.size(); ++i)
      CHECK(std::isnan(got[i]));
    CHECK(guard_intact(got, b.q.size()));
  }
}

TEST_CASE("cuda paged_attention and write_kv refuse bad arguments before any launch") {
  // Runs without a GPU: every check below fires before a CUDA call. The pointers are never dereferenced.
  auto* fake = reinterpret_cast<float*>(uintptr_t{1} << 20);
  const auto* ints = reinterpret_cast<const int32_t*>(fake);
  const std::vector<int32_t> seqs = {0, 1, 0, 2};
  const cuda::attention_plan plan = cuda::plan_paged_attention({1, 8, 2, 64, 16, 0}, seqs.data(), 1, 2);
  const cuda::paged_cache_view good{fake, fake, 4, 16, 2, 64};
  cuda::paged_cache_view wrong = good;
  wrong.head_dim = 128;
  CHECK_THROWS_WITH_AS(cuda::paged_attention(plan, fake, ints, ints, ints, wrong, 1.0f, fake + 4096, nullptr),
                       doctest::Contains("does not match the plan"), std::invalid_argument);
  CHECK_THROWS_WITH_AS(cuda::paged_attention(plan, fake, ints, ints, ints, good, 1.0f, fake, nullptr),
                       doctest::Contains("overlap"), std::invalid_argument);
  CHECK_THROWS_WITH_AS(cuda::paged_attention(plan, fake, nullptr, ints, ints, good, 1.0f, fake + 4096, nullptr),
                       doctest::Contains("null"), std::invalid_argument);
  CHECK_THROWS_WITH_AS(cuda::paged_attention(plan, fake + 1, ints, ints, ints, good, 1.0f, fake + 4096, nullptr),
                       doctest::Contains("aligned"), std::invalid_argument);
  cuda::attention_plan_options always;
  always.split = cuda::split_policy::always;
  const cuda::attention_plan split = cuda::plan_paged_attention({1, 8, 2, 64, 16, 0}, seqs.data(), 1, 2, {}, always);
  CHECK_THROWS_WITH_AS(cuda::paged_attention(split, fake, ints, ints, ints, good, 1.0f, fake + 4096, nullptr),
                       doctest::Contains("workspace"), std::invalid_argument);
  const int64_t* slots = reinterpret_cast<const int64_t*>(fake);
  CHECK_THROWS_WITH_AS(cuda::write_kv({fake, fake, 4, 0, 2, 64}, fake, fake, slots, 1), doctest::Contains("write_kv"),
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS(cuda::write_kv(good, fake, nullptr, slots, 1), doctest::Contains("null"), std::invalid_argument);
  CHECK_THROWS_WITH_AS(cuda::write_kv(good, fake + 2, fake, slots, 1), doctest::Contains("aligned"),
                       std::invalid_argument);
  // Nothing to do: no launch, no error.
  CHECK_NOTHROW(cuda::write_kv(good, nullptr, nullptr, nullptr, 0));
  const cuda::attention_plan empty = cuda::plan_paged_attention({0, 8, 2, 64, 16, 0}, nullptr, 0, 0);
  CHECK_NOTHROW(cuda::paged_attention(empty, nullptr, nullptr, nullptr, nullptr, good, 1.0f, nullptr, nullptr));
}

namespace {

// The per-row kernel beside the tensor-core prefill kernel, as cuda_backend runs them, over a bf16 cache uploaded
// as its bits: the prefill chunks' rows within the bf16 rounding of q and the softmax weights (the emulation's bound),
// every other row as tight as the f32 runs.
void check_prefill_on_gpu(paged_batch b) {
  actorllm::cuda_test::round_cache_to_bf16(b);
  auto bits = [](const std::vector<float>& f) {
    std::vector<uint16_t> out(f.size());
    for (size_t i = 0; i < f.size(); ++i)
      out[i] = actorllm::f32_to_bf16(f[i]);
    return out;
  };
  device_array<uint16_t> k(bits(b.k_cache)), v(bits(b.v_cache));
  cuda::paged_cache_view view{k.ptr, v.ptr, b.n_blocks, b.block_size, b.n_head_kv, b.head_dim};
  view.type = cuda::kv_element::bf16;
  cuda::attention_plan plan =
      cuda::plan_paged_attention(b.geometry(), b.seqs.data(), b.n_seqs(), static_cast<int64_t>(b.block_tables.size()));
  const int64_t tiles = cuda::prefill_attention_max_tiles(b.seqs.data(), b.n_seqs());
  REQUIRE(tiles > 0);
  plan.rows_fused_from = cuda::prefill::min_rows;
  std::vector<float> out_init(b.q.size(), paged_batch::untouched);
  out_init.insert(out_init.end(), k_guard, k_guard_value);
  device_array<float> q(b.q), out(out_init);
  device_array<int32_t> positions(b.positions), seqs(b.seqs), tables(b.block_tables);
  device_array<float> workspace(std::vector<float>(static_cast<size_t>(plan.workspace_bytes / 4) + 4, std::nanf("")));
  cuda::paged_attention(plan, q.ptr, positions.ptr, seqs.ptr, tables.ptr, view, b.scale, out.ptr, workspace.ptr);
  cuda::prefill_attention(q.ptr, positions.ptr, seqs.ptr, b.n_seqs(), tiles, tables.ptr, view, b.n_head, b.scale,
                          b.window, out.ptr);
  ACTORLLM_CUDA_CHECK(cudaDeviceSynchronize());
  const std::vector<float> got = out.to_host();
  const int64_t row = b.n_head * b.head_dim;
  int64_t bad = 0;
  for (int64_t s = 0; s < b.n_seqs(); ++s) {
    const int32_t* e = b.seqs.data() + 4 * s;
    const bool fused = cuda::prefill::takes_sequence(e[1]);
    for (int64_t r = e[0]; r < e[0] + e[1]; ++r)
      for (int64_t i = 0; i < row; ++i) {
        const auto at = static_cast<size_t>(r * row + i);
        const double ref = b.expected[at], err = std::fabs(got[at] - ref);
        bad += !(err <= (fused ? 4e-3 : 5e-6 + 1e-4 * std::fabs(ref)));
      }
  }
  INFO(b.describe());
  CHECK(bad == 0);
  CHECK(guard_intact(got, b.q.size()));
}

}  // namespace

TEST_CASE(
    "cuda prefill_attention on tensor cores with a bf16 cache: chunks of several tiles beside decode rows, "
    "GQA, windows" *
    doctest::skip(!gpu_available())) {
  require_gpu();
  uint64_t seed = 5000;
  for (int64_t head_dim : {64, 128})
    for (int64_t gqa : {1, 4})
      check_prefill_on_gpu(
          make_paged_batch({{300, 100}, {5, 1}, {16, 16}, {40, 15}, {77, 1}}, 2, gqa, head_dim, 16, 0, ++seed));
  check_prefill_on_gpu(make_paged_batch({{400, 130}, {33, 20}}, 2, 2, 64, 16, 50, ++seed));
  check_prefill_on_gpu(make_paged_batch({{2048, 512}, {900, 1}}, 2, 4, 128, 16, 0, ++seed));
}
