// The CUDA quantized GEMV's math on the CPU, no GPU needed: the fragment maps of quantized_gemv_math.hpp against the
// PTX ISA's m16n8k16 layouts written out here independently; the code-to-bf16 tricks over every code and zero point;
// the packer's image read back code by code; and the GEMV kernel's loop (the plan's blocks, the warps' chunk ranges,
// the group cursor, the A fragments from the packed words, the B fragments from x rounded to bf16, an emulated mma
// per k-tile, the group scaling and the warp-ordered reduction) against a float64 reference of the dequantized
// weight, for 4 and 8 bits, group sizes 16 to per-channel, zero points of 16 (GPTQ v1), odd n_out, partial chunks,
// 1 to 8 tokens and a bias. The prefill's dequantization kernel is emulated likewise against dequantize_to_bf16.
#include "kernels/cuda/quantized_gemv_math.hpp"
#include "kernels/cuda/gemm.hpp"
#include "kernels/cuda/quantized_weight.hpp"
#include "kernels/dtype.hpp"
#include "kernels/quantized_linear.hpp"
#include "kernels/tensor.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <set>
#include <string>
#include <vector>

namespace {

using namespace actorllm;
using namespace actorllm::cuda;
using namespace actorllm::cuda::qgemv;

// ---- the PTX ISA's m16n8k16 fragments (bf16 A and B, f32 C/D), as its "Matrix Fragments for mma.m16n8k16 with
// floating point type" states them: groupID = laneid >> 2, threadID_in_group = laneid % 4 -------------------------

int ptx_a_row(int lane, int i) { return (i < 2 || (i >= 4 && i < 6)) ? lane / 4 : lane / 4 + 8; }
int ptx_a_col(int lane, int i) { return (lane % 4) * 2 + (i & 1) + (i >= 4 ? 8 : 0); }
int ptx_b_row(int lane, int i) { return (lane % 4) * 2 + (i & 1) + (i >= 2 ? 8 : 0); }
int ptx_b_col(int lane) { return lane / 4; }
int ptx_c_row(int lane, int i) { return i < 2 ? lane / 4 : lane / 4 + 8; }
int ptx_c_col(int lane, int i) { return (lane % 4) * 2 + (i & 1); }

float bf16_half(uint32_t reg, int half) { return bf16_to_f32(static_cast<uint16_t>(half == 0 ? reg : reg >> 16)); }
uint32_t bf16_pair(float lo, float hi) { return f32_to_bf16(lo) | (static_cast<uint32_t>(f32_to_bf16(hi)) << 16); }

// A warp's mma.sync.m16n8k16.row.col.f32.bf16.bf16.f32 D = A B + C over the 32 lanes' registers. The products of
// bf16 are exact in double; the sum is rounded to f32 once (the tensor cores round at least as often: the tolerance
// of the comparison allows for that).
void emulated_mma(std::array<std::array<float, 4>, 32>& d, const std::array<std::array<uint32_t, 4>, 32>& a,
                  const std::array<std::array<uint32_t, 2>, 32>& b) {
  double A[16][16] = {}, B[16][8] = {};
  for (int lane = 0; lane < 32; ++lane) {
    for (int i = 0; i < 8; ++i)
      A[ptx_a_row(lane, i)][ptx_a_col(lane, i)] =
          bf16_half(a[static_cast<size_t>(lane)][static_cast<size_t>(i / 2)], i % 2);
    for (int i = 0; i < 4; ++i)
      B[ptx_b_row(lane, i)][ptx_b_col(lane)] =
          bf16_half(b[static_cast<size_t>(lane)][static_cast<size_t>(i / 2)], i % 2);
  }
  for (int lane = 0; lane < 32; ++lane)
    for (int i = 0; i < 4; ++i) {
      double acc = d[static_cast<size_t>(lane)][static_cast<size_t>(i)];
      for (int k = 0; k < 16; ++k)
        acc += A[ptx_c_row(lane, i)][k] * B[k][ptx_c_col(lane, i)];
      d[static_cast<size_t>(lane)][static_cast<size_t>(i)] = static_cast<float>(acc);
    }
}

// ---- the kernel's per-lane steps, as quantized_gemv.cu does them with device intrinsics ------------------------

// __hsub2 on bf16x2: exact here (integers below 256), so a float subtraction rounded to bf16 is the same.
uint32_t bf16x2_sub(uint32_t a, uint32_t b) {
  return bf16_pair(bf16_half(a, 0) - bf16_half(b, 0), bf16_half(a, 1) - bf16_half(b, 1));
}

std::array<uint32_t, 4> a_fragment(int bits, const uint8_t* lane_bytes16, int j, uint32_t zero_low,
                                   uint32_t zero_high) {
  uint32_t words[4];
  std::memcpy(words, lane_bytes16, 16);
  std::array<uint32_t, 4> a{};
  for (int s = 0; s < 4; ++s) {
    const uint32_t z = register_is_high_row(s) ? zero_high : zero_low;
    if (bits == 4) {
      a[static_cast<size_t>(s)] = bf16x2_sub(q4_biased_pair(words[j], s), z);
    } else {
      const uint32_t w = words[2 * j + (s < 2 ? 0 : 1)];
      const int k = (s & 1) * 2;
      const float zf = std::bit_cast<float>(z);
      a[static_cast<size_t>(s)] =
          bf16_pair(std::bit_cast<float>(q8_biased_f32(w, k)) - zf, std::bit_cast<float>(q8_biased_f32(w, k + 1)) - zf);
    }
  }
  return a;
}

// The GEMV kernel, block by block and warp by warp, its 32 lanes in lockstep. y starts as NaN, so an output written
// by no block shows; one written twice is caught by `written`.
std::vector<float> emulate_gemv(const std::vector<uint8_t>& image, const gemv_layout& l, const gemv_launch& launch,
                                const std::vector<float>& x, int n_tokens, const std::vector<float>* bias) {
  const auto* scales = reinterpret_cast<const float*>(image.data() + l.scales_offset);
  const uint8_t* zeros = image.data() + l.zeros_offset;
  const int tiles = tiles_per_chunk(l.bits), R = launch.row_tiles_per_block;
  std::vector<float> y(static_cast<size_t>(n_tokens * l.n_out), NAN);
  std::vector<int> written(y.size(), 0);
  using lanes4 = std::array<std::array<float, 4>, 32>;
  for (unsigned block = 0; block < launch.blocks; ++block) {
    const int first_tile = static_cast<int>(block) * R;
    std::vector<std::vector<lanes4>> partial(gemv_warps, std::vector<lanes4>(static_cast<size_t>(R), lanes4{}));
    for (int warp = 0; warp < gemv_warps; ++warp) {
      std::vector<lanes4>& total = partial[static_cast<size_t>(warp)];
      const chunk_range range = warp_chunks(l.n_chunks, warp);
      if (range.begin >= range.end)
        continue;
      std::vector<lanes4> sum(static_cast<size_t>(R), lanes4{});
      std::vector<std::array<float, 32>> s_low(static_cast<size_t>(R)), s_high(static_cast<size_t>(R));
      std::vector<std::array<uint32_t, 32>> z_low(static_cast<size_t>(R)), z_high(static_cast<size_t>(R));
      auto load_group = [&](int32_t group) {
        for (int r = 0; r < R; ++r)
          for (int lane = 0; lane < 32; ++lane) {
            const bool valid = first_tile + r < l.n_row_tiles;
            const int64_t at = valid ? group_record(l, first_tile + r, group) + (lane >> 2) : 0;
            const uint32_t zl = valid ? zeros[at] : 0, zh = valid ? zeros[at + 8] : 0;
            s_low[static_cast<size_t>(r)][static_cast<size_t>(lane)] = valid ? scales[at] : 0.0f;
            s_high[static_cast<size_t>(r)][static_cast<size_t>(lane)] = valid ? scales[at + 8] : 0.0f;
            z_low[static_cast<size_t>(r)][static_cast<size_t>(lane)] = l.bits == 4 ? q4_zero_pair(zl) : q8_zero_f32(zl);
            z_high[static_cast<size_t>(r)][static_cast<size_t>(lane)] =
                l.bits == 4 ? q4_zero_pair(zh) : q8_zero_f32(zh);
          }
      };
      auto finish = [&] {
        for (int r = 0; r < R; ++r)
          for (int lane = 0; lane < 32; ++lane) {
            float t[4], s[4];
            std::memcpy(t, total[static_cast<size_t>(r)][static_cast<size_t>(lane)].data(), sizeof t);
            std::memcpy(s, sum[static_cast<size_t>(r)][static_cast<size_t>(lane)].data(), sizeof s);
            finish_group(t, s, s_low[static_cast<size_t>(r)][static_cast<size_t>(lane)],
                         s_high[static_cast<size_t>(r)][static_cast<size_t>(lane)]);
            std::memcpy(total[static_cast<size_t>(r)][static_cast<size_t>(lane)].data(), t, sizeof t);
            std::memcpy(sum[static_cast<size_t>(r)][static_cast<size_t>(lane)].data(), s, sizeof s);
          }
      };
      group_cursor cursor = group_at(range.begin * tiles, l.tiles_per_group);
      load_group(cursor.group);
      for (int32_t c = range.begin; c < range.end; ++c) {
        for (int j = 0; j < tiles; ++j) {
          const int32_t ktile = c * tiles + j;
          if (ktile >= l.n_ktiles)
            continue;
          if (group_advance(cursor, ktile, l.tiles_per_group)) {
            finish();
            load_group(cursor.group);
          }
          std::array<std::array<uint32_t, 2>, 32> b{};
          for (int lane = 0; lane < 32; ++lane) {
            const int token = b_token(lane);
            if (token >= n_tokens)
              continue;
            const float* p = x.data() + static_cast<int64_t>(token) * l.n_in + ktile * tile_inputs;
            b[static_cast<size_t>(lane)] = {bf16_pair(p[b_input(lane, 0)], p[b_input(lane, 1)]),
                                            bf16_pair(p[b_input(lane, 2)], p[b_input(lane, 3)])};
          }
          for (int r = 0; r < R; ++r) {
            if (first_tile + r >= l.n_row_tiles)
              continue;  // the kernel multiplies zero codes there
            std::array<std::array<uint32_t, 4>, 32> a{};
            for (int lane = 0; lane < 32; ++lane)
              a[static_cast<size_t>(lane)] =
                  a_fragment(l.bits, image.data() + chunk_offset(l, first_tile + r, c) + lane * lane_bytes, j,
                             z_low[static_cast<size_t>(r)][static_cast<size_t>(lane)],
                             z_high[static_cast<size_t>(r)][static_cast<size_t>(lane)]);
            emulated_mma(sum[static_cast<size_t>(r)], a, b);
          }
        }
      }
      finish();
    }
    for (int r = 0; r < R; ++r)
      for (int i = 0; i < 4; ++i)
        for (int lane = 0; lane < 32; ++lane) {
          const int64_t row = static_cast<int64_t>(first_tile + r) * tile_rows + d_row(lane, i);
          const int token = d_token(lane, i);
          if (row >= l.n_out || token >= n_tokens)
            continue;
          float v = 0.0f;
          for (int k = 0; k < gemv_warps; ++k)
            v += partial[static_cast<size_t>(k)][static_cast<size_t>(r)][static_cast<size_t>(lane)]
                        [static_cast<size_t>(i)];
          const size_t at = static_cast<size_t>(token * l.n_out + row);
          y[at] = bias != nullptr ? v + (*bias)[static_cast<size_t>(row)] : v;
          ++written[at];
        }
  }
  for (int n : written)
    REQUIRE(n == 1);
  return y;
}

// The dequantization kernel of the prefill path, thread (word) by thread, into bf16 rows [row_begin, +n_rows).
std::vector<uint16_t> emulate_dequantize(const std::vector<uint8_t>& image, const gemv_layout& l, int64_t row_begin,
                                         int64_t n_rows) {
  const auto* scales = reinterpret_cast<const float*>(image.data() + l.scales_offset);
  const uint8_t* zeros = image.data() + l.zeros_offset;
  const int tiles = tiles_per_chunk(l.bits);
  std::vector<uint16_t> out(static_cast<size_t>(n_rows * l.n_in), 0xffff);
  const int64_t first_tile = row_begin / tile_rows, n_tiles = (n_rows + tile_rows - 1) / tile_rows;
  const int64_t words_per_tile = static_cast<int64_t>(l.n_chunks) * (chunk_bytes / 4);
  for (int64_t idx = 0; idx < n_tiles * words_per_tile; ++idx) {
    const int64_t tile = first_tile + idx / words_per_tile, rest = idx % words_per_tile;
    const int64_t chunk = rest / (chunk_bytes / 4);
    const int lane = static_cast<int>(rest % (chunk_bytes / 4)) / 4, word = static_cast<int>(rest % 4);
    const int j = l.bits == 4 ? word : word / 2;
    const int64_t ktile = chunk * tiles + j;
    if (ktile >= l.n_ktiles)
      continue;
    uint32_t bits = 0;
    std::memcpy(&bits, image.data() + chunk_offset(l, tile, chunk) + lane * 16 + word * 4, 4);
    const int64_t group = ktile / l.tiles_per_group;
    const int first_e = l.bits == 4 ? 0 : (word % 2) * 4, n_pairs = l.bits == 4 ? 4 : 2;
    for (int p = 0; p < n_pairs; ++p) {
      const int e = first_e + 2 * p;
      const int64_t row = tile * tile_rows + a_row(lane, e);
      if (row < row_begin || row >= row_begin + n_rows || row >= l.n_out)
        continue;
      const int64_t at = group_record(l, tile, group) + a_row(lane, e);
      for (int h = 0; h < 2; ++h) {
        const code_place place = place_in_chunk(l.bits, lane, j, e + h);
        const int code = static_cast<int>((bits >> (8 * (place.byte % 4) + place.shift)) & ((1u << l.bits) - 1));
        const int64_t col = ktile * tile_inputs + a_input(lane, e) + h;
        out[static_cast<size_t>((row - row_begin) * l.n_in + col)] =
            f32_to_bf16(static_cast<float>(code - static_cast<int>(zeros[at])) * scales[at]);
      }
    }
  }
  return out;
}

// A weight with random codes, zero points (up to 2^bits for 4-bit: GPTQ v1's 16 among them) and scales.
quantized_linear random_weight(std::mt19937& gen, int bits, int64_t n_out, int64_t n_in, int64_t group_size) {
  quantized_linear w;
  w.bits = bits;
  w.n_out = n_out;
  w.n_in = n_in;
  w.group_size = group_size;
  const int top = (1 << bits) - 1;
  std::uniform_int_distribution<int> code(0, top), zero(0, bits == 4 ? 16 : 255);
  std::uniform_real_distribution<float> scale(0.002f, 0.05f);
  for (int64_t i = 0; i < n_out * n_in; ++i)
    w.codes.push_back(static_cast<uint8_t>(code(gen)));
  for (int64_t i = 0; i < n_out * w.n_groups(); ++i) {
    w.scales.push_back(i % 7 == 3 ? -scale(gen) : scale(gen));
    w.zeros.push_back(static_cast<uint8_t>(i % 5 == 1 && bits == 4 ? 16 : zero(gen)));
  }
  w.validate();
  return w;
}

std::vector<float> random_floats(std::mt19937& gen, int64_t n, float lo, float hi) {
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& f : v)
    f = d(gen);
  return v;
}

// float64 y = x_bf16 w^T (+ bias) of the exactly dequantized weight, and each output's tolerance: rel per unit of
// summed magnitude (f32 accumulation in the kernel's order).
void reference(const quantized_linear& w, const std::vector<float>& x, int n_tokens, const std::vector<float>* bias,
               double rel, std::vector<double>& ref, std::vector<double>& tol) {
  ref.assign(static_cast<size_t>(n_tokens * w.n_out), 0.0);
  tol.assign(ref.size(), 0.0);
  for (int t = 0; t < n_tokens; ++t)
    for (int64_t o = 0; o < w.n_out; ++o) {
      double acc = bias ? (*bias)[static_cast<size_t>(o)] : 0.0, mag = std::fabs(acc);
      for (int64_t i = 0; i < w.n_in; ++i) {
        const double p = static_cast<double>(bf16_to_f32(f32_to_bf16(x[static_cast<size_t>(t * w.n_in + i)]))) *
                         static_cast<double>(w.dequantized(o, i));
        acc += p;
        mag += std::fabs(p);
      }
      ref[static_cast<size_t>(t * w.n_out + o)] = acc;
      tol[static_cast<size_t>(t * w.n_out + o)] = 1e-7 + rel * mag;
    }
}

}  // namespace

TEST_CASE("cuda quantized gemv math: the fragment maps are the PTX ISA's m16n8k16 layouts and cover each tile once") {
  std::set<std::pair<int, int>> a_seen, b_seen, d_seen;
  for (int lane = 0; lane < 32; ++lane) {
    for (int e = 0; e < 8; ++e) {
      CHECK(a_row(lane, e) == ptx_a_row(lane, e));
      CHECK(a_col(lane, e) == ptx_a_col(lane, e));
      a_seen.insert({a_row(lane, e), a_col(lane, e)});
    }
    for (int i = 0; i < 4; ++i) {
      CHECK(b_row(lane, i) == ptx_b_row(lane, i));
      CHECK(d_row(lane, i) == ptx_c_row(lane, i));
      CHECK(d_token(lane, i) == ptx_c_col(lane, i));
      b_seen.insert({b_row(lane, i), b_token(lane)});
      d_seen.insert({d_row(lane, i), d_token(lane, i)});
    }
    CHECK(b_token(lane) == ptx_b_col(lane));
  }
  CHECK(a_seen.size() == 256);  // every element of the 16x16 A tile exactly once (256 = 32 lanes x 8)
  CHECK(b_seen.size() == 128);
  CHECK(d_seen.size() == 128);
  // tile_input is a permutation of a k-tile's 16 inputs; through it a lane's A elements of either row and its B
  // elements are the same four neighbouring inputs 4t .. 4t + 3, B's in order (one 16-byte load of x).
  std::set<int> inputs;
  for (int r = 0; r < 16; ++r)
    inputs.insert(tile_input(r));
  CHECK(inputs.size() == 16);
  CHECK(*inputs.begin() == 0);
  CHECK(*inputs.rbegin() == 15);
  for (int lane = 0; lane < 32; ++lane) {
    const int t = lane % 4;
    for (int i = 0; i < 4; ++i)
      CHECK(b_input(lane, i) == 4 * t + i);
    for (int e = 0; e < 8; ++e) {
      // Element e of A and element (e & 1) + 2 (e >> 2) of B share the mma's k index, so they meet in the product.
      CHECK(a_col(lane, e) == b_row(lane, (e & 1) + 2 * (e >> 2)));
      CHECK(a_input(lane, e) == b_input(lane, (e & 1) + 2 * (e >> 2)));
    }
  }
  // Register s of the A fragment holds elements 2s and 2s + 1: one row, neighbouring inputs (what the dequantization
  // kernel writes as one bf16 pair), the row groupID + 8 exactly for odd s.
  for (int lane = 0; lane < 32; ++lane)
    for (int s = 0; s < 4; ++s) {
      CHECK(a_row(lane, 2 * s) == a_row(lane, 2 * s + 1));
      CHECK(a_input(lane, 2 * s + 1) == a_input(lane, 2 * s) + 1);
      CHECK(a_input(lane, 2 * s) % 2 == 0);
      CHECK((a_row(lane, 2 * s) >= 8) == register_is_high_row(s));
    }
}

TEST_CASE(
    "cuda quantized gemv math: every code lands in its own bits of a chunk, and a lane's 16 bytes hold its tiles") {
  for (int bits : {4, 8}) {
    CAPTURE(bits);
    std::set<std::pair<int, int>> seen;  // (byte, shift)
    for (int lane = 0; lane < 32; ++lane)
      for (int j = 0; j < tiles_per_chunk(bits); ++j)
        for (int e = 0; e < 8; ++e) {
          const code_place p = place_in_chunk(bits, lane, j, e);
          CHECK(p.byte >= lane * lane_bytes);
          CHECK(p.byte < (lane + 1) * lane_bytes);
          CHECK((bits == 8 ? p.shift == 0 : (p.shift == 0 || p.shift == 4)));
          seen.insert({p.byte, p.shift});
        }
    CHECK(seen.size() == static_cast<size_t>(chunk_bytes * 8 / bits));  // the chunk's bits, each used once
  }
}

TEST_CASE("cuda quantized gemv math: the bf16 and f32 tricks give code - zero exactly for every code and zero point") {
  // 4-bit: any code in any nibble s of either half, zero points 0..16.
  for (uint32_t zero = 0; zero <= 16; ++zero)
    for (uint32_t lo = 0; lo < 16; ++lo)
      for (uint32_t hi = 0; hi < 16; ++hi)
        for (int s = 0; s < 4; ++s) {
          const uint32_t word = (lo << (4 * s)) | (hi << (4 * s + 16)) | (s == 0 ? 0xA0B000C0u : 0x0000000Fu);
          const uint32_t pair = bf16x2_sub(q4_biased_pair(word, s), q4_zero_pair(zero));
          REQUIRE(bf16_half(q4_biased_pair(word, s), 0) == 128.0f + static_cast<float>(lo));
          REQUIRE(bf16_half(pair, 0) == static_cast<float>(static_cast<int>(lo) - static_cast<int>(zero)));
          REQUIRE(bf16_half(pair, 1) == static_cast<float>(static_cast<int>(hi) - static_cast<int>(zero)));
        }
  // 8-bit: any byte of the word, zero points 0..255; the difference is exact in bf16.
  for (uint32_t zero = 0; zero < 256; zero += 3)
    for (uint32_t code = 0; code < 256; ++code)
      for (int k = 0; k < 4; ++k) {
        const uint32_t word = (code << (8 * k)) | (k == 0 ? 0x5A5A5A00u : 0x000000A5u);
        const float d = std::bit_cast<float>(q8_biased_f32(word, k)) - std::bit_cast<float>(q8_zero_f32(zero));
        const float want = static_cast<float>(static_cast<int>(code) - static_cast<int>(zero));
        REQUIRE(d == want);
        REQUIRE(bf16_to_f32(f32_to_bf16(d)) == want);
      }
}

TEST_CASE("cuda quantized gemv math: group cursor, finish_group and the warps' chunk ranges") {
  // Walking k-tiles 5.. with groups of 4 tiles: new groups start at 8 and 12.
  group_cursor c = group_at(5, 4);
  CHECK(c.group == 1);
  CHECK(c.next == 8);
  std::vector<int32_t> starts;
  for (int32_t kt = 5; kt < 14; ++kt)
    if (group_advance(c, kt, 4))
      starts.push_back(kt);
  CHECK(starts == std::vector<int32_t>{8, 12});
  CHECK(c.group == 3);
  float total[4] = {1, 2, 3, 4}, sum[4] = {10, 20, 30, 40};
  finish_group(total, sum, 0.5f, 0.25f);
  CHECK(total[0] == 6.0f);
  CHECK(total[1] == 12.0f);
  CHECK(total[2] == 10.5f);
  CHECK(total[3] == 14.0f);
  CHECK(sum[0] == 0.0f);
  CHECK(sum[3] == 0.0f);
  for (int32_t n : {0, 1, 5, 8, 9, 64, 224, 1000}) {
    int32_t next = 0;
    for (int w = 0; w < gemv_warps; ++w) {
      const chunk_range r = warp_chunks(n, w);
      CHECK(r.begin == next);
      CHECK(r.end >= r.begin);
      CHECK(r.end - r.begin <= (n + gemv_warps - 1) / gemv_warps);
      next = r.end;
    }
    CHECK(next == n);
  }
}

TEST_CASE("cuda quantized gemv math: the formats taken, the layout's sizes and the launch plans") {
  CHECK(gemv_format_supported(4, 4096, 128));
  CHECK(gemv_format_supported(8, 4096, 4096));
  CHECK(gemv_format_supported(4, 48, 16));
  CHECK_FALSE(gemv_format_supported(4, 72, 8));   // groups of 8: a k-tile would span two
  CHECK_FALSE(gemv_format_supported(4, 67, 67));  // per-channel rows of 67 inputs
  CHECK_FALSE(gemv_format_supported(3, 4096, 128));

  const gemv_layout l = make_gemv_layout(4, 4096, 14336, 128);
  CHECK(l.n_row_tiles == 256);
  CHECK(l.n_chunks == 224);
  CHECK(l.n_ktiles == 896);
  CHECK(l.n_groups == 112);
  CHECK(l.tiles_per_group == 8);
  // int4 codes, plus a 4-byte scale and a 1-byte zero point per group of 128: 4096 x 14336 / 2 x (1 + 5 / 64).
  CHECK(l.total_bytes == 4096LL * 14336 / 2 + 4096LL * 112 * 5);
  CHECK(l.scales_offset % 16 == 0);
  const gemv_layout odd = make_gemv_layout(8, 37, 80, 16);
  CHECK(odd.n_row_tiles == 3);
  CHECK(odd.n_chunks == 3);  // 32-input chunks, the last half used
  CHECK(odd.n_ktiles == 5);

  // Two row tiles per block only while that leaves two blocks per SM.
  CHECK(plan_quantized_gemv(make_gemv_layout(4, 4096, 4096, 128), 132).row_tiles_per_block == 1);
  CHECK(plan_quantized_gemv(make_gemv_layout(4, 4096, 4096, 128), 132).blocks == 256);
  const qgemv::gemv_launch up = plan_quantized_gemv(make_gemv_layout(4, 14336, 4096, 128), 132);
  CHECK(up.row_tiles_per_block == 2);
  CHECK(up.blocks == 448);
  CHECK(plan_quantized_gemv(make_gemv_layout(8, 17, 64, 64), 132).blocks == 2);
  CHECK(plan_quantized_gemv(make_gemv_layout(8, 100, 64, 64), 1).row_tiles_per_block == 2);
  CHECK(plan_quantized_gemv(make_gemv_layout(8, 100, 64, 64), 1).blocks == 4);

  // Prefill chunks: whole row tiles, within the scratch, never more rows than the weight has (rounded up to 16).
  for (const auto& [n_out, n_in] :
       {std::pair<int64_t, int64_t>{4096, 4096}, {4096, 14336}, {33, 16}, {128256, 4096}, {8, 1 << 22}}) {
    const gemv_layout g = make_gemv_layout(4, n_out, n_in, 16);
    const int64_t rows = dequant_chunk_rows(g);
    CAPTURE(n_out);
    CAPTURE(n_in);
    CHECK(rows % 16 == 0);
    CHECK(rows >= 16);
    CHECK(rows <= std::max<int64_t>(16, (n_out + 15) / 16 * 16));
    CHECK((rows == 16 || rows * n_in * 2 <= dequant_scratch_bytes));
  }
  CHECK(dequant_chunk_rows(make_gemv_layout(4, 4096, 4096, 128)) == 4096);
  CHECK(dequant_chunk_rows(make_gemv_layout(4, 14336, 4096, 128)) == 4096);
}

TEST_CASE("cuda quantized gemv math: the packed image reads back code by code, with scales and zeros per row tile") {
  std::mt19937 gen{11};
  for (int bits : {4, 8})
    for (const auto& [n_out, n_in, group] :
         {std::tuple<int64_t, int64_t, int64_t>{1, 16, 16}, {17, 48, 16}, {37, 80, 80}, {64, 256, 128}, {45, 96, 32}}) {
      CAPTURE(bits);
      CAPTURE(n_out);
      CAPTURE(n_in);
      const quantized_linear w = random_weight(gen, bits, n_out, n_in, group);
      const gemv_layout l = gemv_layout_of(w);
      const std::vector<uint8_t> image = pack_for_gemv(w, l);
      REQUIRE(image.size() == static_cast<size_t>(l.total_bytes));
      const int tiles = tiles_per_chunk(bits);
      int64_t seen = 0;
      for (int64_t rt = 0; rt < l.n_row_tiles; ++rt)
        for (int64_t c = 0; c < l.n_chunks; ++c)
          for (int lane = 0; lane < 32; ++lane)
            for (int j = 0; j < tiles; ++j)
              for (int e = 0; e < 8; ++e) {
                const int64_t row = rt * 16 + a_row(lane, e), col = (c * tiles + j) * 16 + a_input(lane, e);
                const code_place p = place_in_chunk(bits, lane, j, e);
                const int code =
                    (image[static_cast<size_t>(chunk_offset(l, rt, c) + p.byte)] >> p.shift) & ((1 << bits) - 1);
                if (row < n_out && col < n_in) {
                  REQUIRE(code == w.codes[static_cast<size_t>(row * n_in + col)]);
                  ++seen;
                } else {
                  REQUIRE(code == 0);  // padding
                }
              }
      CHECK(seen == n_out * n_in);
      const auto* scales = reinterpret_cast<const float*>(image.data() + l.scales_offset);
      for (int64_t row = 0; row < l.n_row_tiles * 16; ++row)
        for (int64_t g = 0; g < l.n_groups; ++g) {
          const int64_t at = group_record(l, row / 16, g) + row % 16;
          if (row < n_out) {
            CHECK(scales[at] == w.scales[static_cast<size_t>(row * l.n_groups + g)]);
            CHECK(image[static_cast<size_t>(l.zeros_offset + at)] ==
                  w.zeros[static_cast<size_t>(row * l.n_groups + g)]);
          } else {
            CHECK(scales[at] == 0.0f);
          }
        }
    }
}

TEST_CASE("cuda quantized gemv math: the GEMV kernel's loop equals the float64 product of the dequantized weight") {
  std::mt19937 gen{2024};
  struct shape {
    int bits;
    int64_t n_out, n_in, group;  // group 0: per channel
    int sm_count;                // small: two row tiles per block
  };
  const shape shapes[] = {
      {4, 1, 16, 16, 132}, {4, 37, 48, 16, 132},  {4, 45, 640, 128, 132}, {4, 33, 640, 32, 1},
      {4, 70, 1024, 0, 1}, {4, 16, 192, 64, 132}, {8, 37, 80, 16, 132},   {8, 45, 640, 128, 132},
      {8, 67, 320, 64, 1}, {8, 29, 1024, 0, 132}, {8, 3, 32, 32, 132},    {4, 129, 256, 128, 2},
  };
  for (const shape& s : shapes) {
    const int64_t group = s.group == 0 ? s.n_in : s.group;
    const quantized_linear w = random_weight(gen, s.bits, s.n_out, s.n_in, group);
    const gemv_layout l = gemv_layout_of(w);
    const std::vector<uint8_t> image = pack_for_gemv(w, l);
    const qgemv::gemv_launch launch = plan_quantized_gemv(l, s.sm_count);
    for (int n_tokens : {1, 3, 8}) {
      for (bool with_bias : {false, true}) {
        const std::string what = w.describe() + " tokens " + std::to_string(n_tokens) + (with_bias ? " + bias" : "") +
                                 " row tiles per block " + std::to_string(launch.row_tiles_per_block);
        CAPTURE(what);
        const std::vector<float> x = random_floats(gen, n_tokens * s.n_in, -2.0f, 2.0f);
        const std::vector<float> bias = random_floats(gen, s.n_out, -1.0f, 1.0f);
        const std::vector<float> y = emulate_gemv(image, l, launch, x, n_tokens, with_bias ? &bias : nullptr);
        std::vector<double> ref, tol;
        reference(w, x, n_tokens, with_bias ? &bias : nullptr, 1e-5, ref, tol);
        int bad = 0;
        for (size_t i = 0; i < y.size(); ++i)
          if (!(std::fabs(static_cast<double>(y[i]) - ref[i]) <= tol[i]))
            ++bad;
        CHECK(bad == 0);
      }
    }
  }
  // Zero points of 16 (GPTQ v1) everywhere and codes of 0 and 15 only: the extremes of the 4-bit trick.
  quantized_linear w = random_weight(gen, 4, 19, 64, 32);
  for (uint8_t& z : w.zeros)
    z = 16;
  for (size_t i = 0; i < w.codes.size(); ++i)
    w.codes[i] = i % 3 == 0 ? 0 : 15;
  const gemv_layout l = gemv_layout_of(w);
  const std::vector<float> x = random_floats(gen, 2 * 64, -1.0f, 1.0f);
  const std::vector<float> y = emulate_gemv(pack_for_gemv(w, l), l, plan_quantized_gemv(l, 132), x, 2, nullptr);
  std::vector<double> ref, tol;
  reference(w, x, 2, nullptr, 1e-5, ref, tol);
  for (size_t i = 0; i < y.size(); ++i)
    CHECK(std::fabs(static_cast<double>(y[i]) - ref[i]) <= tol[i]);
}

TEST_CASE("cuda quantized gemv math: round-to-nearest weights (symmetric and not) through the kernel's loop") {
  std::mt19937 gen{99};
  for (int bits : {4, 8})
    for (bool symmetric : {false, true}) {
      const int64_t n_out = 23, n_in = 256;
      const std::vector<float> wf = random_floats(gen, n_out * n_in, -0.1f, 0.1f);
      const quantized_linear w = quantize_linear_rtn(wf.data(), n_out, n_in, bits, 64, symmetric);
      const gemv_layout l = gemv_layout_of(w);
      const std::vector<float> x = random_floats(gen, 5 * n_in, -3.0f, 3.0f);
      const std::vector<float> y = emulate_gemv(pack_for_gemv(w, l), l, plan_quantized_gemv(l, 132), x, 5, nullptr);
      std::vector<double> ref, tol;
      reference(w, x, 5, nullptr, 1e-5, ref, tol);
      CAPTURE(w.describe());
      for (size_t i = 0; i < y.size(); ++i)
        CHECK(std::fabs(static_cast<double>(y[i]) - ref[i]) <= tol[i]);
    }
}

TEST_CASE("cuda quantized gemv math: the prefill's dequantization kernel gives dequantize_to_bf16's rows bit for bit") {
  std::mt19937 gen{5};
  for (int bits : {4, 8})
    for (const auto& [n_out, n_in, group] :
         {std::tuple<int64_t, int64_t, int64_t>{37, 80, 16}, {50, 192, 64}, {16, 1024, 1024}, {70, 96, 32}}) {
      const quantized_linear w = random_weight(gen, bits, n_out, n_in, group);
      CAPTURE(w.describe());
      const gemv_layout l = gemv_layout_of(w);
      const std::vector<uint8_t> image = pack_for_gemv(w, l);
      const tensor want = dequantize_to_bf16(w);
      const auto* want_bits = want.data_as<uint16_t>();
      // In chunks of 32 rows, as the backend does with dequant_chunk_rows (the last chunk short).
      for (int64_t first = 0; first < n_out; first += 32) {
        const int64_t n = std::min<int64_t>(32, n_out - first);
        const std::vector<uint16_t> got = emulate_dequantize(image, l, first, n);
        CHECK(std::equal(got.begin(), got.end(), want_bits + first * n_in));
      }
    }
}

TEST_CASE("cuda quantized gemv math: linear_rows_gemm_args puts a chunk of rows' products in its columns of y") {
  // Column-major C (ldc = y_width) starting at y + first: element (m, n) is y[n * y_width + first + m].
  const int64_t n_tokens = 5, n_in = 7, n_out = 40;
  std::mt19937 gen{3};
  const std::vector<float> x = random_floats(gen, n_tokens * n_in, -1, 1), w = random_floats(gen, n_out * n_in, -1, 1);
  std::vector<float> y(static_cast<size_t>(n_tokens * n_out), NAN);
  for (int64_t first = 0; first < n_out; first += 16) {
    const int64_t rows = std::min<int64_t>(16, n_out - first);
    const gemm_args a = linear_rows_gemm_args(n_tokens, n_in, rows, n_out);
    CHECK(a.m == rows);
    CHECK(a.ldc == n_out);
    for (int n = 0; n < a.n; ++n)
      for (int m = 0; m < a.m; ++m) {
        double acc = 0;  // op(A) = A^T with A the chunk's rows read column-major (lda = k), B = x (ldb = k)
        for (int p = 0; p < a.k; ++p)
          acc += static_cast<double>(w[static_cast<size_t>((first + m) * n_in + p)]) *
                 x[static_cast<size_t>(p + static_cast<int64_t>(n) * a.ldb)];
        y[static_cast<size_t>(first + m + static_cast<int64_t>(n) * a.ldc)] = static_cast<float>(acc);
      }
  }
  for (int64_t t = 0; t < n_tokens; ++t)
    for (int64_t o = 0; o < n_out; ++o) {
      double acc = 0;
      for (int64_t i = 0; i < n_in; ++i)
        acc += static_cast<double>(x[static_cast<size_t>(t * n_in + i)]) * w[static_cast<size_t>(o * n_in + i)];
      CHECK(y[static_cast<size_t>(t * n_out + o)] == doctest::Approx(acc).epsilon(1e-6));
    }
  CHECK_THROWS_AS(linear_rows_gemm_args(1, 4, 9, 8), std::invalid_argument);
}
