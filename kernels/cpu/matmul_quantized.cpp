// Quantized Linear weights on the CPU: the panels (layout and packing), the choice between the AVX-512 kernels
// (matmul_quantized_avx512.cpp) and the portable scalar path here, and the activation quantizers (the weight-only
// 16-bit grid, W8A8's per-token int8) and W8A8's float epilogue, which both paths share.
//
// The scalar path is the reference of the math, written plainly: weight-only integer sums of codes times the
// activation grid per block and group, scaled in f32, the zero points taken off per group; W8A8 exact integer sums
// per group, combined by w8a8_combine.
#include "kernels/cpu/matmul_quantized.hpp"

#include <algorithm>
#include <array>
#include <atomic>
#include <cmath>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <vector>

#include "kernels/cpu/activation.hpp"
#include "kernels/cpu/matmul_quantized_avx512.hpp"
#include "kernels/cpu/simd.hpp"
#include "util/check.hpp"

namespace actorllm::cpu {

namespace {

constexpr int64_t round_up(int64_t n, int64_t m) { return (n + m - 1) / m * m; }
constexpr size_t align64(size_t n) { return (n + 63) / 64 * 64; }

// Weight-only blocks: 128 inputs, four chunks of 32 inputs.
constexpr int64_t block_inputs = activation_block;

// Where the code of block input q (0..127) lies. 4-bit: nibble q / 32 of 16-bit word q % 32. 8-bit: in half q / 64,
// byte (q % 32) * 2 + (q % 64) / 32.
inline size_t nibble_byte(int64_t q) { return static_cast<size_t>(2 * (q % 32) + (q / 32) / 2); }
inline int nibble_shift(int64_t q) { return 4 * static_cast<int>((q / 32) % 2); }
inline size_t byte_of(int64_t q) { return static_cast<size_t>(64 * (q / 64) + 2 * (q % 32) + (q % 64) / 32); }

// One weight-only row's codes src[n_in] (each < 2^bits) into its blocks at `row` (row_bytes, zeroed by the caller
// past the last input). Both layouts put byte j of a 64-byte group from the inputs 32 (j % 2) + j / 2 of 64: for
// 8-bit codes that group is one half of a block, for 4-bit ones a block's chunks {0, 1} (low and high nibble of the
// even bytes, inputs 0..63) and {2, 3} (the odd bytes, inputs 64..127) are those 64-input halves' nibble pairs.
void pack_row_codes(const uint8_t* src, int64_t n_in, int bits, uint8_t* row) {
  const size_t block_bytes = bits == 8 ? 128 : 64;
  int64_t i0 = 0;
#if defined(__AVX512VBMI__) && defined(__AVX512BW__)
  // Byte permutations of a block's 128 inputs (a: 0..63, b: 64..127 as indices 64..127): out[j] = in[32 (j % 2) +
  // j / 2] within each half for 8-bit codes; for 4-bit ones the low nibbles in[64 (j % 2) + j / 2] and the high
  // nibbles in[64 (j % 2) + 32 + j / 2].
  static constexpr auto table = [](int64_t half_stride, int64_t offset) {
    std::array<uint8_t, 64> idx{};
    for (size_t j = 0; j < 64; ++j)
      idx[j] = static_cast<uint8_t>(half_stride * static_cast<int64_t>(j % 2) + offset + static_cast<int64_t>(j / 2));
    return idx;
  };
  alignas(64) static constexpr std::array<uint8_t, 64> half = table(32, 0), low = table(64, 0), high = table(64, 32);
  const __m512i half_idx = _mm512_load_si512(half.data()), low_idx = _mm512_load_si512(low.data()),
                high_idx = _mm512_load_si512(high.data());
  for (; i0 < n_in; i0 += block_inputs) {
    const int64_t left = n_in - i0;
    const __mmask64 m0 = left >= 64 ? ~__mmask64(0) : (__mmask64(1) << left) - 1;
    const __mmask64 m1 = left >= 128 ? ~__mmask64(0) : left <= 64 ? __mmask64(0) : (__mmask64(1) << (left - 64)) - 1;
    const __m512i a = _mm512_maskz_loadu_epi8(m0, src + i0);  // zeros past n_in
    const __m512i b = _mm512_maskz_loadu_epi8(m1, src + i0 + 64);
    uint8_t* block = row + static_cast<size_t>(i0 / block_inputs) * block_bytes;
    if (bits == 8) {
      _mm512_storeu_si512(block, _mm512_permutexvar_epi8(half_idx, a));
      _mm512_storeu_si512(block + 64, _mm512_permutexvar_epi8(half_idx, b));
      continue;
    }
    // Codes < 16: a 16-bit shift by 4 moves each byte's code into its high nibble.
    const __m512i lo = _mm512_permutex2var_epi8(a, low_idx, b), hi = _mm512_permutex2var_epi8(a, high_idx, b);
    _mm512_storeu_si512(block, _mm512_or_si512(lo, _mm512_slli_epi16(hi, 4)));
  }
  return;
#endif
  for (int64_t i = i0; i < n_in; ++i) {
    const int64_t b = i / block_inputs, q = i % block_inputs;
    uint8_t* block = row + static_cast<size_t>(b) * block_bytes;
    if (bits == 8)
      block[byte_of(q)] = src[i];
    else
      block[nibble_byte(q)] |= static_cast<uint8_t>(src[i] << nibble_shift(q));
  }
}

}  // namespace

quantized_panels::quantized_panels(const quantized_linear& header)
    : bits_(header.bits),
      n_out_(header.n_out),
      n_in_(header.n_in),
      group_size_(header.group_size),
      activations_(header.activations),
      k_pad_(0),
      row_bytes_(0),
      scales_at_(0),
      extra_at_(0),
      bytes_(0) {
  if (!((bits_ == 4 || bits_ == 8) && n_out_ > 0 && n_in_ > 0 && group_size_ > 0 && n_in_ % group_size_ == 0))
    throw std::invalid_argument(
        "quantized_panels: " + header.describe() +
        " is not a shape of quantized weight (4 or 8 bits, positive sizes, groups dividing n_in)");
  const bool w8a8 = activations_ == activation_quant::int8_per_token;
  // W8A8 sums are int32: 255 * 128 * n_in must not wrap (the +128 activations against signed codes).
  ACTORLLM_CHECK(!w8a8 || n_in_ <= (int64_t{1} << 16), "quantized_panels: W8A8 rows of more than 65536 inputs");
  k_pad_ = round_up(n_in_, w8a8 ? 64 : block_inputs);
  row_bytes_ = static_cast<size_t>(w8a8 || bits_ == 8 ? k_pad_ : k_pad_ / 2);
  const int64_t ng = n_groups();
  const auto n_params = static_cast<size_t>(n_out_ * ng);
  scales_at_ = align64(row_bytes_ * static_cast<size_t>(n_out_));
  extra_at_ = align64(scales_at_ + n_params * sizeof(float));
  bytes_ = extra_at_ + n_params * (w8a8 ? sizeof(int32_t) : sizeof(uint8_t));
}

namespace {
const quantized_linear& validated(const quantized_linear& w) {
  w.validate();
  return w;
}
}  // namespace

quantized_panels::quantized_panels(const quantized_linear& w, thread_pool& pool) : quantized_panels(validated(w)) {
  mem_ = host_buffer::allocate_huge(storage_bytes());
  pack_into(w, pool, base());
}

quantized_panels::quantized_panels(const quantized_linear& header, std::shared_ptr<buffer> storage)
    : quantized_panels(header) {
  ACTORLLM_CHECK(storage != nullptr && storage->size() >= storage_bytes(),
                 "quantized_panels: the storage is smaller than the layout");
  mem_ = std::move(storage);
}

size_t quantized_panels::storage_bytes(const quantized_linear& header) {
  return quantized_panels(header).storage_bytes();
}

void quantized_panels::pack(const quantized_linear& w, thread_pool& pool, void* storage) {
  const quantized_panels layout(w);
  layout.pack_into(w, pool, static_cast<uint8_t*>(storage));
}

void quantized_panels::pack_into(const quantized_linear& w, thread_pool& pool, uint8_t* out) const {
  const bool w8a8 = activations_ == activation_quant::int8_per_token;
  const int64_t ng = n_groups();
  // 64 bytes of zeros past the end: vector loads of a row's last group parameters may reach into them.
  std::memset(out + bytes_, 0, storage_bytes() - bytes_);
  pool.parallel_for(n_out_, [&](int64_t o_begin, int64_t o_end) {
    for (int64_t o = o_begin; o < o_end; ++o) {
      uint8_t* row = out + static_cast<size_t>(o) * row_bytes_;
      const uint8_t* src = w.codes.data() + o * n_in_;
      std::memset(row, 0, row_bytes_);
      const size_t p0 = static_cast<size_t>(o * ng);
      std::memcpy(out + scales_at_ + p0 * sizeof(float), w.scales.data() + p0, static_cast<size_t>(ng) * sizeof(float));
      if (w8a8) {
        auto* sums = reinterpret_cast<int32_t*>(out + extra_at_) + p0;
        for (int64_t i = 0; i < n_in_; ++i)
          row[i] = static_cast<uint8_t>(static_cast<int8_t>(static_cast<int>(src[i]) - 128));
        for (int64_t g = 0; g < ng; ++g) {
          int32_t s = 0;
          for (int64_t i = g * group_size_; i < (g + 1) * group_size_; ++i)
            s += static_cast<int>(src[i]) - 128;
          sums[g] = 128 * s;
        }
        continue;
      }
      std::memcpy(out + extra_at_ + p0, w.zeros.data() + p0, static_cast<size_t>(ng));
      pack_row_codes(src, n_in_, bits_, row);
    }
  });
}

int quantized_panels::code(int64_t o, int64_t i) const {
  const uint8_t* row = row_codes(o);
  if (activations_ == activation_quant::int8_per_token)
    return static_cast<int>(static_cast<int8_t>(row[i])) + 128;
  const int64_t b = i / block_inputs, q = i % block_inputs;
  const uint8_t* block = row + static_cast<size_t>(b) * (bits_ == 8 ? 128 : 64);
  if (bits_ == 8)
    return block[byte_of(q)];
  return (block[nibble_byte(q)] >> nibble_shift(q)) & 15;
}

std::shared_ptr<quantized_panels> pack_quantized(const quantized_linear& w, thread_pool& pool) {
  return std::make_shared<quantized_panels>(w, pool);
}

// ---- activations -----------------------------------------------------------------------------------------------

float activation_step(float absmax, bool finite) {
  if (!finite)
    return std::numeric_limits<float>::quiet_NaN();
  if (!(absmax >= 0x1p-100f))
    return 1.0f;
  int e = 0;
  std::frexp(absmax, &e);  // 2^(e - 1) <= absmax < 2^e
  return std::ldexp(1.0f, e - 15);
}

namespace {

float activation_block_step(const float* x, int64_t n) {
  float absmax = 0.0f;
  bool finite = true;
  for (int64_t i = 0; i < n; ++i) {
    finite = finite && std::isfinite(x[i]);
    absmax = std::max(absmax, std::fabs(x[i]));
  }
  return activation_step(absmax, finite);
}

}  // namespace

void quantize_row_int16(const float* x, int64_t n, int16_t* q, float* steps) {
  for (int64_t b0 = 0; b0 < n; b0 += activation_block) {
    const int64_t len = std::min(activation_block, n - b0);
    const float step = activation_block_step(x + b0, len);
    steps[b0 / activation_block] = step;
    if (std::isnan(step)) {
      std::fill(q + b0, q + b0 + len, int16_t{0});
      continue;
    }
    const float inv = 1.0f / step;  // exact: a power of two
    for (int64_t i = b0; i < b0 + len; ++i) {
      const float r = std::nearbyint(x[i] * inv);  // round to nearest even (the default rounding mode)
      q[i] = static_cast<int16_t>(std::min(std::max(r, -32768.0f), 32767.0f));
    }
  }
}

// ---- W8A8 shared steps -----------------------------------------------------------------------------------------

float quantize_row_int8(const float* x, int64_t n, int8_t* q) {
  float absmax = 0.0f;
  for (int64_t i = 0; i < n; ++i) {
    const float a = std::fabs(x[i]);
    if (a > absmax)  // false for NaN: ignored, as fmaxf does
      absmax = a;
  }
  const float inv = 127.0f / absmax;
  for (int64_t i = 0; i < n; ++i) {
    float p = x[i] * inv;
    if (std::isnan(p))
      p = 0.0f;
    p = std::min(std::max(p, -128.0f), 127.0f);
    q[i] = static_cast<int8_t>(std::nearbyint(p));  // round to nearest even (the default rounding mode)
  }
  return absmax / 127.0f;
}

float w8a8_combine(const int32_t* isums, const float* scales_w, int64_t n_groups, float scale_x, float bias) {
  float acc = 0.0f;
  for (int64_t g = 0; g < n_groups; ++g)
    acc = std::fma(scales_w[g], static_cast<float>(isums[g]), acc);
  return std::fma(scale_x, acc, bias);
}

// ---- kernel choice ---------------------------------------------------------------------------------------------

namespace {

std::atomic<quantized_kernels> kernel_choice{quantized_kernels::best};

bool use_vector(const quantized_panels& w) {
  return have_quantized_avx512_kernels() && kernel_choice.load() == quantized_kernels::best &&
         quantized_vector_format(w.activations(), w.n_in(), w.group_size());
}

// ---- scalar path -----------------------------------------------------------------------------------------------

constexpr int64_t scalar_rows = 4;  // outputs per work unit

// The weight-only activations of n_tokens rows: codes on the grid, the steps per block, and the sum of the grid
// values xhat = step * q over each group (for the zero points).
struct grid_input {
  const int16_t* q;    // [n_tokens][n_in]
  const float* steps;  // [n_tokens][n_blocks]
  const float* sums;   // [n_tokens][n_groups] of the weight's group size
  int64_t n_blocks;
};

// One weight row for every token, weight-only.
void scalar_row_weight_only(const quantized_panels& w, int64_t o, const grid_input& in, int64_t n_tokens,
                            const float* bias, float* y, int64_t ldy, std::vector<int>& codes) {
  const int64_t n_in = w.n_in(), gs = w.group_size(), ng = w.n_groups();
  codes.resize(static_cast<size_t>(n_in));
  for (int64_t i = 0; i < n_in; ++i)
    codes[static_cast<size_t>(i)] = w.code(o, i);
  const float* scales = w.row_scales(o);
  const uint8_t* zeros = w.row_zeros(o);
  for (int64_t t = 0; t < n_tokens; ++t) {
    const int16_t* qt = in.q + t * n_in;
    float acc = 0.0f, zero_part = 0.0f;
    for (int64_t g = 0; g < ng; ++g) {
      // The group's blocks (or the group's part of its block): an exact integer sum each, scaled by its step.
      float group = 0.0f;
      for (int64_t i0 = g * gs; i0 < (g + 1) * gs;) {
        const int64_t i1 = std::min((g + 1) * gs, (i0 / activation_block + 1) * activation_block);
        int64_t isum = 0;
        for (int64_t i = i0; i < i1; ++i)
          isum += static_cast<int64_t>(qt[i]) * codes[static_cast<size_t>(i)];
        group += in.steps[t * in.n_blocks + i0 / activation_block] * static_cast<float>(isum);
        i0 = i1;
      }
      acc += scales[g] * group;
      zero_part += scales[g] * static_cast<float>(zeros[g]) * in.sums[t * ng + g];
    }
    y[t * ldy + o] = acc - zero_part + (bias != nullptr ? bias[o] : 0.0f);
  }
}

// One weight row for every token, W8A8: xq the int8 token rows, sx their scales.
void scalar_row_w8a8(const quantized_panels& w, int64_t o, const int8_t* xq, const float* sx, int64_t n_tokens,
                     const float* bias, float* y, int64_t ldy, std::vector<int32_t>& isums) {
  const int64_t n_in = w.n_in(), gs = w.group_size(), ng = w.n_groups();
  const auto* codes = reinterpret_cast<const int8_t*>(w.row_codes(o));
  isums.resize(static_cast<size_t>(ng));
  for (int64_t t = 0; t < n_tokens; ++t) {
    const int8_t* xt = xq + t * n_in;
    for (int64_t g = 0; g < ng; ++g) {
      int32_t s = 0;
      for (int64_t i = g * gs; i < (g + 1) * gs; ++i)
        s += static_cast<int32_t>(xt[i]) * static_cast<int32_t>(codes[i]);
      isums[static_cast<size_t>(g)] = s;
    }
    y[t * ldy + o] = w8a8_combine(isums.data(), w.row_scales(o), ng, sx[t], bias != nullptr ? bias[o] : 0.0f);
  }
}

void matmul_quantized_scalar(const float* x, int64_t n_tokens, int64_t n_in, std::span<const quantized_target> targets,
                             bool gated, thread_pool& pool) {
  const bool w8a8 = targets[0].w->activations() == activation_quant::int8_per_token;
  // The input once for all targets: on the 16-bit grid (with the group sums of each target), or quantized per token.
  thread_local std::vector<int16_t> xg;
  thread_local std::vector<int8_t> xq;
  thread_local std::vector<float> sx;
  thread_local std::vector<float> sums;
  const auto n = static_cast<size_t>(n_tokens * n_in);
  const int64_t n_blocks = (n_in + activation_block - 1) / activation_block;
  std::array<size_t, 8> sums_at{};
  if (w8a8) {
    xq.resize(n);
    sx.resize(static_cast<size_t>(n_tokens));
    for (int64_t t = 0; t < n_tokens; ++t)
      sx[static_cast<size_t>(t)] = quantize_row_int8(x + t * n_in, n_in, xq.data() + t * n_in);
  } else {
    xg.resize(n);
    sx.resize(static_cast<size_t>(n_tokens * n_blocks));
    for (int64_t t = 0; t < n_tokens; ++t)
      quantize_row_int16(x + t * n_in, n_in, xg.data() + t * n_in, sx.data() + t * n_blocks);
    size_t total = 0;
    for (size_t i = 0; i < targets.size(); ++i) {
      sums_at[i] = total;
      total += static_cast<size_t>(n_tokens * targets[i].w->n_groups());
    }
    sums.resize(total);
    for (size_t i = 0; i < targets.size(); ++i) {
      const int64_t gs = targets[i].w->group_size(), ng = n_in / gs;
      for (int64_t t = 0; t < n_tokens; ++t)
        for (int64_t g = 0; g < ng; ++g) {
          // An exact integer sum per segment (the group's part of a block), scaled by the block's step.
          float s = 0.0f;
          for (int64_t k0 = g * gs; k0 < (g + 1) * gs;) {
            const int64_t k1 = std::min((g + 1) * gs, (k0 / activation_block + 1) * activation_block);
            int64_t isum = 0;
            for (int64_t k = k0; k < k1; ++k)
              isum += xg[static_cast<size_t>(t * n_in + k)];
            s += sx[static_cast<size_t>(t * n_blocks + k0 / activation_block)] * static_cast<float>(isum);
            k0 = k1;
          }
          sums[sums_at[i] + static_cast<size_t>(t * ng + g)] = s;
        }
    }
  }
  // Worker threads reach the caller's thread-local buffers through these pointers.
  const int8_t* xq_data = xq.data();
  const int16_t* xg_data = xg.data();
  const float* sx_data = sx.data();
  const float* sums_data = sums.data();
  const quantized_units units(targets, gated, scalar_rows);
  pool.parallel_for(units.total(), [&](int64_t u_begin, int64_t u_end) {
    thread_local std::vector<int> codes;
    thread_local std::vector<int32_t> isums;
    size_t i = 0;
    for (int64_t u = u_begin; u < u_end; ++u) {
      i = units.target_of(u, i);
      const int64_t row0 = (u - units.begin[i]) * scalar_rows;
      const int64_t n_out = targets[i].w->n_out();
      const int64_t row_end = std::min(row0 + scalar_rows, n_out);
      for (size_t part = 0; part < (gated ? 2u : 1u); ++part) {
        const quantized_target& tg = targets[gated ? part : i];
        for (int64_t o = row0; o < row_end; ++o) {
          if (w8a8) {
            scalar_row_w8a8(*tg.w, o, xq_data, sx_data, n_tokens, tg.bias, tg.y, n_out, isums);
          } else {
            const grid_input in{xg_data, sx_data, sums_data + sums_at[gated ? part : i], n_blocks};
            scalar_row_weight_only(*tg.w, o, in, n_tokens, tg.bias, tg.y, n_out, codes);
          }
        }
      }
      if (gated)
        for (int64_t t = 0; t < n_tokens; ++t) {
          float* g = targets[0].y + t * n_out + row0;
          silu_mul(g, targets[1].y + t * n_out + row0, row_end - row0, g);
        }
    }
  });
}

void check_target(const quantized_target& t, int64_t n_in) {
  ACTORLLM_CHECK(t.w != nullptr && t.y != nullptr, "matmul_quantized: a target without weight or output");
  ACTORLLM_CHECK(t.w->n_in() == n_in, "matmul_quantized: the weight's n_in differs from the input's");
}

// Runs targets of one activation kind and one kernel family.
void run(const float* x, int64_t n_tokens, int64_t n_in, std::span<const quantized_target> targets, bool gated,
         bool vector, thread_pool& pool, matmul_path path) {
  if (targets.empty())
    return;
  if (vector)
    matmul_quantized_avx512(x, n_tokens, n_in, targets, gated, pool, path);
  else
    matmul_quantized_scalar(x, n_tokens, n_in, targets, gated, pool);
}

}  // namespace

void set_quantized_kernels(quantized_kernels k) { kernel_choice.store(k); }
quantized_kernels get_quantized_kernels() { return kernel_choice.load(); }

bool quantized_vector_format(activation_quant a, int64_t n_in, int64_t group_size) {
  if (group_size == n_in)
    return true;
  return group_size % (a == activation_quant::int8_per_token ? 64 : 32) == 0;
}

void matmul_quantized(const float* x, int64_t n_tokens, int64_t n_in, std::span<const quantized_target> targets,
                      thread_pool& pool, matmul_path path) {
  ACTORLLM_CHECK(targets.size() <= 8, "matmul_quantized: at most 8 targets");
  ACTORLLM_CHECK(n_tokens >= 0, "matmul_quantized: negative n_tokens");
  for (const quantized_target& t : targets)
    check_target(t, n_in);
  if (n_tokens == 0 || targets.empty())
    return;
  // One run per (activation kind, kernel family): all of a model's q/k/v share both, so this is one run.
  std::array<std::array<quantized_target, 8>, 4> buckets{};
  std::array<size_t, 4> sizes{};
  for (const quantized_target& t : targets) {
    const size_t b = (t.w->activations() == activation_quant::int8_per_token ? 2u : 0u) + (use_vector(*t.w) ? 1u : 0u);
    buckets[b][sizes[b]++] = t;
  }
  for (size_t b = 0; b < 4; ++b)
    run(x, n_tokens, n_in, std::span{buckets[b].data(), sizes[b]}, false, b % 2 == 1, pool, path);
}

void matmul_quantized_silu_gate(const float* x, int64_t n_tokens, int64_t n_in, const quantized_panels& gate,
                                const quantized_panels& up, float* up_scratch, float* out, thread_pool& pool,
                                matmul_path path) {
  ACTORLLM_CHECK(gate.n_out() == up.n_out() && gate.n_in() == up.n_in() && gate.bits() == up.bits() &&
                     gate.group_size() == up.group_size() && gate.activations() == up.activations(),
                 "matmul_quantized_silu_gate: gate and up differ in shape or format");
  const std::array<quantized_target, 2> targets{quantized_target{&gate, nullptr, out},
                                                quantized_target{&up, nullptr, up_scratch}};
  check_target(targets[0], n_in);
  ACTORLLM_CHECK(n_tokens >= 0, "matmul_quantized_silu_gate: negative n_tokens");
  if (n_tokens == 0)
    return;
  run(x, n_tokens, n_in, targets, true, use_vector(gate), pool, path);
}

}  // namespace actorllm::cpu
