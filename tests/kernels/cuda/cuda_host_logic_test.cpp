// The host-side logic of the CUDA backend, which needs no GPU: launch geometry, the cuBLAS argument derivation
// (checked by running a column-major reference GEMM with the derived arguments against the row-major Linear) and the
// caching allocator's size classes.
#include "kernels/cuda/device_memory.hpp"
#include "kernels/cuda/gemm.hpp"
#include "kernels/cuda/launch_geometry.hpp"

#include <doctest/doctest.h>

#include <cstdint>
#include <random>
#include <stdexcept>
#include <vector>

using namespace actorllm::cuda;

namespace {

// What cuBLAS computes for column-major A, B, C with leading dimensions: C = op(A) * op(B) (alpha 1, beta 0).
void column_major_gemm(const gemm_args& a, const float* A, const float* B, float* C) {
  for (int j = 0; j < a.n; ++j) {
    for (int i = 0; i < a.m; ++i) {
      double acc = 0.0;
      for (int p = 0; p < a.k; ++p) {
        const float av =
            a.transpose_a ? A[p + static_cast<int64_t>(i) * a.lda] : A[i + static_cast<int64_t>(p) * a.lda];
        const float bv =
            a.transpose_b ? B[j + static_cast<int64_t>(p) * a.ldb] : B[p + static_cast<int64_t>(j) * a.ldb];
        acc += static_cast<double>(av) * bv;
      }
      C[i + static_cast<int64_t>(j) * a.ldc] = static_cast<float>(acc);
    }
  }
}

}  // namespace

TEST_CASE("cuda host: linear_gemm_args makes cuBLAS's column-major GEMM compute the row-major y = x w^T") {
  std::mt19937 gen{7};
  std::uniform_real_distribution<float> dist{-1.0f, 1.0f};
  for (auto [n_tokens, n_in, n_out] :
       {std::tuple<int64_t, int64_t, int64_t>{1, 5, 3}, {7, 1, 9}, {4, 13, 1}, {17, 33, 29}, {3, 64, 128}}) {
    CAPTURE(n_tokens);
    CAPTURE(n_in);
    CAPTURE(n_out);
    std::vector<float> x(static_cast<size_t>(n_tokens * n_in)), w(static_cast<size_t>(n_out * n_in));
    for (float& v : x)
      v = dist(gen);
    for (float& v : w)
      v = dist(gen);
    const gemm_args a = linear_gemm_args(n_tokens, n_in, n_out);
    CHECK(a.transpose_a);
    CHECK_FALSE(a.transpose_b);
    CHECK(a.m == n_out);
    CHECK(a.n == n_tokens);
    CHECK(a.k == n_in);
    // cuBLAS's own argument rules: lda >= k for op(A) = A^T (A is k x m), ldb >= k, ldc >= m.
    CHECK(a.lda >= a.k);
    CHECK(a.ldb >= a.k);
    CHECK(a.ldc >= a.m);
    std::vector<float> y(static_cast<size_t>(n_tokens * n_out), -99.0f);
    column_major_gemm(a, w.data(), x.data(), y.data());
    for (int64_t t = 0; t < n_tokens; ++t) {
      for (int64_t o = 0; o < n_out; ++o) {
        double want = 0.0;
        for (int64_t i = 0; i < n_in; ++i)
          want += static_cast<double>(x[static_cast<size_t>(t * n_in + i)]) * w[static_cast<size_t>(o * n_in + i)];
        CHECK(y[static_cast<size_t>(t * n_out + o)] == doctest::Approx(want).epsilon(1e-6));
      }
    }
  }
}

TEST_CASE("cuda host: linear_gemm_args refuses dimensions beyond cuBLAS's int and keeps leading dimensions positive") {
  CHECK_THROWS_AS(linear_gemm_args(1, int64_t{1} << 31, 4), std::invalid_argument);
  CHECK_THROWS_AS(linear_gemm_args(-1, 4, 4), std::invalid_argument);
  CHECK_THROWS_AS(linear_gemm_args(1, 4, int64_t{3} << 31), std::invalid_argument);
  const gemm_args empty = linear_gemm_args(0, 0, 0);
  CHECK(empty.lda == 1);
  CHECK(empty.ldb == 1);
  CHECK(empty.ldc == 1);
  // Llama-3.1-8B's largest GEMMs fit: lm_head 128256 x 4096 and gate_up 28672 x 4096 at 8192 tokens.
  const gemm_args big = linear_gemm_args(8192, 4096, 128256);
  CHECK(big.m == 128256);
  CHECK(big.ldc == 128256);
}

TEST_CASE("cuda host: elementwise and per-head grids cover every element without oversized grids") {
  CHECK(elementwise_grid(0).blocks == 0);
  CHECK(elementwise_grid(-5).blocks == 0);
  for (int64_t n : {int64_t{1}, int64_t{255}, int64_t{256}, int64_t{257}, int64_t{100003}, int64_t{1} << 33}) {
    CAPTURE(n);
    const grid_1d g = elementwise_grid(n);
    CHECK(g.threads == static_cast<unsigned>(elementwise_threads));
    CHECK(g.blocks >= 1);
    CHECK(g.blocks <= static_cast<unsigned>(max_elementwise_blocks));
    // Without the cap the grid is exactly the ceiling; with it, the grid-stride loop covers the rest.
    if (n <= max_elementwise_blocks * elementwise_threads)
      CHECK(static_cast<int64_t>(g.blocks) == (n + elementwise_threads - 1) / elementwise_threads);
  }
  // RoPE: one warp per (token, head); 4 warps per block.
  const grid_1d r = warp_per_item_grid(7 * (32 + 8));
  CHECK(r.threads == 128);
  CHECK(r.blocks == (7 * 40 + 3) / 4);
  CHECK(static_cast<int64_t>(r.blocks) * 4 >= 7 * 40);
  CHECK(warp_per_item_grid(0).blocks == 0);
}

TEST_CASE("cuda host: a norm row is read in one pass up to 4096 floats, with 16-byte loads only where they fit") {
  CHECK(row_launch_of(0, true).threads == 0);
  // Llama's 4096-wide rows: 1024 threads of one float4 each (the old kernel: 256 threads, 16 dependent loads each).
  CHECK(row_launch_of(4096, true).threads == 1024);
  CHECK(row_launch_of(4096, true).vector == 4);
  CHECK(row_launch_of(4096, false).vector == 1);  // a misaligned row pointer: scalar loads
  CHECK(row_launch_of(4098, true).vector == 1);   // a width that is no multiple of 4
  CHECK(row_launch_of(64, true).threads == 32);   // stories260K: one warp
  CHECK(row_launch_of(1, true).threads == 32);
  for (int64_t width : {int64_t{1}, int64_t{3}, int64_t{31}, int64_t{300}, int64_t{4095}, int64_t{5120}, int64_t{8192},
                        int64_t{1} << 20}) {
    for (bool aligned : {false, true}) {
      CAPTURE(width);
      CAPTURE(aligned);
      const row_launch r = row_launch_of(width, aligned);
      CHECK(r.threads % 32 == 0);
      CHECK(r.threads >= 32);
      CHECK(r.threads <= static_cast<unsigned>(row_threads));
      CHECK((r.vector == 1 || (r.vector == 4 && width % 4 == 0 && aligned)));
      // No more threads than one load each would need, beyond rounding to a warp.
      CHECK(static_cast<int64_t>(r.threads) < (width + r.vector - 1) / r.vector + 32);
    }
  }
}

TEST_CASE("cuda host: allocation size classes round up to 512 B below 1 MiB and to 2 MiB above") {
  CHECK(round_allocation(0) == 0);
  CHECK(round_allocation(1) == 512);
  CHECK(round_allocation(512) == 512);
  CHECK(round_allocation(513) == 1024);
  CHECK(round_allocation((size_t{1} << 20) - 1) == size_t{1} << 20);
  CHECK(round_allocation(size_t{1} << 20) == size_t{2} << 20);
  CHECK(round_allocation((size_t{2} << 20) + 1) == size_t{4} << 20);
  for (size_t b : {size_t{3}, size_t{4097}, size_t{999999}, size_t{5} << 20, size_t{16} << 30}) {
    CAPTURE(b);
    const size_t r = round_allocation(b);
    CHECK(r >= b);
    CHECK(r - b < (b < (size_t{1} << 20) ? size_t{512} : size_t{2} << 20));
  }
}
