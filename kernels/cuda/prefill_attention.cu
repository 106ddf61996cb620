// The tensor-core prefill attention (see prefill_attention.hpp). CTA = 4 warps, (64 query rows of one sequence,
// one query head). Per 64-key tile of the rows' key span:
//   1. the first 64 threads resolve each key's cache row through the block table (or mark it unloaded or bad);
//      all threads copy the K and V rows into shared memory as 16-bit floats (zeros for unloaded and bad keys, so a
//      masked weight never meets a NaN);
//   2. warp w computes its 16 rows' scores S = Q K^T (4 MMA tiles of 16 x 16 over head_dim / 16 steps) into shared
//      memory;
//   3. warp w masks and scales its rows' scores, updates each row's running max and sum (attention_math's online
//      softmax), writes the weights P as 16-bit floats and rescales its rows of the output accumulator;
//   4. warp w adds P V to its rows of the accumulator (head_dim / 16 MMA tiles over 4 steps of 16 keys), loading and
//      storing the accumulator through shared memory: the fragment's element order is opaque, so a per-row rescale
//      cannot be applied in registers.
// At the end each warp divides its rows by their sums (times an fp8 cache's v_scale) into `out`.
#include "kernels/cuda/cuda_check.hpp"
#include "kernels/cuda/device_math.cuh"
#include "kernels/cuda/kv_element.cuh"
#include "kernels/cuda/prefill_attention.hpp"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <mma.h>

#include <fmt/format.h>

#include <cstdint>
#include <stdexcept>
#include <type_traits>

namespace actorllm::cuda {
namespace {

namespace wmma = nvcuda::wmma;

constexpr int k_rows = prefill::tile_rows;
constexpr int k_keys = prefill::tile_keys;
constexpr int k_threads = prefill::threads;
constexpr unsigned k_full_mask = 0xffffffffu;

// Row flags in shared memory.
constexpr int32_t flag_valid = 1;    // a query row of the tile with a valid position
constexpr int32_t flag_spoiled = 2;  // a bad block id lies in the row's range: the row comes out NaN

// A key's cache row: an element offset, or one of these.
constexpr int64_t key_unloaded = -1;  // outside the tile's key span: zeros, masked
constexpr int64_t key_bad = -2;       // a block id outside the cache: zeros, and the rows whose range holds it spoil

// The 16-bit type the MMAs take for a cache of T: f16 for an f16 cache (no rounding of its values), bf16 otherwise
// (bf16 caches as they are; fp8 values are exact in bf16).
template <class T>
using mma_type = std::conditional_t<std::is_same_v<T, __half>, __half, __nv_bfloat16>;

template <class T>
struct prefill_params {
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
  int32_t max_tiles;
  float score_scale;  // the softmax scale, times k_scale for an fp8 cache
  float v_scale;      // an fp8 cache's V scale (1 otherwise)
  float* out;
};

// Copies 8 consecutive cache elements (one 16-byte group of the 16-bit row in shared memory) as C.
template <class T, class C>
__device__ inline void copy_group(const T* __restrict__ src, C* dst) {
  if constexpr (std::is_same_v<T, C>) {
    *reinterpret_cast<uint4*>(dst) = *reinterpret_cast<const uint4*>(src);
  } else if constexpr (is_fp8_kv<T>) {
    const uint2 raw = *reinterpret_cast<const uint2*>(src);
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      const uint32_t word = j < 4 ? raw.x : raw.y;
      dst[j] = from_f32<C>(kvq::fp8_e4m3_decode(static_cast<uint8_t>(word >> (8 * (j % 4)))));
    }
  } else {
#pragma unroll
    for (int j = 0; j < 8; ++j)
      dst[j] = from_f32<C>(kv_to_f32(src[j]));
  }
}

template <int HD, class T>
__global__ void __launch_bounds__(k_threads) prefill_attention_kernel(const prefill_params<T> p) {
  using C = mma_type<T>;
  constexpr prefill_smem_layout L = prefill_smem_layout_of(HD);
  constexpr int ld16 = static_cast<int>(L.ld16);
  constexpr int ld_s = static_cast<int>(L.ld_scores);
  constexpr int ld_p = static_cast<int>(L.ld_weights);
  constexpr int ld_o = static_cast<int>(L.ld_out);
  constexpr int groups = HD / 8;  // 16-byte groups of a 16-bit row

  extern __shared__ __align__(128) unsigned char smem[];
  C* const qs = reinterpret_cast<C*>(smem + L.q);
  C* const ks = reinterpret_cast<C*>(smem + L.k);
  C* const vs = reinterpret_cast<C*>(smem + L.v);
  float* const ss = reinterpret_cast<float*>(smem + L.scores);
  C* const ps = reinterpret_cast<C*>(smem + L.weights);
  float* const os = reinterpret_cast<float*>(smem + L.out);
  float* const row_max = reinterpret_cast<float*>(smem + L.row_max);
  float* const row_sum = reinterpret_cast<float*>(smem + L.row_sum);
  int32_t* const row_first = reinterpret_cast<int32_t*>(smem + L.row_first);
  int32_t* const row_last = reinterpret_cast<int32_t*>(smem + L.row_last);
  int32_t* const row_flags = reinterpret_cast<int32_t*>(smem + L.row_flags);
  int64_t* const key_source = reinterpret_cast<int64_t*>(smem + L.key_source);
  __shared__ int32_t span_first, span_last;

  const prefill::row_tile tile = prefill::row_tile_of(static_cast<int32_t>(blockIdx.x), p.max_tiles, p.seqs);
  if (tile.n_rows == 0)
    return;  // uniform over the CTA: every thread reads the same entry
  const int32_t head = static_cast<int32_t>(blockIdx.y);
  const int32_t kv_head = attn::kv_head_of(head, p.n_head, p.n_head_kv);
  const int32_t* seq = p.seqs + 4 * static_cast<int64_t>(tile.seq);
  const int32_t table_begin = seq[2], n_seq_blocks = seq[3];
  const int tid = static_cast<int>(threadIdx.x);
  const int lane = tid % 32, warp = tid / 32;

  // The rows' ranges and state, and the tile's key span.
  if (tid == 0) {
    span_first = INT32_MAX;
    span_last = -1;
  }
  __syncthreads();
  if (tid < k_rows) {
    attn::row_range r{0, -1, false};
    if (tid < tile.n_rows)
      r = attn::query_row_range(p.positions[tile.first_row + tid], p.window, n_seq_blocks, p.block_size);
    row_first[tid] = r.first;
    row_last[tid] = r.last;
    row_flags[tid] = r.valid ? flag_valid : 0;
    const attn::softmax_state s = attn::softmax_start();
    row_max[tid] = s.max;
    row_sum[tid] = s.sum;
    if (r.valid) {
      atomicMin(&span_first, r.first);
      atomicMax(&span_last, r.last);
    }
  }
  // Q rows as 16-bit floats (zeros past the tile's rows), the accumulator zeroed.
  for (int i = tid; i < k_rows * HD / 4; i += k_threads) {
    const int row = i / (HD / 4), col = (i % (HD / 4)) * 4;
    float4 x = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    if (row < tile.n_rows)
      x = *reinterpret_cast<const float4*>(p.q + (static_cast<int64_t>(tile.first_row + row) * p.n_head + head) * HD +
                                           col);
    C* d = qs + row * ld16 + col;
    d[0] = from_f32<C>(x.x);
    d[1] = from_f32<C>(x.y);
    d[2] = from_f32<C>(x.z);
    d[3] = from_f32<C>(x.w);
    float* o = os + row * ld_o + col;
    o[0] = o[1] = o[2] = o[3] = 0.0f;
  }
  __syncthreads();
  const prefill::key_span span{span_first, span_last};

  for (int32_t key0 = span.last < span.first ? span.last + 1 : prefill::first_key_tile(span); key0 <= span.last;
       key0 += k_keys) {
    // 1. Resolve the tile's keys, then copy their K and V rows.
    if (tid < k_keys) {
      const int32_t key = key0 + tid;
      int64_t src = key_unloaded;
      if (prefill::key_loaded(key, span)) {
        const attn::block_slot bs = attn::block_slot_of(key, p.block_size);
        // A key inside the span lies in some valid row's range, so inside the sequence's blocks.
        const int64_t block = p.block_tables[table_begin + bs.table_index];
        src = attn::block_in_cache(block, p.cache_blocks)
                  ? attn::cache_offset(block, bs.offset, p.block_size, p.n_head_kv, kv_head, HD)
                  : key_bad;
      }
      key_source[tid] = src;
    }
    __syncthreads();
    for (int i = tid; i < k_keys * groups; i += k_threads) {
      const int key = i / groups, g = (i % groups) * 8;
      const int64_t src = key_source[key];
      C* kd = ks + key * ld16 + g;
      C* vd = vs + key * ld16 + g;
      if (src >= 0) {
        copy_group<T, C>(p.k + src + g, kd);
        copy_group<T, C>(p.v + src + g, vd);
      } else {
#pragma unroll
        for (int j = 0; j < 8; ++j)
          kd[j] = vd[j] = from_f32<C>(0.0f);
      }
    }
    __syncthreads();

    // 2. S = Q K^T for this warp's 16 rows.
    {
      wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
      wmma::fragment<wmma::matrix_a, 16, 16, 16, C, wmma::row_major> a;
      wmma::fragment<wmma::matrix_b, 16, 16, 16, C, wmma::col_major> b;
#pragma unroll
      for (int n = 0; n < k_keys / 16; ++n) {
        wmma::fill_fragment(acc, 0.0f);
#pragma unroll
        for (int kk = 0; kk < HD / 16; ++kk) {
          wmma::load_matrix_sync(a, qs + warp * 16 * ld16 + kk * 16, ld16);
          wmma::load_matrix_sync(b, ks + n * 16 * ld16 + kk * 16, ld16);  // K^T: column j of B is key n*16 + j
          wmma::mma_sync(acc, a, b, acc);
        }
        wmma::store_matrix_sync(ss + warp * 16 * ld_s + n * 16, acc, ld_s, wmma::mem_row_major);
      }
    }
    __syncwarp();

    // 3. Online softmax of this warp's rows: lanes take keys lane and lane + 32.
    for (int i = 0; i < 16; ++i) {
      const int row = warp * 16 + i;
      const attn::row_range r{row_first[row], row_last[row], (row_flags[row] & flag_valid) != 0};
      float score[2];
      float tile_max = -INFINITY;
      bool spoiled = false;
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int j = lane + 32 * h;
        const int32_t key = key0 + j;
        score[h] = prefill::masked_score(ss[row * ld_s + j] * p.score_scale, key, r);
        spoiled |= key_source[j] == key_bad && prefill::spoils_row(key, r);
        tile_max = fmaxf(tile_max, score[h]);
      }
#pragma unroll
      for (int off = 16; off > 0; off /= 2)
        tile_max = fmaxf(tile_max, __shfl_xor_sync(k_full_mask, tile_max, off));
      spoiled = __any_sync(k_full_mask, spoiled);
      attn::softmax_state st{row_max[row], row_sum[row]};
      const float correction = attn::softmax_rescale(st, tile_max);
      float sum = 0.0f;
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        // A masked score is -inf: its weight is 0, also while the max is still -inf (no key of the row yet).
        const float w = score[h] == -INFINITY ? 0.0f : attn::softmax_weight(st, score[h]);
        const C wc = from_f32<C>(w);
        ps[row * ld_p + lane + 32 * h] = wc;
        sum += to_f32(wc);  // the sum of the weights as P V will see them
      }
#pragma unroll
      for (int off = 16; off > 0; off /= 2)
        sum += __shfl_xor_sync(k_full_mask, sum, off);
      for (int d = lane; d < HD; d += 32)
        os[row * ld_o + d] *= correction;
      if (lane == 0) {
        row_max[row] = st.max;
        row_sum[row] = st.sum + sum;
        if (spoiled)
          row_flags[row] |= flag_spoiled;
      }
    }
    __syncwarp();

    // 4. O += P V for this warp's 16 rows.
    {
      wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
      wmma::fragment<wmma::matrix_a, 16, 16, 16, C, wmma::row_major> a;
      wmma::fragment<wmma::matrix_b, 16, 16, 16, C, wmma::row_major> b;
#pragma unroll
      for (int n = 0; n < HD / 16; ++n) {
        float* o = os + warp * 16 * ld_o + n * 16;
        wmma::load_matrix_sync(acc, o, ld_o, wmma::mem_row_major);
#pragma unroll
        for (int kk = 0; kk < k_keys / 16; ++kk) {
          wmma::load_matrix_sync(a, ps + warp * 16 * ld_p + kk * 16, ld_p);
          wmma::load_matrix_sync(b, vs + kk * 16 * ld16 + n * 16, ld16);
          wmma::mma_sync(acc, a, b, acc);
        }
        wmma::store_matrix_sync(o, acc, ld_o, wmma::mem_row_major);
      }
    }
    __syncthreads();  // every warp is done with this tile's K and V before the next tile overwrites them
  }

  // Normalise this warp's rows into out.
  for (int i = 0; i < 16; ++i) {
    const int row = warp * 16 + i;
    if (row >= tile.n_rows)
      break;
    const int32_t flags = row_flags[row];
    const float sum = row_sum[row];
    const bool nan_row = (flags & flag_valid) == 0 || (flags & flag_spoiled) != 0 || !(sum > 0.0f);
    const float factor = nan_row ? NAN : p.v_scale / sum;
    float* dst = p.out + (static_cast<int64_t>(tile.first_row + row) * p.n_head + head) * HD;
    for (int d = lane; d < HD; d += 32)
      dst[d] = nan_row ? NAN : os[row * ld_o + d] * factor;
  }
}

template <int HD, class T>
void launch(const prefill_params<T>& p, int64_t n_seqs, int64_t max_tiles, int64_t n_head, cudaStream_t stream) {
  constexpr int64_t bytes = prefill_smem_layout_of(HD).bytes;
  // Above the 48 KiB a block gets by default: opt in (once per instantiation and device; cheap to repeat).
  ACTORLLM_CUDA_CHECK(cudaFuncSetAttribute(prefill_attention_kernel<HD, T>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                           static_cast<int>(bytes)));
  const dim3 grid(static_cast<unsigned>(n_seqs * max_tiles), static_cast<unsigned>(n_head));
  prefill_attention_kernel<HD, T><<<grid, k_threads, bytes, stream>>>(p);
  ACTORLLM_CUDA_CHECK(cudaGetLastError());
}

}  // namespace

void prefill_attention(const float* q, const int32_t* positions, const int32_t* seqs, int64_t n_seqs, int64_t max_tiles,
                       const int32_t* block_tables, const paged_cache_view& cache, int64_t n_head, float scale,
                       int64_t window, float* out, cudaStream_t stream) {
  if (!prefill_attention_applies(cache.type, cache.head_dim, kv_shard_layout{}, false))
    throw std::invalid_argument(
        fmt::format("prefill_attention: a cache of 16-bit or fp8 elements and head_dim 64 or 128, got head_dim {}",
                    cache.head_dim));
  if (max_tiles <= 0 || n_seqs <= 0)
    return;
  if (n_head <= 0 || cache.n_head_kv <= 0 || n_head % cache.n_head_kv != 0)
    throw std::invalid_argument(
        fmt::format("prefill_attention: n_head {} is not a multiple of n_head_kv {}", n_head, cache.n_head_kv));
  if (n_seqs * max_tiles > INT32_MAX || n_head > 65535)
    throw std::invalid_argument(
        fmt::format("prefill_attention: a grid of {} x {} CTAs is past CUDA's limits", n_seqs * max_tiles, n_head));
  if (reinterpret_cast<uintptr_t>(q) % 16 != 0 || reinterpret_cast<uintptr_t>(cache.k) % 16 != 0 ||
      reinterpret_cast<uintptr_t>(cache.v) % 16 != 0)
    throw std::invalid_argument("prefill_attention: q and the cache must be 16-byte aligned");
  dispatch_kv_element(cache.type, [&](auto type_tag) {
    using T = std::remove_const_t<std::remove_pointer_t<decltype(type_tag)>>;
    if constexpr (!std::is_same_v<T, float>) {
      prefill_params<T> p{};
      p.q = q;
      p.positions = positions;
      p.seqs = seqs;
      p.block_tables = block_tables;
      p.k = static_cast<const T*>(cache.k);
      p.v = static_cast<const T*>(cache.v);
      p.cache_blocks = cache.n_blocks;
      p.window = window;
      p.block_size = static_cast<int32_t>(cache.block_size);
      p.n_head = static_cast<int32_t>(n_head);
      p.n_head_kv = static_cast<int32_t>(cache.n_head_kv);
      p.max_tiles = static_cast<int32_t>(max_tiles);
      p.score_scale = is_fp8_kv<T> ? scale * cache.k_scale : scale;
      p.v_scale = is_fp8_kv<T> ? cache.v_scale : 1.0f;
      p.out = out;
      if (cache.head_dim == 64)
        launch<64>(p, n_seqs, max_tiles, n_head, stream);
      else
        launch<128>(p, n_seqs, max_tiles, n_head, stream);
    }
  });
}

}  // namespace actorllm::cuda
