// Paged attention (flash-decoding with an optional split-K merge) and the KV-cache write on the GPU. The math is
// in attention_math.hpp and the geometry in attention_plan.hpp, both tested on the CPU; this file is the thread
// layout around them.
//
// Attention CTA = 4 warps, one (query row, kv head, head chunk, partition). The partition is walked in tiles of
// 64 positions: (1) each warp takes every 4th position of the tile, its lanes hold head_dim / 32 consecutive
// elements of the K row, and a warp reduction gives the score of every head of the chunk, stored in shared memory;
// (2) one warp per head updates that head's online-softmax state and turns the tile's scores into weights;
// (3) each warp accumulates weight * V for its positions into registers. At the end the 4 warps' accumulators are
// summed in shared memory and either normalised into `out` or, when split, stored unnormalised with the
// partition's max and sum for the merge kernel.
#include "kernels/cuda/attention_math.hpp"
#include "kernels/cuda/cuda_check.hpp"
#include "kernels/cuda/device_math.cuh"
#include "kernels/cuda/kv_element.cuh"
#include "kernels/cuda/paged_attention.hpp"

#include <fmt/format.h>

#include <cmath>
#include <cstdint>
#include <stdexcept>
#include <type_traits>

namespace actorllm::cuda {
namespace {

constexpr int k_threads = static_cast<int>(attention_threads);
constexpr int k_warps = static_cast<int>(attention_warps);
constexpr int k_tile = static_cast<int>(attention_tile);
constexpr unsigned k_full_mask = 0xffffffffu;

// E consecutive cache or activation elements as f32, with 16- or 8-byte loads where E allows (the launcher checks
// that the base pointers are 16-byte aligned; every offset used here is a multiple of E elements). fp8 codes come
// out as their e4m3 values, unscaled.
template <int E, class T>
__device__ inline void load_chunk(const T* __restrict__ src, float (&dst)[E]) {
  if constexpr (std::is_same_v<T, float> && E % 4 == 0) {
#pragma unroll
    for (int i = 0; i < E; i += 4) {
      const float4 f = *reinterpret_cast<const float4*>(src + i);
      dst[i] = f.x;
      dst[i + 1] = f.y;
      dst[i + 2] = f.z;
      dst[i + 3] = f.w;
    }
  } else if constexpr (std::is_same_v<T, float> && E % 2 == 0) {
#pragma unroll
    for (int i = 0; i < E; i += 2) {
      const float2 f = *reinterpret_cast<const float2*>(src + i);
      dst[i] = f.x;
      dst[i + 1] = f.y;
    }
  } else if constexpr ((std::is_same_v<T, __half> || std::is_same_v<T, __nv_bfloat16>)&&E % 4 == 0) {
#pragma unroll
    for (int i = 0; i < E; i += 4) {  // 8 bytes: four 16-bit elements
      const uint2 raw = *reinterpret_cast<const uint2*>(src + i);
      const T* h = reinterpret_cast<const T*>(&raw);
#pragma unroll
      for (int j = 0; j < 4; ++j)
        dst[i + j] = kv_to_f32(h[j]);
    }
  } else if constexpr (is_fp8_kv<T> && E % 4 == 0) {
#pragma unroll
    for (int i = 0; i < E; i += 4) {  // 4 bytes: four codes
      const uint32_t raw = *reinterpret_cast<const uint32_t*>(src + i);
#pragma unroll
      for (int j = 0; j < 4; ++j)
        dst[i + j] = kvq::fp8_e4m3_decode(static_cast<uint8_t>(raw >> (8 * j)));
    }
  } else {
#pragma unroll
    for (int i = 0; i < E; ++i)
      dst[i] = kv_to_f32(src[i]);
  }
}

// Called by a whole warp: the first sequence whose query rows contain `row`, or -1.
__device__ inline int find_sequence(const int32_t* __restrict__ seqs, int n_seqs, int64_t row) {
  const int lane = static_cast<int>(threadIdx.x % 32);
  for (int base = 0; base < n_seqs; base += 32) {
    const int s = base + lane;
    const bool hit = s < n_seqs && attn::row_in_sequence(seqs + 4 * static_cast<int64_t>(s), row);
    const unsigned mask = __ballot_sync(k_full_mask, hit);
    if (mask != 0)
      return base + __ffs(static_cast<int>(mask)) - 1;
  }
  return -1;
}

// The CTA's sequence entry in shared memory (found by warp 0); returns false (for every thread) when the row
// belongs to none.
__device__ inline bool load_sequence(const int32_t* __restrict__ seqs, int n_seqs, int64_t row, int32_t* seq_info,
                                     int* seq_found) {
  if (threadIdx.x < 32) {
    const int s = find_sequence(seqs, n_seqs, row);
    if (threadIdx.x == 0)
      *seq_found = s;
    if (s >= 0 && threadIdx.x < 4)
      seq_info[threadIdx.x] = seqs[4 * static_cast<int64_t>(s) + threadIdx.x];
  }
  __syncthreads();
  return *seq_found >= 0;
}

template <class T>
struct attention_params {
  const float* q;
  const int32_t* positions;
  const int32_t* seqs;
  const int32_t* block_tables;
  const T* k;
  const T* v;
  int64_t cache_blocks;
  int64_t window;
  int32_t block_size;
  int32_t n_head;
  int32_t n_head_kv;
  int32_t head_chunk;
  int32_t partition_size;
  int32_t n_partitions;
  int32_t n_seqs;
  bool split;
  float scale;    // the score scale, times k_scale for an fp8 cache
  float v_scale;  // an fp8 cache's V scale (1 otherwise)
  float* out;
  float* ws_acc;  // split: [n_tokens, n_head, n_partitions, HD]
  float* ws_max;  // split: [n_tokens, n_head, n_partitions]
  float* ws_sum;
  kv_shard_layout layout;  // the positions this rank's cache keeps (decode context parallelism)
  float* lse;              // [n_tokens, n_head] log-sum-exps (paged_attention_partial), or null
  int32_t skip_from_rows;  // rows of sequences with at least this many query rows are the prefill kernel's (0: none)
};

template <int HD, class T>
__global__ void __launch_bounds__(k_threads, 4) paged_attention_kernel(const attention_params<T> p) {
  constexpr int E = HD / 32;  // elements per lane
  constexpr int REP = static_cast<int>(attention_head_chunk(HD));
  __shared__ float scores[REP][k_tile];
  __shared__ float state_max[REP];
  __shared__ float state_sum[REP];
  __shared__ float state_correction[REP];
  __shared__ float partial[k_warps][REP][HD];
  __shared__ int32_t seq_info[4];
  __shared__ int seq_found;

  const int lane = static_cast<int>(threadIdx.x % 32);
  const int warp = static_cast<int>(threadIdx.x / 32);
  const int64_t row = blockIdx.x;
  const auto part = static_cast<int32_t>(blockIdx.z);
  if (!load_sequence(p.seqs, p.n_seqs, row, seq_info, &seq_found))
    return;  // a row of no sequence is left as it is
  if (p.skip_from_rows > 0 && seq_info[1] >= p.skip_from_rows)
    return;  // a prefill chunk's row: the tensor-core kernel writes it

  const attn::head_group group =
      attn::head_group_of(static_cast<int32_t>(blockIdx.y), p.n_head, p.n_head_kv, p.head_chunk);
  const int n_heads = static_cast<int>(group.n_heads);
  const int64_t out_row = row * p.n_head + group.first_head;  // (row, first head) as a row of HD
  const int32_t position = p.positions[row];
  const attn::row_range range =
      attn::local_row_range(attn::query_row_range(position, p.window, seq_info[3], p.block_size), position, p.layout,
                            seq_info[3], p.block_size);
  // A bad position, or a range longer than the plan provided for (seqs differing from the plan's host copy): a
  // NaN row, written here when not split and by the merge otherwise.
  if (!range.valid || attn::partition_count(range, p.partition_size) > p.n_partitions) {
    if (!p.split && part == 0)
      for (int i = static_cast<int>(threadIdx.x); i < n_heads * HD; i += k_threads) {
        p.out[out_row * HD + i] = NAN;
        if (p.lse != nullptr && i % HD == 0)
          p.lse[out_row + i / HD] = NAN;
      }
    return;
  }
  // A DCP rank that keeps none of the row's keys: a zero output of weight exp(-inf) (the merge writes it when split).
  if (attn::range_empty(range)) {
    if (!p.split && part == 0)
      for (int i = static_cast<int>(threadIdx.x); i < n_heads * HD; i += k_threads) {
        p.out[out_row * HD + i] = 0.0f;
        if (p.lse != nullptr && i % HD == 0)
          p.lse[out_row + i / HD] = -INFINITY;
      }
    return;
  }
  const attn::position_span span = attn::partition_span(range, part, p.partition_size);
  if (span.begin >= span.end)
    return;  // past this row's last partition: the merge does not read it

  float q[REP][E];
  float acc[REP][E];
#pragma unroll
  for (int j = 0; j < REP; ++j) {
    if (j < n_heads) {
      load_chunk<E>(p.q + (out_row + j) * HD + lane * E, q[j]);
    } else {
#pragma unroll
      for (int e = 0; e < E; ++e)
        q[j][e] = 0.0f;
    }
#pragma unroll
    for (int e = 0; e < E; ++e)
      acc[j][e] = 0.0f;
  }
  if (threadIdx.x < REP) {
    const attn::softmax_state start = attn::softmax_start();
    state_max[threadIdx.x] = start.max;
    state_sum[threadIdx.x] = start.sum;
  }
  __syncthreads();

  const int32_t* table = p.block_tables + seq_info[2];
  const int32_t block_size = p.block_size;
  for (int32_t tile = span.begin; tile < span.end; tile += k_tile) {
    const int n = span.end - tile < k_tile ? span.end - tile : k_tile;
    // (1) scores of the tile; the table entries read are those of blocks inside the range only.
    for (int t = warp; t < n; t += k_warps) {
      const attn::block_slot slot = attn::block_slot_of(tile + t, block_size);
      const int64_t block = table[slot.table_index];
      const bool in_cache = attn::block_in_cache(block, p.cache_blocks);
      float k[E];
      if (in_cache) {
        load_chunk<E>(
            p.k + attn::cache_offset(block, slot.offset, p.block_size, p.n_head_kv, group.kv_head, HD) + lane * E, k);
      } else {
#pragma unroll
        for (int e = 0; e < E; ++e)
          k[e] = 0.0f;
      }
#pragma unroll
      for (int j = 0; j < REP; ++j) {
        if (j < n_heads) {
          float dot = 0.0f;
#pragma unroll
          for (int e = 0; e < E; ++e)
            dot = fmaf(q[j][e], k[e], dot);
          dot = warp_sum(dot);
          if (lane == 0)
            scores[j][t] = in_cache ? dot * p.scale : NAN;
        }
      }
    }
    __syncthreads();
    // (2) online softmax, one warp per head.
    for (int j = warp; j < n_heads; j += k_warps) {
      float tile_max = -INFINITY;
      for (int t = lane; t < n; t += 32)
        tile_max = fmaxf(tile_max, scores[j][t]);
      tile_max = warp_max(tile_max);
      attn::softmax_state state{state_max[j], state_sum[j]};
      const float correction = attn::softmax_rescale(state, tile_max);
      float sum = 0.0f;
      for (int t = lane; t < n; t += 32) {
        const float w = attn::softmax_weight(state, scores[j][t]);
        scores[j][t] = w;
        sum += w;
      }
      sum = warp_sum(sum);
      __syncwarp();  // every lane's read of the state before lane 0 writes it (a shuffle does not order memory)
      if (lane == 0) {
        state_max[j] = state.max;
        state_sum[j] = state.sum + sum;
        state_correction[j] = correction;
      }
    }
    __syncthreads();
    // (3) acc = acc * correction + sum over the warp's positions of weight * v.
#pragma unroll
    for (int j = 0; j < REP; ++j) {
      const float correction = j < n_heads ? state_correction[j] : 1.0f;
#pragma unroll
      for (int e = 0; e < E; ++e)
        acc[j][e] *= correction;
    }
    for (int t = warp; t < n; t += k_warps) {
      const attn::block_slot slot = attn::block_slot_of(tile + t, block_size);
      const int64_t block = table[slot.table_index];
      float v[E];
      if (attn::block_in_cache(block, p.cache_blocks)) {
        load_chunk<E>(
            p.v + attn::cache_offset(block, slot.offset, p.block_size, p.n_head_kv, group.kv_head, HD) + lane * E, v);
        if constexpr (is_fp8_kv<T>) {
#pragma unroll
          for (int e = 0; e < E; ++e)
            v[e] *= p.v_scale;
        }
      } else {
#pragma unroll
        for (int e = 0; e < E; ++e)
          v[e] = 0.0f;  // its weight is NaN already
      }
#pragma unroll
      for (int j = 0; j < REP; ++j) {
        if (j < n_heads) {
          const float w = scores[j][t];
#pragma unroll
          for (int e = 0; e < E; ++e)
            acc[j][e] = fmaf(w, v[e], acc[j][e]);
        }
      }
    }
    __syncthreads();  // the next tile overwrites scores and corrections
  }

  // Sum the warps' accumulators (in warp order), then normalise or hand the partition to the merge.
#pragma unroll
  for (int j = 0; j < REP; ++j)
#pragma unroll
    for (int e = 0; e < E; ++e)
      partial[warp][j][lane * E + e] = acc[j][e];
  __syncthreads();
  for (int i = static_cast<int>(threadIdx.x); i < n_heads * HD; i += k_threads) {
    const int j = i / HD, d = i % HD;
    float sum = 0.0f;
#pragma unroll
    for (int w = 0; w < k_warps; ++w)
      sum += partial[w][j][d];
    if (!p.split) {
      p.out[(out_row + j) * HD + d] = sum * (1.0f / state_sum[j]);
      if (p.lse != nullptr && d == 0)
        p.lse[out_row + j] = state_max[j] + logf(state_sum[j]);
    } else {
      const int64_t index = (out_row + j) * p.n_partitions + part;
      p.ws_acc[index * HD + d] = sum;
      if (d == 0) {
        p.ws_max[index] = state_max[j];
        p.ws_sum[index] = state_sum[j];
      }
    }
  }
}

struct merge_params {
  const int32_t* positions;
  const int32_t* seqs;
  int32_t n_seqs;
  int32_t block_size;
  int32_t n_head;
  int32_t head_dim;
  int64_t window;
  int32_t partition_size;
  int32_t n_partitions;
  const float* ws_acc;
  const float* ws_max;
  const float* ws_sum;
  float* out;
  kv_shard_layout layout;
  float* lse;              // or null
  int32_t skip_from_rows;  // as attention_params::skip_from_rows
};

// One CTA per (row, head): out = sum_p w_p acc_p / sum_p w_p sum_p with w_p = exp(max_p - max over partitions).
__global__ void __launch_bounds__(attention_merge_threads) merge_partitions_kernel(const merge_params p) {
  extern __shared__ float weights[];  // [n_partitions]
  __shared__ int32_t seq_info[4];
  __shared__ int seq_found;
  const int64_t row = blockIdx.x, head = blockIdx.y;
  if (!load_sequence(p.seqs, p.n_seqs, row, seq_info, &seq_found))
    return;
  if (p.skip_from_rows > 0 && seq_info[1] >= p.skip_from_rows)
    return;  // a prefill chunk's row: the tensor-core kernel writes it
  float* out = p.out + (row * p.n_head + head) * p.head_dim;
  float* lse = p.lse != nullptr ? p.lse + row * p.n_head + head : nullptr;
  const int32_t position = p.positions[row];
  const attn::row_range range =
      attn::local_row_range(attn::query_row_range(position, p.window, seq_info[3], p.block_size), position, p.layout,
                            seq_info[3], p.block_size);
  const int32_t count = range.valid ? attn::partition_count(range, p.partition_size) : 0;
  if (!range.valid || count > p.n_partitions) {
    for (int64_t d = threadIdx.x; d < p.head_dim; d += blockDim.x)
      out[d] = NAN;
    if (lse != nullptr && threadIdx.x == 0)
      *lse = NAN;
    return;
  }
  if (count == 0) {  // a DCP rank that keeps none of the row's keys
    for (int64_t d = threadIdx.x; d < p.head_dim; d += blockDim.x)
      out[d] = 0.0f;
    if (lse != nullptr && threadIdx.x == 0)
      *lse = -INFINITY;
    return;
  }
  const int64_t base = (row * p.n_head + head) * p.n_partitions;
  float global_max = -INFINITY;
  for (int32_t i = 0; i < count; ++i)
    global_max = fmaxf(global_max, p.ws_max[base + i]);
  for (int32_t i = static_cast<int32_t>(threadIdx.x); i < count; i += static_cast<int32_t>(blockDim.x))
    weights[i] = attn::partition_weight(p.ws_max[base + i], global_max);
  __syncthreads();
  float total = 0.0f;
  for (int32_t i = 0; i < count; ++i)
    total += weights[i] * p.ws_sum[base + i];
  const float inv = 1.0f / total;
  for (int64_t d = threadIdx.x; d < p.head_dim; d += blockDim.x) {
    float sum = 0.0f;
    for (int32_t i = 0; i < count; ++i)
      sum += weights[i] * p.ws_acc[(base + i) * p.head_dim + d];
    out[d] = sum * inv;
  }
  if (lse != nullptr && threadIdx.x == 0)
    *lse = global_max + logf(total);
}

// One CTA per (row, head) of the merged heads: decode context parallelism's merge of the ranks' partial attention
// (attn::partition_weight of each part's log-sum-exp against their max, parts in order).
__global__ void __launch_bounds__(128)
    merge_rank_partials_kernel(const float* parts, const float* lses, int32_t n_parts, int64_t n_tokens,
                               int32_t n_head_all, int32_t head_begin, int32_t n_head, int32_t head_dim, float* out) {
  const int64_t row = blockIdx.x;
  const int32_t head = static_cast<int32_t>(blockIdx.y);
  const int64_t pair = row * n_head_all + head_begin + head;
  const int64_t part_pairs = n_tokens * n_head_all;
  float m = -INFINITY;
  for (int32_t i = 0; i < n_parts; ++i)
    m = fmaxf(m, lses[i * part_pairs + pair]);
  float total = 0.0f;
  for (int32_t i = 0; i < n_parts; ++i)
    total += attn::partition_weight(lses[i * part_pairs + pair], m);
  float* o = out + (row * n_head + head) * head_dim;
  for (int32_t d = static_cast<int32_t>(threadIdx.x); d < head_dim; d += static_cast<int32_t>(blockDim.x)) {
    float sum = 0.0f;
    for (int32_t i = 0; i < n_parts; ++i)
      sum += attn::partition_weight(lses[i * part_pairs + pair], m) * parts[(i * part_pairs + pair) * head_dim + d];
    o[d] = total > 0.0f ? sum / total : 0.0f;
  }
}

// One CTA per token: its k and v rows to their slot, rounded to the cache's type (16 bytes at a time for an f32
// cache when the row allows).
template <class T>
__global__ void __launch_bounds__(128)
    write_kv_kernel(T* __restrict__ k_cache, T* __restrict__ v_cache, const float* __restrict__ k,
                    const float* __restrict__ v, const int64_t* __restrict__ slots, int64_t row, int64_t capacity,
                    float k_scale, float v_scale) {
  const int64_t t = blockIdx.x;
  const int64_t slot = slots[t];
  if (slot < 0 || slot >= capacity)
    return;
  const float* ks = k + t * row;
  const float* vs = v + t * row;
  T* kd = k_cache + slot * row;
  T* vd = v_cache + slot * row;
  if constexpr (std::is_same_v<T, float>) {
    if (row % 4 == 0) {
      for (int64_t i = threadIdx.x; i < row / 4; i += blockDim.x) {
        reinterpret_cast<float4*>(kd)[i] = reinterpret_cast<const float4*>(ks)[i];
        reinterpret_cast<float4*>(vd)[i] = reinterpret_cast<const float4*>(vs)[i];
      }
      return;
    }
  }
  for (int64_t i = threadIdx.x; i < row; i += blockDim.x) {
    kd[i] = kv_from_f32<T>(ks[i], k_scale);
    vd[i] = kv_from_f32<T>(vs[i], v_scale);
  }
}

bool aligned16(const void* ptr) { return reinterpret_cast<uintptr_t>(ptr) % 16 == 0; }

[[noreturn]] void fail(const char* op, const std::string& what) {
  throw std::invalid_argument(std::string{op} + ": " + what);
}

template <int HD, class T>
void launch_attention(const attention_plan& plan, const attention_params<T>& params, cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>(plan.grid[0]), static_cast<unsigned>(plan.grid[1]),
                  static_cast<unsigned>(plan.grid[2]));
  paged_attention_kernel<HD, T><<<grid, k_threads, 0, stream>>>(params);
  ACTORLLM_CUDA_CHECK_LAUNCH();
}

// The attention kernel for the cache's element type T and the plan's head size.
template <class T>
void launch_attention_typed(const attention_plan& plan, attention_params<T> params, const paged_cache_view& cache,
                            cudaStream_t stream) {
  params.k = static_cast<const T*>(cache.k);
  params.v = static_cast<const T*>(cache.v);
  if constexpr (is_fp8_kv<T>) {
    params.scale *= cache.k_scale;  // q . (code * k_scale) * scale = q . code * (scale * k_scale)
    params.v_scale = cache.v_scale;
  }
  switch (plan.geometry.head_dim) {
    case 32:
      return launch_attention<32>(plan, params, stream);
    case 64:
      return launch_attention<64>(plan, params, stream);
    case 96:
      return launch_attention<96>(plan, params, stream);
    case 128:
      return launch_attention<128>(plan, params, stream);
    case 160:
      return launch_attention<160>(plan, params, stream);
    case 192:
      return launch_attention<192>(plan, params, stream);
    case 224:
      return launch_attention<224>(plan, params, stream);
    case 256:
      return launch_attention<256>(plan, params, stream);
    default:
      fail("paged_attention", fmt::format("head_dim {} is not supported", plan.geometry.head_dim));
  }
}

}  // namespace

void check_cache_scales(const paged_cache_view& cache, const char* op) {
  if (!(cache.k_scale > 0.0f && cache.v_scale > 0.0f && std::isfinite(cache.k_scale) && std::isfinite(cache.v_scale)))
    fail(op, fmt::format("cache scales must be positive and finite, got k {} v {}", cache.k_scale, cache.v_scale));
}

void write_kv(const paged_cache_view& cache, const float* k, const float* v, const int64_t* slots, int64_t n_tokens,
              cudaStream_t stream) {
  if (cache.n_blocks < 0 || cache.block_size <= 0 || cache.n_head_kv <= 0 || cache.head_dim <= 0)
    fail("write_kv", fmt::format("cache view [{}, {}, {}, {}] is not a cache shape", cache.n_blocks, cache.block_size,
                                 cache.n_head_kv, cache.head_dim));
  if (n_tokens < 0 || n_tokens > INT32_MAX)
    fail("write_kv", fmt::format("n_tokens {} outside [0, {}]", n_tokens, INT32_MAX));
  if (n_tokens == 0)
    return;
  if (cache.k == nullptr || cache.v == nullptr || k == nullptr || v == nullptr || slots == nullptr)
    fail("write_kv", "null pointer");
  check_cache_scales(cache, "write_kv");
  const int64_t row = cache.n_head_kv * cache.head_dim;
  if (row % 4 == 0 && !(aligned16(cache.k) && aligned16(cache.v) && aligned16(k) && aligned16(v)))
    fail("write_kv", "k, v and the cache must be 16-byte aligned");
  dispatch_kv_element(cache.type, [&](const auto* tag) {
    using T = std::remove_const_t<std::remove_pointer_t<decltype(tag)>>;
    write_kv_kernel<T><<<static_cast<unsigned>(n_tokens), 128, 0, stream>>>(
        static_cast<T*>(cache.k), static_cast<T*>(cache.v), k, v, slots, row, cache.n_blocks * cache.block_size,
        cache.k_scale, cache.v_scale);
  });
  ACTORLLM_CUDA_CHECK_LAUNCH();
}

void paged_attention(const attention_plan& plan, const float* q, const int32_t* positions, const int32_t* seqs,
                     const int32_t* block_tables, const paged_cache_view& cache, float scale, float* out,
                     void* workspace, cudaStream_t stream, const kv_shard_layout& layout, float* lse) {
  const attention_geometry& g = plan.geometry;
  if (cache.head_dim != g.head_dim || cache.n_head_kv != g.n_head_kv || cache.block_size != g.block_size ||
      cache.n_blocks < 0)
    fail("paged_attention", fmt::format("cache [{}, {}, {}, {}] does not match the plan (block_size {}, n_head_kv "
                                        "{}, head_dim {})",
                                        cache.n_blocks, cache.block_size, cache.n_head_kv, cache.head_dim, g.block_size,
                                        g.n_head_kv, g.head_dim));
  if (plan.empty())
    return;
  if (q == nullptr || positions == nullptr || seqs == nullptr || block_tables == nullptr || out == nullptr ||
      cache.k == nullptr || cache.v == nullptr)
    fail("paged_attention", "null pointer");
  if (q == out)
    fail("paged_attention", "out must not overlap q");
  if (!(aligned16(q) && aligned16(out) && aligned16(cache.k) && aligned16(cache.v)))
    fail("paged_attention", "q, out and the cache must be 16-byte aligned");
  if (plan.split && (workspace == nullptr || !aligned16(workspace)))
    fail("paged_attention",
         fmt::format("the plan needs a 16-byte aligned workspace of {} bytes", plan.workspace_bytes));
  check_cache_scales(cache, "paged_attention");
  switch (g.head_dim) {  // checked before any launch
    case 32:
    case 64:
    case 96:
    case 128:
    case 160:
    case 192:
    case 224:
    case 256:
      break;
    default:
      fail("paged_attention", fmt::format("head_dim {} is not supported", g.head_dim));
  }

  auto* ws = static_cast<char*>(workspace);
  float* ws_acc = plan.split ? reinterpret_cast<float*>(ws) : nullptr;
  float* ws_max = plan.split ? reinterpret_cast<float*>(ws + plan.workspace_max_offset) : nullptr;
  float* ws_sum = plan.split ? reinterpret_cast<float*>(ws + plan.workspace_sum_offset) : nullptr;
  dispatch_kv_element(cache.type, [&](const auto* tag) {
    using T = std::remove_const_t<std::remove_pointer_t<decltype(tag)>>;
    attention_params<T> params{};  // the cache pointers and scales: launch_attention_typed
    params.q = q;
    params.positions = positions;
    params.seqs = seqs;
    params.block_tables = block_tables;
    params.cache_blocks = cache.n_blocks;
    params.window = g.window;
    params.block_size = static_cast<int32_t>(g.block_size);
    params.n_head = static_cast<int32_t>(g.n_head);
    params.n_head_kv = static_cast<int32_t>(g.n_head_kv);
    params.head_chunk = static_cast<int32_t>(plan.head_chunk);
    params.partition_size = static_cast<int32_t>(plan.partition_size);
    params.n_partitions = static_cast<int32_t>(plan.n_partitions);
    params.n_seqs = static_cast<int32_t>(plan.n_seqs);
    params.split = plan.split;
    params.scale = scale;
    params.v_scale = 1.0f;
    params.out = out;
    params.layout = layout;
    params.lse = lse;
    params.ws_acc = ws_acc;
    params.ws_max = ws_max;
    params.ws_sum = ws_sum;
    params.skip_from_rows = static_cast<int32_t>(plan.rows_fused_from);
    launch_attention_typed<T>(plan, params, cache, stream);
  });
  if (!plan.split)
    return;
  merge_params merge{};
  merge.positions = positions;
  merge.seqs = seqs;
  merge.n_seqs = static_cast<int32_t>(plan.n_seqs);
  merge.block_size = static_cast<int32_t>(g.block_size);
  merge.n_head = static_cast<int32_t>(g.n_head);
  merge.head_dim = static_cast<int32_t>(g.head_dim);
  merge.window = g.window;
  merge.partition_size = static_cast<int32_t>(plan.partition_size);
  merge.n_partitions = static_cast<int32_t>(plan.n_partitions);
  merge.ws_acc = ws_acc;
  merge.ws_max = ws_max;
  merge.ws_sum = ws_sum;
  merge.out = out;
  merge.layout = layout;
  merge.lse = lse;
  merge.skip_from_rows = static_cast<int32_t>(plan.rows_fused_from);
  const dim3 grid(static_cast<unsigned>(plan.merge_grid[0]), static_cast<unsigned>(plan.merge_grid[1]));
  merge_partitions_kernel<<<grid, static_cast<unsigned>(plan.merge_threads),
                            static_cast<size_t>(plan.merge_shared_bytes), stream>>>(merge);
  ACTORLLM_CUDA_CHECK_LAUNCH();
}

void merge_attention_partials(const float* parts, const float* lses, int64_t n_parts, int64_t n_tokens,
                              int64_t n_head_all, int64_t head_begin, int64_t n_head, int64_t head_dim, float* out,
                              cudaStream_t stream) {
  if (n_tokens == 0 || n_head == 0)
    return;
  if (parts == nullptr || lses == nullptr || out == nullptr || n_parts < 1 || n_tokens < 0 || n_tokens > INT32_MAX ||
      n_head > 65535 || head_begin < 0 || head_begin + n_head > n_head_all || head_dim < 1)
    fail("merge_attention_partials", fmt::format("{} parts of [{}, {}, {}] for heads {}+{}: not a merge", n_parts,
                                                 n_tokens, n_head_all, head_dim, head_begin, n_head));
  merge_rank_partials_kernel<<<dim3(static_cast<unsigned>(n_tokens), static_cast<unsigned>(n_head)), 128, 0, stream>>>(
      parts, lses, static_cast<int32_t>(n_parts), n_tokens, static_cast<int32_t>(n_head_all),
      static_cast<int32_t>(head_begin), static_cast<int32_t>(n_head), static_cast<int32_t>(head_dim), out);
  ACTORLLM_CUDA_CHECK_LAUNCH();
}

}  // namespace actorllm::cuda
