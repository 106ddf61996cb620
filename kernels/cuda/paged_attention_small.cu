// One warp per (query row, query head) for head_dim < 32.
#include "kernels/cuda/attention_math.hpp"
#include "kernels/cuda/cuda_check.hpp"
#include "kernels/cuda/device_math.cuh"
#include "kernels/cuda/kv_element.cuh"
#include "kernels/cuda/paged_attention_small.hpp"

#include <cmath>
#include <stdexcept>
#include <string>
#include <type_traits>

namespace actorllm::cuda {
namespace {

constexpr int k_max_dim = 32;

template <class T>
struct small_params {
  const float* q;
  const int32_t* positions;
  const int32_t* seqs;
  const int32_t* block_tables;
  const T* k;
  const T* v;
  float* out;
  int64_t cache_blocks;
  int64_t window;
  int32_t n_seqs;
  int32_t block_size;
  int32_t n_head;
  int32_t n_head_kv;
  int32_t head_dim;
  float scale;             // the score scale, times k_scale for an fp8 cache
  float v_scale;           // an fp8 cache's V scale (1 otherwise)
  kv_shard_layout layout;  // the positions this rank's cache keeps (decode context parallelism)
  float* lse;              // [n_tokens, n_head] log-sum-exps, or null
};

template <class T>
__global__ void __launch_bounds__(32) small_head_attention_kernel(const small_params<T> p) {
  const int32_t row = static_cast<int32_t>(blockIdx.x), head = static_cast<int32_t>(blockIdx.y);
  const int lane = static_cast<int>(threadIdx.x);
  const int32_t* seq = nullptr;
  for (int32_t s = 0; s < p.n_seqs; ++s)
    if (attn::row_in_sequence(p.seqs + 4 * s, row)) {
      seq = p.seqs + 4 * s;
      break;
    }
  if (seq == nullptr)
    return;  // a row of no sequence: left unwritten, as by the main kernel
  const int32_t hd = p.head_dim;
  float* out = p.out + (static_cast<int64_t>(row) * p.n_head + head) * hd;
  float* lse = p.lse != nullptr ? p.lse + static_cast<int64_t>(row) * p.n_head + head : nullptr;
  const int32_t position = p.positions[row];
  const attn::row_range r = attn::local_row_range(attn::query_row_range(position, p.window, seq[3], p.block_size),
                                                  position, p.layout, seq[3], p.block_size);
  if (!r.valid) {
    if (lane < hd)
      out[lane] = NAN;
    if (lse != nullptr && lane == 0)
      *lse = NAN;
    return;
  }
  const int32_t kv_head = attn::kv_head_of(head, p.n_head, p.n_head_kv);
  const float* qrow = p.q + (static_cast<int64_t>(row) * p.n_head + head) * hd;
  float q[k_max_dim];
  float acc[k_max_dim];
#pragma unroll
  for (int d = 0; d < k_max_dim; ++d) {
    q[d] = d < hd ? qrow[d] : 0.0f;
    acc[d] = 0.0f;
  }
  attn::softmax_state st = attn::softmax_start();
  bool bad = false;
  for (int32_t pos = r.first + lane; pos <= r.last; pos += 32) {
    const attn::block_slot bs = attn::block_slot_of(pos, p.block_size);
    const int64_t block = p.block_tables[seq[2] + bs.table_index];
    if (!attn::block_in_cache(block, p.cache_blocks)) {
      bad = true;
      continue;
    }
    const int64_t base = attn::cache_offset(block, bs.offset, p.block_size, p.n_head_kv, kv_head, hd);
    float score = 0.0f;
#pragma unroll
    for (int d = 0; d < k_max_dim; ++d)
      if (d < hd)
        score += q[d] * kv_to_f32(p.k[base + d]);
    score *= p.scale;
    const float rescale = attn::softmax_rescale(st, score);  // raises the running max, scales the sum
    const float w = attn::softmax_weight(st, score);
    st.sum += w;
#pragma unroll
    for (int d = 0; d < k_max_dim; ++d)
      if (d < hd)
        acc[d] = acc[d] * rescale + w * (kv_to_f32(p.v[base + d]) * p.v_scale);
  }
  // Merge the lanes: rescale each to the warp's maximum, then sum.
  const float m = warp_max(st.max);
  const float f = st.max == -INFINITY ? 0.0f : attn::partition_weight(st.max, m);
  const float total = warp_sum(st.sum * f);
  const bool any_bad = __any_sync(0xffffffffu, bad);
  float mine = 0.0f;
#pragma unroll
  for (int d = 0; d < k_max_dim; ++d) {
    const float s = warp_sum(acc[d] * f);
    if (d == lane)
      mine = s;
  }
  // total is 0 only for a DCP rank that keeps none of the row's keys: a zero output of weight exp(-inf).
  if (lane < hd)
    out[lane] = any_bad ? NAN : (total > 0.0f ? mine / total : 0.0f);
  if (lse != nullptr && lane == 0)
    *lse = any_bad ? NAN : (total > 0.0f ? m + logf(total) : -INFINITY);
}

}  // namespace

void paged_attention_small_heads(const float* q, const int32_t* positions, const int32_t* seqs, int64_t n_seqs,
                                 const int32_t* block_tables, const paged_cache_view& cache, int64_t n_tokens,
                                 int64_t n_head, float scale, int64_t window, float* out, cudaStream_t stream,
                                 const kv_shard_layout& layout, float* lse) {
  if (cache.head_dim < 1 || cache.head_dim > small_head_dim_max)
    throw std::invalid_argument("paged_attention_small_heads: head_dim " + std::to_string(cache.head_dim) +
                                " is outside [1, " + std::to_string(small_head_dim_max) + "]");
  if (n_tokens <= 0 || n_seqs <= 0)
    return;
  if (n_head % cache.n_head_kv != 0 || n_tokens > 2147483647 || n_head > 65535)
    throw std::invalid_argument("paged_attention_small_heads: n_head " + std::to_string(n_head) +
                                " is not a multiple of n_head_kv or the grid is too large");
  if (!(cache.k_scale > 0.0f && cache.v_scale > 0.0f && std::isfinite(cache.k_scale) && std::isfinite(cache.v_scale)))
    throw std::invalid_argument("paged_attention_small_heads: cache scales must be positive and finite");
  dispatch_kv_element(cache.type, [&](const auto* tag) {
    using T = std::remove_const_t<std::remove_pointer_t<decltype(tag)>>;
    small_params<T> p{};
    p.q = q;
    p.positions = positions;
    p.seqs = seqs;
    p.block_tables = block_tables;
    p.k = static_cast<const T*>(cache.k);
    p.v = static_cast<const T*>(cache.v);
    p.out = out;
    p.cache_blocks = cache.n_blocks;
    p.window = window;
    p.n_seqs = static_cast<int32_t>(n_seqs);
    p.block_size = static_cast<int32_t>(cache.block_size);
    p.n_head = static_cast<int32_t>(n_head);
    p.n_head_kv = static_cast<int32_t>(cache.n_head_kv);
    p.head_dim = static_cast<int32_t>(cache.head_dim);
    // fp8: q . (code * k_scale) * scale = q . code * (scale * k_scale); the other types hold the values themselves.
    p.scale = is_fp8_kv<T> ? scale * cache.k_scale : scale;
    p.v_scale = is_fp8_kv<T> ? cache.v_scale : 1.0f;
    p.layout = layout;
    p.lse = lse;
    small_head_attention_kernel<T>
        <<<dim3(static_cast<unsigned>(n_tokens), static_cast<unsigned>(n_head)), 32, 0, stream>>>(p);
  });
  ACTORLLM_CUDA_CHECK_LAUNCH();
}

}  // namespace actorllm::cuda
