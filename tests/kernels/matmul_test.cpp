// matmul parity against a float64 reference: both algorithms (GEMV, GEMM) and the automatic choice, every weight
// dtype, odd shapes that are not multiples of the vector width or of the blocking, with and without bias. bf16 weights
// run three ways where the CPU has AVX512-BF16: the f32-FMA kernels, vdpbf16ps on row-major weights, and vdpbf16ps on
// packed panels; each multiplies the input rounded to bf16, which the reference does too.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "kernel_test_util.hpp"
#include "kernels/cpu/activation.hpp"
#include "kernels/cpu/amx_bf16.hpp"
#include "kernels/cpu/compact_panels.hpp"
#include "kernels/cpu/matmul.hpp"
#include "kernels/cpu/matmul_bf16.hpp"

using namespace actorllm;

namespace {

struct shape {
  int64_t n_tokens, n_in, n_out;
};

// How a bf16 weight is run (other types: always `fma`). dot_rows and dot_packed run the best kernels (AMX tiles for
// 5 tokens and more where the process may use them); dot_packed_no_amx vdpbf16ps alone on packed panels; fma_packed
// the AVX2 build's FMA kernels on packed panels.
// dot_compact: the best kernels on compact panels (kernels/cpu/compact_panels.hpp), where the build reads them.
enum class bf16_variant { fma, dot_rows, dot_packed, dot_packed_no_amx, fma_packed, dot_compact };

// Whether this build reads packed panels on its FMA kernels (AVX2, no AVX512-BF16).
bool fma_reads_panels() { return !cpu::have_bf16_dot_kernels() && cpu::bf16_panels_preferred(); }

// The variants this machine can run for `wt`.
std::vector<bf16_variant> variants_for(dtype wt) {
  if (wt == dtype::bf16 && fma_reads_panels())
    return {bf16_variant::fma, bf16_variant::fma_packed};
  if (wt != dtype::bf16 || !cpu::have_bf16_dot_kernels())
    return {bf16_variant::fma};
  std::vector<bf16_variant> v{bf16_variant::fma, bf16_variant::dot_rows, bf16_variant::dot_packed};
  if (cpu::amx_bf16_usable())
    v.push_back(bf16_variant::dot_packed_no_amx);
  if (cpu::have_compact_panel_kernels())
    v.push_back(bf16_variant::dot_compact);
  return v;
}

bool is_packed(bf16_variant v) {
  return v == bf16_variant::dot_packed || v == bf16_variant::dot_packed_no_amx || v == bf16_variant::fma_packed ||
         v == bf16_variant::dot_compact;
}

// The weight as the variant reads it: packed panels for dot_packed, else as is.
std::vector<uint8_t> weight_for(const std::vector<uint8_t>& w, int64_t n_out, int64_t n_in, bf16_variant v,
                                thread_pool& pool) {
  if (!is_packed(v))
    return w;
  if (v == bf16_variant::dot_compact) {
    const cpu::bf16_rows rows{reinterpret_cast<const uint16_t*>(w.data()), n_out};
    const cpu::compact_panels_plan plan = cpu::plan_compact_panels({&rows, 1}, n_in, pool);
    std::vector<uint8_t> compact(plan.bytes());
    cpu::write_compact_panels(plan, {&rows, 1}, compact.data(), pool);
    return compact;
  }
  std::vector<uint8_t> packed(cpu::bf16_panels_bytes(n_out, n_in));
  cpu::pack_bf16_panels(reinterpret_cast<const uint16_t*>(w.data()), n_out, n_in,
                        reinterpret_cast<uint16_t*>(packed.data()), pool);
  return packed;
}

// Selects the kernel family for the variant until the end of the scope.
struct variant_scope {
  explicit variant_scope(bf16_variant v) {
    cpu::set_bf16_kernels(v == bf16_variant::fma                 ? cpu::bf16_kernels::fma
                          : v == bf16_variant::dot_packed_no_amx ? cpu::bf16_kernels::dot
                                                                 : cpu::bf16_kernels::best);
  }
  ~variant_scope() { cpu::set_bf16_kernels(cpu::bf16_kernels::best); }
  variant_scope(const variant_scope&) = delete;
  variant_scope& operator=(const variant_scope&) = delete;
};

// The input as a weight of type wt multiplies it: rounded to bf16 for bf16 weights.
double input_as_multiplied(float x, dtype wt) {
  return wt == dtype::bf16 ? static_cast<double>(bf16_to_f32(f32_to_bf16(x))) : static_cast<double>(x);
}

// float64 x w^T (+ bias) with the f32-accumulation tolerance of each output.
void reference_matmul(const std::vector<float>& x, const std::vector<uint8_t>& w, dtype wt, const float* bias,
                      int64_t n_tokens, int64_t n_in, int64_t n_out, std::vector<double>& ref,
                      std::vector<double>& tol) {
  ref.assign(static_cast<size_t>(n_tokens * n_out), 0.0);
  tol.assign(ref.size(), 0.0);
  for (int64_t t = 0; t < n_tokens; ++t) {
    for (int64_t o = 0; o < n_out; ++o) {
      double acc = bias != nullptr ? bias[o] : 0.0, mag = std::fabs(acc);
      for (int64_t i = 0; i < n_in; ++i) {
        double p = input_as_multiplied(x[static_cast<size_t>(t * n_in + i)], wt) *
                   test::element(w, wt, static_cast<size_t>(o * n_in + i));
        acc += p;
        mag += std::fabs(p);
      }
      ref[static_cast<size_t>(t * n_out + o)] = acc;
      // f32 accumulation error grows with the sum of magnitudes, not with |ref| (cancellation).
      tol[static_cast<size_t>(t * n_out + o)] = 1e-6 + 4e-6 * mag;
    }
  }
}

void check_matmul(const shape& s, dtype wt, bool with_bias, cpu::matmul_path path, thread_pool& pool, uint64_t seed) {
  auto x = test::random_floats(static_cast<size_t>(s.n_tokens * s.n_in), seed);
  auto w_values = test::random_floats(static_cast<size_t>(s.n_out * s.n_in), seed + 1);
  auto w = test::to_dtype(w_values, wt);
  auto bias = test::random_floats(static_cast<size_t>(s.n_out), seed + 2);
  std::vector<double> ref, tol;
  reference_matmul(x, w, wt, with_bias ? bias.data() : nullptr, s.n_tokens, s.n_in, s.n_out, ref, tol);

  for (bf16_variant v : variants_for(wt)) {
    const variant_scope scope(v);
    const std::vector<uint8_t> wv = weight_for(w, s.n_out, s.n_in, v, pool);
    // Sentinels after the output catch writes past [n_tokens, n_out].
    const size_t n_y = static_cast<size_t>(s.n_tokens * s.n_out);
    std::vector<float> y(n_y + 37, -777.0f);
    const cpu::matmul_target target{wv.data(), wt,           s.n_out, with_bias ? bias.data() : nullptr,
                                    y.data(),  is_packed(v), nullptr, v == bf16_variant::dot_compact};
    cpu::matmul_group(x.data(), s.n_tokens, s.n_in, std::span{&target, 1}, pool, path);
    std::string what = "matmul " + std::to_string(s.n_tokens) + "x" + std::to_string(s.n_in) + " -> " +
                       std::to_string(s.n_out) + " " + std::string(dtype_name(wt)) + (with_bias ? " +bias" : "") +
                       " path " + std::to_string(static_cast<int>(path)) + " variant " +
                       std::to_string(static_cast<int>(v)) + " threads " + std::to_string(pool.size());
    test::check_close(y.data(), ref.data(), n_y, tol.data(), 0.0, 1e-6, what);
    for (size_t i = n_y; i < y.size(); ++i)
      REQUIRE(y[i] == -777.0f);
  }
}

const std::vector<shape> small_shapes = {
    {1, 1, 1},  {1, 7, 5},    {1, 32, 16}, {1, 33, 17},  {2, 64, 40},  {3, 100, 37},
    {4, 5, 70}, {5, 129, 33}, {9, 31, 65}, {13, 300, 9}, {17, 47, 31}, {1, 600, 3},
};

// Shapes for the bit-for-bit checks of the bf16 pairs panels (AVX2): odd n_in ends a panel in a lone input; n_in past
// 2048 spans K blocks; 16k+r and 32k+r outputs end in partial panels; 1-13 tokens cover the GEMV's one- and two-token
// walks and every GEMM register tile.
const std::vector<shape> pair_panel_shapes = {{13, 7, 5},    {6, 16, 16},   {32, 2048, 40}, {9, 2049, 33},
                                              {7, 4203, 17}, {1, 33, 16},   {1, 33, 100},   {12, 130, 31},
                                              {2, 130, 31},  {3, 2048, 64}, {100, 31, 70}};

}  // namespace

TEST_CASE("matmul GEMV path matches float64 [asan]") {
  thread_pool pool(3);
  uint64_t seed = 1;
  for (const auto& s : small_shapes)
    for (dtype wt : {dtype::f32, dtype::f16, dtype::bf16})
      for (bool bias : {false, true})
        check_matmul(s, wt, bias, cpu::matmul_path::gemv, pool, seed += 10);
}

TEST_CASE(
    "matmul GEMV reads each chunk's rows as four streams: long chunks, with rows left over, match float64 [asan]") {
  // A tile takes one row from each quarter of its chunk (rows i, i + q, i + 2q, i + 3q) and the chunk's last
  // rows % 4 go in ordinary tiles: chunks of hundreds of rows, row counts that leave 1-3 over, 1 and 2 threads.
  uint64_t seed = 7;
  for (int threads : {1, 2}) {
    thread_pool pool(threads);
    for (const shape& s : std::vector<shape>{{1, 40, 1003}, {2, 33, 517}, {1, 64, 258}, {3, 16, 1601}})
      for (dtype wt : {dtype::f32, dtype::bf16})
        check_matmul(s, wt, threads == 2, cpu::matmul_path::gemv, pool, seed += 10);
  }
}

TEST_CASE(
    "matmul GEMV over rows that start anywhere in a cache line (weights read in place from a file) matches float64 and "
    "reads nothing around them [asan]") {
  // A safetensors header is padded to 8 bytes only, so a weight used in place starts anywhere in a line; the GEMV then
  // reads each row in aligned blocks, its first and last blocks' worth as they lie against inputs that are zero where
  // the aligned blocks cover them. The weight is placed at every element offset past a 64-byte boundary (more than one
  // block's worth), with NaN bytes before and after it: a load of anything outside the rows would make its output NaN.
  // Widths that are a whole number of blocks (the rows share one offset) and others, 1-3 tokens, long chunks (the four
  // streams), 1 and 2 threads.
  uint64_t seed = 101;
  for (int threads : {1, 2}) {
    thread_pool pool(threads);
    for (const shape& s : std::vector<shape>{
             {1, 16, 5}, {2, 32, 7}, {1, 48, 9}, {3, 64, 33}, {1, 80, 413}, {1, 2048, 13}, {2, 24, 6}, {1, 8, 3}})
      for (dtype wt : {dtype::f32, dtype::f16, dtype::bf16}) {
        const size_t elem = dtype_size(wt);
        auto x = test::random_floats(static_cast<size_t>(s.n_tokens * s.n_in), seed += 10);
        const auto w = test::to_dtype(test::random_floats(static_cast<size_t>(s.n_out * s.n_in), seed + 1), wt);
        std::vector<double> ref, tol;
        reference_matmul(x, w, wt, nullptr, s.n_tokens, s.n_in, s.n_out, ref, tol);
        const std::vector<uint8_t> nan_bytes = wt == dtype::f32   ? std::vector<uint8_t>{0x00, 0x00, 0xc0, 0x7f}
                                               : wt == dtype::f16 ? std::vector<uint8_t>{0x00, 0x7e}
                                                                  : std::vector<uint8_t>{0xc0, 0x7f};
        for (size_t offset = 0; offset < 160 / elem; ++offset) {
          std::vector<uint8_t> buffer(64 + 2 * 160 + w.size());
          for (size_t i = 0; i < buffer.size(); ++i)
            buffer[i] = nan_bytes[i % nan_bytes.size()];
          const auto addr = reinterpret_cast<uintptr_t>(buffer.data());
          uint8_t* at = buffer.data() + (64 - addr % 64) % 64 + offset * elem;
          std::memcpy(at, w.data(), w.size());
          std::vector<float> y(static_cast<size_t>(s.n_tokens * s.n_out), -777.0f);
          cpu::matmul(x.data(), s.n_tokens, s.n_in, at, wt, s.n_out, nullptr, y.data(), pool, cpu::matmul_path::gemv);
          test::check_close(y.data(), ref.data(), y.size(), tol.data(), 0.0, 1e-6,
                            "GEMV " + std::to_string(s.n_tokens) + "x" + std::to_string(s.n_in) + " -> " +
                                std::to_string(s.n_out) + " " + std::string(dtype_name(wt)) + " at element " +
                                std::to_string(offset) + " of a line, threads " + std::to_string(threads));
        }
      }
  }
}

TEST_CASE(
    "matmul over bf16 weights rounds its input to bf16 to nearest even, as f32_to_bf16 does, on every path [asan]") {
  // An identity weight: y is the rounded input itself. Ties (1 + 2^-8 rounds down to 1, 1 + 3 * 2^-8 up to
  // 1 + 2^-6), just below and above a tie, negatives, subnormals (one that rounds to zero), a large float and, in a row
  // of its own, a NaN (the whole row then NaN). 17 inputs (vectors and a scalar tail) and 20 rows, through the GEMV
  // and the GEMM.
  const int64_t n = 17, n_tokens = 20;
  const float tie_down = 1.0f + 0x1p-8f, tie_up = 1.0f + 3 * 0x1p-8f;
  const std::vector<float> special = {tie_down,
                                      tie_up,
                                      -tie_down,
                                      -tie_up,
                                      std::nextafter(tie_down, 2.0f),
                                      std::nextafter(tie_down, 0.0f),
                                      0x1p-140f,
                                      -0x1p-133f,
                                      3.0e38f,
                                      0.0f,
                                      -0.0f,
                                      1e-3f,
                                      -7.25f,
                                      65504.5f,
                                      0.1f,
                                      0.2f,
                                      0.3f};
  std::vector<float> x(static_cast<size_t>(n_tokens * n));
  for (int64_t t = 0; t < n_tokens; ++t)
    for (int64_t k = 0; k < n; ++k)
      x[static_cast<size_t>(t * n + k)] = special[static_cast<size_t>((t + k) % n)] * (t % 2 == 0 ? 1.0f : -1.0f);
  x[static_cast<size_t>(3 * n + 5)] = std::nanf("");
  std::vector<uint16_t> w(static_cast<size_t>(n * n), f32_to_bf16(0.0f));
  for (int64_t o = 0; o < n; ++o)
    w[static_cast<size_t>(o * n + o)] = f32_to_bf16(1.0f);
  thread_pool pool(2);
  for (cpu::matmul_path path : {cpu::matmul_path::gemv, cpu::matmul_path::gemm}) {
    std::vector<float> y(x.size(), -777.0f);
    cpu::matmul(x.data(), n_tokens, n, w.data(), dtype::bf16, n, nullptr, y.data(), pool, path);
    for (int64_t t = 0; t < n_tokens; ++t)
      for (int64_t o = 0; o < n; ++o) {
        const float got = y[static_cast<size_t>(t * n + o)];
        CAPTURE(t);
        CAPTURE(o);
        if (t == 3) {
          CHECK(std::isnan(got));
          continue;
        }
        // (== : a -0 input comes out +0, summed onto the zero products; any other value bit for bit). vdpbf16ps takes
        // a subnormal input as zero (the instruction neither reads nor writes subnormals; a bf16 model on oneDNN's
        // AVX512-BF16 kernels does the same), so on those kernels a subnormal comes out 0.
        const float rounded = bf16_to_f32(f32_to_bf16(x[static_cast<size_t>(t * n + o)]));
        const bool flushed = cpu::have_bf16_dot_kernels() && std::fpclassify(rounded) == FP_SUBNORMAL;
        CHECK(got == (flushed ? 0.0f : rounded));
      }
  }
}

TEST_CASE("matmul GEMM path matches float64 [asan]") {
  thread_pool pool(3);
  uint64_t seed = 2;
  for (const auto& s : small_shapes)
    for (dtype wt : {dtype::f32, dtype::f16, dtype::bf16})
      for (bool bias : {false, true})
        check_matmul(s, wt, bias, cpu::matmul_path::gemm, pool, seed += 10);
}

TEST_CASE("matmul GEMM covers several K blocks, token chunks and register-tile remainders [asan]") {
  // n_in > 256 spans K blocks (the later ones accumulate) with AVX-512, n_in > 2048 with AVX2; n_tokens > 512 spans
  // token chunks (> 256 with AVX2); 12k+r rows exercise every remainder tile.
  thread_pool pool(2);
  uint64_t seed = 3;
  // Packed bf16 weights: more than 48 tokens go in chunks of 384 rows (400: two); n_in 1100 ends in a K tail.
  for (const auto& s : std::vector<shape>{
           {530, 40, 35}, {25, 513, 48}, {37, 260, 100}, {96, 64, 64}, {100, 1100, 45}, {400, 600, 40}, {19, 4203, 21}})
    for (dtype wt : {dtype::f32, dtype::bf16})
      check_matmul(s, wt, true, cpu::matmul_path::gemm, pool, seed += 10);
  for (int64_t t = 1; t <= 14; ++t)
    for (dtype wt : {dtype::f16, dtype::bf16})
      check_matmul({t, 20, 33}, wt, false, cpu::matmul_path::gemm, pool, seed += 10);
}

TEST_CASE("matmul GEMM over bf16 weights equals the f32 GEMM over the same values, bit for bit [asan]") {
  // With AVX2 the bf16 GEMM keeps its panels in bf16 (pairs of inputs, widened in the register tile) where f32 weights
  // get f32 panels: the products and the order of their sums must be the same (pair_panel_shapes); the input is
  // already bf16, as the bf16 GEMM rounds it.
  const variant_scope scope(bf16_variant::fma);
  uint64_t seed = 2900;
  for (int threads : {1, 2}) {
    thread_pool pool(threads);
    for (const auto& s : pair_panel_shapes) {
      auto x = test::random_floats(static_cast<size_t>(s.n_tokens * s.n_in), seed++, -2.0f, 2.0f);
      for (float& v : x)
        v = bf16_to_f32(f32_to_bf16(v));
      const auto w_bf16 =
          test::to_dtype(test::random_floats(static_cast<size_t>(s.n_out * s.n_in), seed++), dtype::bf16);
      std::vector<float> w_f32(static_cast<size_t>(s.n_out * s.n_in));
      for (size_t i = 0; i < w_f32.size(); ++i)
        w_f32[i] = static_cast<float>(test::element(w_bf16, dtype::bf16, i));
      const auto bias = test::random_floats(static_cast<size_t>(s.n_out), seed++);
      std::vector<float> y_bf16(static_cast<size_t>(s.n_tokens * s.n_out)), y_f32(y_bf16.size());
      cpu::matmul(x.data(), s.n_tokens, s.n_in, w_bf16.data(), dtype::bf16, s.n_out, bias.data(), y_bf16.data(), pool,
                  cpu::matmul_path::gemm);
      cpu::matmul(x.data(), s.n_tokens, s.n_in, w_f32.data(), dtype::f32, s.n_out, bias.data(), y_f32.data(), pool,
                  cpu::matmul_path::gemm);
      INFO("threads " << threads << " " << s.n_tokens << "x" << s.n_in << " -> " << s.n_out);
      CHECK(std::memcmp(y_bf16.data(), y_f32.data(), y_f32.size() * sizeof(float)) == 0);
    }
  }
}

TEST_CASE(
    "AVX2: packed bf16 weights give the row-major GEMM's bits, and their GEMV the GEMM's up to 2048 inputs [asan]") {
  // The AVX2 build's GEMM reads a weight packed at load where it lies, the same pairs of inputs gemm_pack_b16 makes per
  // call: the same products in the same order. Its decode walks each panel's pairs front to back as the GEMM's tiles
  // do, so with one K block (n_in <= 2048) the batch size does not change a bit (pair_panel_shapes; an odd n_in's
  // lone input meets the zero weight the panel pads it with).
  if (!fma_reads_panels()) {
    MESSAGE("skipped: not an AVX2 build (the FMA kernels read no packed panels)");
    return;
  }
  uint64_t seed = 3100;
  for (int threads : {1, 2, 3}) {
    thread_pool pool(threads);
    for (const auto& s : pair_panel_shapes) {
      const auto x = test::random_floats(static_cast<size_t>(s.n_tokens * s.n_in), seed++, -2.0f, 2.0f);
      const auto w = test::to_dtype(test::random_floats(static_cast<size_t>(s.n_out * s.n_in), seed++), dtype::bf16);
      const auto packed = weight_for(w, s.n_out, s.n_in, bf16_variant::fma_packed, pool);
      const auto bias = test::random_floats(static_cast<size_t>(s.n_out), seed++);
      const size_t n_y = static_cast<size_t>(s.n_tokens * s.n_out);
      std::vector<float> y_rows(n_y), y_packed(n_y), y_gemv(n_y);
      auto run = [&](const std::vector<uint8_t>& wv, bool is_packed_w, cpu::matmul_path path, std::vector<float>& y) {
        const cpu::matmul_target target{wv.data(), dtype::bf16, s.n_out, bias.data(), y.data(), is_packed_w};
        cpu::matmul_group(x.data(), s.n_tokens, s.n_in, std::span{&target, 1}, pool, path);
      };
      run(w, false, cpu::matmul_path::gemm, y_rows);
      run(packed, true, cpu::matmul_path::gemm, y_packed);
      run(packed, true, cpu::matmul_path::gemv, y_gemv);
      INFO("threads " << threads << " " << s.n_tokens << "x" << s.n_in << " -> " << s.n_out);
      CHECK(std::memcmp(y_packed.data(), y_rows.data(), n_y * sizeof(float)) == 0);
      if (s.n_in <= 2048)
        CHECK(std::memcmp(y_gemv.data(), y_packed.data(), n_y * sizeof(float)) == 0);
      std::vector<double> ref, tol;
      reference_matmul(x, w, dtype::bf16, bias.data(), s.n_tokens, s.n_in, s.n_out, ref, tol);
      test::check_close(y_gemv.data(), ref.data(), n_y, tol.data(), 0.0, 1e-6, "packed GEMV");
    }
  }
}

TEST_CASE("matmul automatic choice matches float64 on both sides of the crossover [asan]") {
  uint64_t seed = 4;
  for (int threads : {1, 2, 5}) {
    thread_pool pool(threads);
    for (int64_t t : {int64_t{1}, int64_t{3}, cpu::matmul_gemm_min_tokens - 1, cpu::matmul_gemm_min_tokens})
      for (dtype wt : {dtype::f32, dtype::f16, dtype::bf16})
        check_matmul({t, 70, 45}, wt, threads == 2, cpu::matmul_path::automatic, pool, seed += 10);
  }
}

TEST_CASE("matmul with n_in == 0 gives the bias, n_tokens == 0 writes nothing [asan]") {
  thread_pool pool(2);
  std::vector<float> bias = {1.5f, -2.0f, 3.0f};
  std::vector<float> y(6, 99.0f);
  cpu::matmul(nullptr, 2, 0, nullptr, dtype::bf16, 3, bias.data(), y.data(), pool);
  CHECK(y == std::vector<float>{1.5f, -2.0f, 3.0f, 1.5f, -2.0f, 3.0f});
  cpu::matmul(nullptr, 2, 0, nullptr, dtype::f32, 3, nullptr, y.data(), pool);
  CHECK(y == std::vector<float>(6, 0.0f));
  std::vector<float> untouched(4, 5.0f);
  cpu::matmul(nullptr, 0, 8, nullptr, dtype::f32, 4, nullptr, untouched.data(), pool);
  CHECK(untouched == std::vector<float>(4, 5.0f));
}

TEST_CASE("matmul at a Llama-like shape matches float64 on sampled outputs") {
  // Full-size rows (n_in 2048) through both paths; the reference is computed for a sample of outputs only.
  thread_pool pool(2);
  const int64_t n_in = 2048, n_out = 1000;
  for (int64_t n_tokens : {int64_t{1}, int64_t{8}, int64_t{130}}) {
    for (dtype wt : {dtype::bf16, dtype::f16}) {
      auto x = test::random_floats(static_cast<size_t>(n_tokens * n_in), 50 + n_tokens, -2.0f, 2.0f);
      auto w = test::to_dtype(test::random_floats(static_cast<size_t>(n_out * n_in), 60, -0.05f, 0.05f), wt);
      for (bf16_variant v : variants_for(wt)) {
        const variant_scope scope(v);
        const std::vector<uint8_t> wv = weight_for(w, n_out, n_in, v, pool);
        std::vector<float> y(static_cast<size_t>(n_tokens * n_out));
        const cpu::matmul_target target{wv.data(), wt,           n_out,   nullptr,
                                        y.data(),  is_packed(v), nullptr, v == bf16_variant::dot_compact};
        cpu::matmul_group(x.data(), n_tokens, n_in, std::span{&target, 1}, pool);
        test::data_rng pick(7);
        for (int k = 0; k < 200; ++k) {
          int64_t t = pick.below(n_tokens), o = pick.below(n_out);
          double acc = 0, mag = 0;
          for (int64_t i = 0; i < n_in; ++i) {
            double p = input_as_multiplied(x[static_cast<size_t>(t * n_in + i)], wt) *
                       test::element(w, wt, static_cast<size_t>(o * n_in + i));
            acc += p;
            mag += std::fabs(p);
          }
          float got = y[static_cast<size_t>(t * n_out + o)];
          INFO("t " << t << " o " << o << " tokens " << n_tokens << " variant " << static_cast<int>(v));
          REQUIRE(std::fabs(got - acc) <= 1e-6 + 4e-6 * mag + 1e-6 * std::fabs(acc));
        }
      }
    }
  }
}

TEST_CASE("matmul_group runs q/k/v-like targets in one call, each as its own matmul would [asan]") {
  thread_pool pool(3);
  uint64_t seed = 900;
  for (dtype wt : {dtype::f32, dtype::f16, dtype::bf16}) {
    for (int64_t n_tokens : {int64_t{1}, int64_t{5}, int64_t{130}}) {
      const int64_t n_in = 77;
      const std::vector<int64_t> n_outs = {64, 16, 16, 3};
      auto x = test::random_floats(static_cast<size_t>(n_tokens * n_in), seed++);
      for (bf16_variant v : variants_for(wt)) {
        const variant_scope scope(v);
        std::vector<std::vector<uint8_t>> w, wv;
        std::vector<std::vector<float>> bias, y;
        std::vector<cpu::matmul_target> targets;
        for (size_t i = 0; i < n_outs.size(); ++i) {
          w.push_back(test::to_dtype(test::random_floats(static_cast<size_t>(n_outs[i] * n_in), seed++), wt));
          wv.push_back(weight_for(w.back(), n_outs[i], n_in, v, pool));
          bias.push_back(test::random_floats(static_cast<size_t>(n_outs[i]), seed++));
          y.emplace_back(static_cast<size_t>(n_tokens * n_outs[i]), -777.0f);
        }
        for (size_t i = 0; i < n_outs.size(); ++i)
          targets.push_back({wv[i].data(), wt, n_outs[i], i % 2 == 0 ? bias[i].data() : nullptr, y[i].data(),
                             is_packed(v), nullptr, v == bf16_variant::dot_compact});
        cpu::matmul_group(x.data(), n_tokens, n_in, targets, pool);
        for (size_t i = 0; i < n_outs.size(); ++i) {
          std::vector<double> ref, tol;
          reference_matmul(x, w[i], wt, i % 2 == 0 ? bias[i].data() : nullptr, n_tokens, n_in, n_outs[i], ref, tol);
          const std::string what = "group target " + std::to_string(i) + " " + std::string(dtype_name(wt)) +
                                   " tokens " + std::to_string(n_tokens) + " variant " +
                                   std::to_string(static_cast<int>(v));
          test::check_close(y[i].data(), ref.data(), ref.size(), tol.data(), 0.0, 1e-6, what);
        }
      }
    }
  }
}

TEST_CASE("matmul_group over f32-FMA targets (one parallel call) equals one matmul per target, bit for bit [asan]") {
  // The targets of one weight type share one index space of row groups (GEMV) or panels (GEMM) and the GEMM packs the
  // token rows once for all: each output must still be the same sum as a matmul of that target alone. Odd row
  // counts put a target's last rows and the next target's first in one thread's chunk; 300 tokens cross the GEMM's
  // token block; bf16 targets beside f32 ones run as two calls, bf16's input rounded once.
  const variant_scope scope(bf16_variant::fma);
  uint64_t seed = 1700;
  for (int threads : {1, 2, 3}) {
    thread_pool pool(threads);
    for (int64_t n_tokens : {int64_t{1}, int64_t{3}, int64_t{8}, int64_t{40}, int64_t{300}}) {
      for (cpu::matmul_path path : {cpu::matmul_path::automatic, cpu::matmul_path::gemv, cpu::matmul_path::gemm}) {
        if (n_tokens == 300 && path == cpu::matmul_path::gemv)
          continue;  // the GEMV at 300 tokens adds time and no case
        const int64_t n_in = 70;
        const std::vector<int64_t> n_outs = {3, 17, 64, 250, 9};
        const std::vector<dtype> types = {dtype::f32, dtype::bf16, dtype::bf16, dtype::f32, dtype::f16};
        auto x = test::random_floats(static_cast<size_t>(n_tokens * n_in), seed++, -2.0f, 2.0f);
        std::vector<std::vector<uint8_t>> w;
        std::vector<std::vector<float>> bias, grouped, alone;
        std::vector<cpu::matmul_target> targets;
        for (size_t i = 0; i < n_outs.size(); ++i) {
          w.push_back(test::to_dtype(test::random_floats(static_cast<size_t>(n_outs[i] * n_in), seed++), types[i]));
          bias.push_back(test::random_floats(static_cast<size_t>(n_outs[i]), seed++));
          grouped.emplace_back(static_cast<size_t>(n_tokens * n_outs[i]) + 5, -777.0f);
          alone.emplace_back(static_cast<size_t>(n_tokens * n_outs[i]), 0.0f);
        }
        for (size_t i = 0; i < n_outs.size(); ++i) {
          const float* b = i % 2 == 1 ? bias[i].data() : nullptr;
          targets.push_back({w[i].data(), types[i], n_outs[i], b, grouped[i].data()});
          cpu::matmul(x.data(), n_tokens, n_in, w[i].data(), types[i], n_outs[i], b, alone[i].data(), pool, path);
        }
        cpu::matmul_group(x.data(), n_tokens, n_in, targets, pool, path);
        for (size_t i = 0; i < n_outs.size(); ++i) {
          INFO("threads " << threads << " tokens " << n_tokens << " path " << static_cast<int>(path) << " target "
                          << i);
          CHECK(std::memcmp(grouped[i].data(), alone[i].data(), alone[i].size() * sizeof(float)) == 0);
          for (size_t j = alone[i].size(); j < grouped[i].size(); ++j)
            REQUIRE(grouped[i][j] == -777.0f);
        }
      }
    }
  }
}

TEST_CASE("matmul_silu_gate equals silu(x gate^T) * (x up^T) on every path [asan]") {
  thread_pool pool(2);
  uint64_t seed = 950;
  for (dtype wt : {dtype::f32, dtype::bf16}) {
    for (int64_t n_tokens : {int64_t{1}, int64_t{3}, int64_t{13}, int64_t{100}}) {
      for (cpu::matmul_path path : {cpu::matmul_path::gemv, cpu::matmul_path::gemm}) {
        const int64_t n_in = 70, n_ff = 45;
        auto x = test::random_floats(static_cast<size_t>(n_tokens * n_in), seed++, -2.0f, 2.0f);
        auto wg = test::to_dtype(test::random_floats(static_cast<size_t>(n_ff * n_in), seed++), wt);
        auto wu = test::to_dtype(test::random_floats(static_cast<size_t>(n_ff * n_in), seed++), wt);
        std::vector<double> g_ref, g_tol, u_ref, u_tol;
        reference_matmul(x, wg, wt, nullptr, n_tokens, n_in, n_ff, g_ref, g_tol);
        reference_matmul(x, wu, wt, nullptr, n_tokens, n_in, n_ff, u_ref, u_tol);
        std::vector<double> ref, tol;
        test::silu_gate_reference(g_ref, g_tol, u_ref, u_tol, ref, tol);
        for (bf16_variant v : variants_for(wt)) {
          const variant_scope scope(v);
          const auto wgv = weight_for(wg, n_ff, n_in, v, pool), wuv = weight_for(wu, n_ff, n_in, v, pool);
          std::vector<float> up(static_cast<size_t>(n_tokens * n_ff)), out(up.size() + 19, -777.0f);
          cpu::matmul_silu_gate(x.data(), n_tokens, n_in, wgv.data(), wuv.data(), wt, is_packed(v),
                                v == bf16_variant::dot_compact, n_ff, up.data(), out.data(), pool, path);
          const std::string what = "silu gate " + std::string(dtype_name(wt)) + " tokens " + std::to_string(n_tokens) +
                                   " path " + std::to_string(static_cast<int>(path)) + " variant " +
                                   std::to_string(static_cast<int>(v));
          test::check_close(out.data(), ref.data(), ref.size(), tol.data(), 0.0, 1e-6, what);
          for (size_t i = ref.size(); i < out.size(); ++i)
            REQUIRE(out[i] == -777.0f);
        }
      }
    }
  }
}

TEST_CASE("pack_bf16_panels puts each pair where the panel layout says, zeros in the padding [asan]") {
  thread_pool pool(2);
  const int64_t n_out = 37, n_in = 45;  // two panels (the second mostly padding), k padded to 64
  std::vector<uint16_t> w(static_cast<size_t>(n_out * n_in));
  for (size_t i = 0; i < w.size(); ++i)
    w[i] = static_cast<uint16_t>(i + 1);
  const size_t bytes = cpu::bf16_panels_bytes(n_out, n_in);
  CHECK(bytes == static_cast<size_t>(2 * 32 * 64) * sizeof(uint16_t));
  std::vector<uint16_t> packed(bytes / sizeof(uint16_t), 0xffff);
  cpu::pack_bf16_panels(w.data(), n_out, n_in, packed.data(), pool);
  for (int64_t row = 0; row < 64; ++row) {
    for (int64_t k = 0; k < 64; ++k) {
      const int64_t p = row / 32, r = row % 32;
      const uint16_t got = packed[static_cast<size_t>(p * 32 * 64 + ((k / 2) * 32 + r) * 2 + k % 2)];
      const uint16_t want = row < n_out && k < n_in ? w[static_cast<size_t>(row * n_in + k)] : uint16_t{0};
      INFO("row " << row << " k " << k);
      REQUIRE(got == want);
    }
  }
}

// Packed bf16 weights with 1 to 4 tokens run the streamed decode path: panels claimed in grains of 8 to 32, read as
// several side-by-side streams. Enough panels for several grains, targets of uneven size that share a grain, runs of
// unequal length and partial panels; 5, 16 and 40 tokens (the panel path: on AMX, pairs of panels handed out on
// demand) alongside.
TEST_CASE("packed bf16 decode streams match float64 over several grains, targets and gated pairs [asan]") {
  if (!cpu::have_bf16_dot_kernels() && !fma_reads_panels()) {
    MESSAGE("skipped: this build reads no packed bf16 weights (neither AVX512-BF16 nor AVX2)");
    return;
  }
  uint64_t seed = 1200;
  for (int threads : {1, 3}) {
    thread_pool pool(threads);
    for (int64_t n_tokens : {1, 2, 3, 4, 5, 16, 40}) {
      const int64_t n_in = 70;
      const std::vector<int64_t> n_outs = {2100, 33, 64, 257};  // 66 + 2 + 2 + 9 panels: grains of 32 down to 8
      auto x = test::random_floats(static_cast<size_t>(n_tokens * n_in), seed++);
      std::vector<std::vector<uint8_t>> w, wv;
      std::vector<std::vector<float>> bias, y;
      std::vector<cpu::matmul_target> targets;
      for (size_t i = 0; i < n_outs.size(); ++i) {
        w.push_back(test::to_dtype(test::random_floats(static_cast<size_t>(n_outs[i] * n_in), seed++), dtype::bf16));
        wv.push_back(weight_for(w.back(), n_outs[i], n_in, bf16_variant::dot_packed, pool));
        bias.push_back(test::random_floats(static_cast<size_t>(n_outs[i]), seed++));
        y.emplace_back(static_cast<size_t>(n_tokens * n_outs[i]) + 11, -777.0f);
      }
      for (size_t i = 0; i < n_outs.size(); ++i)
        targets.push_back(
            {wv[i].data(), dtype::bf16, n_outs[i], i % 2 == 1 ? bias[i].data() : nullptr, y[i].data(), true});
      cpu::matmul_group(x.data(), n_tokens, n_in, targets, pool);
      // With owners the grains may be taken over (thread_pool::parallel_for_takeover): the same bits.
      std::vector<std::vector<float>> y_owned;
      std::vector<cpu::matmul_target> owned = targets;
      for (size_t i = 0; i < n_outs.size(); ++i) {
        auto copy = std::make_shared<const std::vector<uint8_t>>(wv[i]);
        y_owned.emplace_back(y[i].size(), -777.0f);
        owned[i].w = copy->data();
        owned[i].y = y_owned.back().data();
        owned[i].owner = std::move(copy);
      }
      cpu::matmul_group(x.data(), n_tokens, n_in, owned, pool);
      for (size_t i = 0; i < n_outs.size(); ++i)
        REQUIRE(std::memcmp(y_owned[i].data(), y[i].data(), y[i].size() * sizeof(float)) == 0);
      for (size_t i = 0; i < n_outs.size(); ++i) {
        std::vector<double> ref, tol;
        reference_matmul(x, w[i], dtype::bf16, i % 2 == 1 ? bias[i].data() : nullptr, n_tokens, n_in, n_outs[i], ref,
                         tol);
        const std::string what = "streamed target " + std::to_string(i) + " tokens " + std::to_string(n_tokens) +
                                 " threads " + std::to_string(threads);
        test::check_close(y[i].data(), ref.data(), ref.size(), tol.data(), 0.0, 1e-6, what);
        for (size_t j = ref.size(); j < y[i].size(); ++j)
          REQUIRE(y[i][j] == -777.0f);
      }

      const int64_t n_ff = 2100;  // 66 gate/up panel pairs (a grain of 32 pairs is 64 tiles), the last one partial
      auto wg = test::to_dtype(test::random_floats(static_cast<size_t>(n_ff * n_in), seed++), dtype::bf16);
      auto wu = test::to_dtype(test::random_floats(static_cast<size_t>(n_ff * n_in), seed++), dtype::bf16);
      std::vector<double> g_ref, g_tol, u_ref, u_tol, ref, tol;
      reference_matmul(x, wg, dtype::bf16, nullptr, n_tokens, n_in, n_ff, g_ref, g_tol);
      reference_matmul(x, wu, dtype::bf16, nullptr, n_tokens, n_in, n_ff, u_ref, u_tol);
      test::silu_gate_reference(g_ref, g_tol, u_ref, u_tol, ref, tol);
      const auto wgv = weight_for(wg, n_ff, n_in, bf16_variant::dot_packed, pool);
      const auto wuv = weight_for(wu, n_ff, n_in, bf16_variant::dot_packed, pool);
      std::vector<float> up(static_cast<size_t>(n_tokens * n_ff)), out(up.size() + 19, -777.0f);
      cpu::matmul_silu_gate(x.data(), n_tokens, n_in, wgv.data(), wuv.data(), dtype::bf16, true, false, n_ff, up.data(),
                            out.data(), pool, cpu::matmul_path::automatic);
      test::check_close(out.data(), ref.data(), ref.size(), tol.data(), 0.0, 1e-6,
                        "streamed gate tokens " + std::to_string(n_tokens) + " threads " + std::to_string(threads));
      for (size_t j = ref.size(); j < out.size(); ++j)
        REQUIRE(out[j] == -777.0f);
      std::vector<float> up_owned(up.size()), out_owned(out.size(), -777.0f);
      const auto wg_owned = std::make_shared<const std::vector<uint8_t>>(wgv);
      const auto wu_owned = std::make_shared<const std::vector<uint8_t>>(wuv);
      cpu::matmul_silu_gate(x.data(), n_tokens, n_in, wg_owned->data(), wu_owned->data(), dtype::bf16, true, false,
                            n_ff, up_owned.data(), out_owned.data(), pool, cpu::matmul_path::automatic, wg_owned,
                            wu_owned);
      REQUIRE(std::memcmp(out_owned.data(), out.data(), out.size() * sizeof(float)) == 0);
    }
  }
}

TEST_CASE("AMX tiles: amx_panels_product over several panel groups, K blocks and 16-row blocks matches float64") {
  if (!cpu::amx_bf16_usable()) {
    MESSAGE("skipped: this CPU or process cannot run AMX-BF16 tiles");
    return;
  }
  thread_pool pool(1);
  // 6 panels: a group of four and one of two; K 600 (k_pad 608: blocks of 128 pairs, the last of 48); 48 rows: a
  // block of 32 and one of 16; 16 and 32 rows: each panel streamed through all of K at once.
  for (const int64_t n_rows : {48, 16, 32}) {
    CAPTURE(n_rows);
    const int64_t n_out = 6 * 32 - 5, n_in = 600, k_pad = 608, ld = k_pad + 32;
    auto x = test::random_floats(static_cast<size_t>(n_rows * n_in), 77);
    auto w = test::to_dtype(test::random_floats(static_cast<size_t>(n_out * n_in), 78), dtype::bf16);
    const auto packed = weight_for(w, n_out, n_in, bf16_variant::dot_packed, pool);
    std::vector<uint16_t> xb(static_cast<size_t>(n_rows * ld));
    cpu::round_rows_to_bf16(x.data(), n_rows, n_in, xb.data(), k_pad, ld);
    std::vector<const uint32_t*> panels;
    for (int p = 0; p < 6; ++p)
      panels.push_back(reinterpret_cast<const uint32_t*>(packed.data()) + p * (k_pad / 2) * 32);
    std::vector<float> sums(static_cast<size_t>(6 * n_rows * 32), -777.0f);
    cpu::amx_panels_product(xb.data(), ld, n_rows, panels.data(), 6, k_pad, sums.data());
    std::vector<double> ref, tol;
    reference_matmul(x, w, dtype::bf16, nullptr, n_rows, n_in, n_out, ref, tol);
    for (int p = 0; p < 6; ++p)
      for (int64_t t = 0; t < n_rows; ++t)
        for (int64_t j = 0; j < 32; ++j) {
          const float got = sums[static_cast<size_t>((p * n_rows + t) * 32 + j)];
          const int64_t o = p * 32 + j;
          if (o >= n_out) {
            REQUIRE(got == 0.0f);  // the panel's zero rows
            continue;
          }
          const size_t r = static_cast<size_t>(t * n_out + o);
          REQUIRE(std::fabs(static_cast<double>(got) - ref[r]) <= tol[r]);
        }
  }
}

TEST_CASE(
    "the streamed decode's read pattern: two streams 1 KiB ahead on Intel, four a step ahead elsewhere, compact "
    "panels two streams eleven blocks ahead with 256-bit dot products on Intel, four streams ten blocks ahead on Zen 5 "
    "(its GEMM tiles 48 blocks), two streams one block ahead elsewhere, quantized one-token tiles 1 KiB ahead on "
    "Intel only [asan]") {
  for (int family : {6, 0x1a}) {
    const cpu::decode_read_pattern intel = cpu::decode_read_pattern_for("GenuineIntel", family);
    CHECK(intel.streams == 2);
    CHECK(intel.prefetch_bytes == 1024);
    CHECK(intel.compact_streams == 2);
    CHECK(intel.compact_prefetch_blocks == 11);
    CHECK(intel.compact_gemm_prefetch_blocks == 4);
    CHECK(intel.compact_narrow_dots);
    CHECK(intel.quantized_prefetch_bytes == 1024);
  }
  for (int family : {0x1a, 0x1b}) {
    const cpu::decode_read_pattern zen5 = cpu::decode_read_pattern_for("AuthenticAMD", family);
    CHECK(zen5.streams == 4);
    CHECK(zen5.prefetch_bytes == 128);
    CHECK(zen5.compact_streams == 4);
    CHECK(zen5.compact_prefetch_blocks == 10);
    CHECK(zen5.compact_gemm_prefetch_blocks == 48);
    CHECK_FALSE(zen5.compact_narrow_dots);
    CHECK(zen5.quantized_prefetch_bytes == 0);
  }
  for (const char* vendor : {"AuthenticAMD", "", "HygonGenuine"})
    for (int family : {0, 0x17, 0x19}) {
      const cpu::decode_read_pattern other = cpu::decode_read_pattern_for(vendor, family);
      CHECK(other.streams == 4);
      CHECK(other.prefetch_bytes == 128);
      CHECK(other.compact_streams == 2);
      CHECK(other.compact_prefetch_blocks == 1);
      CHECK(other.compact_gemm_prefetch_blocks == 4);
      CHECK_FALSE(other.compact_narrow_dots);
      CHECK(other.quantized_prefetch_bytes == 0);
    }
  CHECK(cpu::decode_read_pattern_for("HygonGenuine", 0x1a).compact_streams == 2);  // Zen 5's pattern is AMD's only
  const std::string vendor = cpu::cpu_vendor();
  CHECK(vendor.size() == 12);     // every x86-64 CPU names its vendor in CPUID leaf 0
  CHECK(cpu::cpu_family() >= 6);  // CPUID leaf 1: every x86-64 CPU has a family of 6 or more
}
