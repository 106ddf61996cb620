// The CUDA LoRA kernels' math on the CPU, no GPU needed: lora.cu's two kernels written out as loops over their
// blocks and threads, calling the very lora_math.hpp functions they call (slot guard, a thread's part of the shrink,
// the expand dot product, the launch shapes) and adding the threads' parts in the order of device_math.cuh's
// block_sum, against the float64 reference of tests/kernels/lora_reference.hpp; both load widths (16-byte and
// scalar) on every shape.
#include "kernels/cuda/lora_math.hpp"

#include "../lora_reference.hpp"

#include <doctest/doctest.h>

#include <array>
#include <cstdint>
#include <string>
#include <vector>

namespace {

using namespace actorllm;
namespace lora = actorllm::cuda::lora;

// warp_sum's butterfly: at each step lane l adds the value of lane l ^ offset to its own.
float warp_sum_emulated(std::array<float, 32> v) {
  for (int offset = 16; offset > 0; offset /= 2) {
    std::array<float, 32> next{};
    for (int l = 0; l < 32; ++l)
      next[static_cast<size_t>(l)] = v[static_cast<size_t>(l)] + v[static_cast<size_t>(l ^ offset)];
    v = next;
  }
  return v[0];
}

// block_sum over a block of parts.size() threads (a multiple of 32): each warp's butterfly, then warp 0's over the
// warps' totals, its lanes past the last warp holding 0.
float block_sum_emulated(const std::vector<float>& parts) {
  const size_t n_warps = parts.size() / 32;
  std::array<float, 32> totals{};
  for (size_t w = 0; w < n_warps; ++w) {
    std::array<float, 32> lanes{};
    for (size_t l = 0; l < 32; ++l)
      lanes[l] = parts[w * 32 + l];
    totals[w] = warp_sum_emulated(lanes);
  }
  return warp_sum_emulated(totals);
}

// lora_shrink_kernel<VS> then lora_expand_kernel<VE> over every block and thread of their grids, on c's arrays.
template <int VS, int VE>
void emulate_kernels(const test::lora_case& c, std::vector<float>& shrunk, std::vector<float>& y) {
  const int threads = lora::shrink_threads(c.n_in, VS);
  for (int64_t pair = 0; pair < c.n * c.rank; ++pair) {  // one shrink block each
    const int64_t t = pair / c.rank, r = pair % c.rank;
    const int32_t s = lora::row_slot(c.slots.data(), t, c.n_slots);
    if (s < 0)
      continue;
    const float* a_row = c.a.data() + (static_cast<int64_t>(s) * c.rank + r) * c.n_in;
    std::vector<float> parts(static_cast<size_t>(threads));
    for (int j = 0; j < threads; ++j)
      parts[static_cast<size_t>(j)] = lora::shrink_partial<VS>(a_row, c.x.data() + t * c.n_in, c.n_in, j, threads);
    shrunk[static_cast<size_t>(pair)] = block_sum_emulated(parts);
  }
  const int64_t blocks = lora::expand_blocks(c.n_out), stride = blocks * lora::expand_threads;
  for (int64_t t = 0; t < c.n; ++t) {
    const int32_t s = lora::row_slot(c.slots.data(), t, c.n_slots);
    if (s < 0)
      continue;
    const float* b_slot = c.b.data() + static_cast<int64_t>(s) * c.n_out * c.rank;
    for (int64_t first = 0; first < stride; ++first)  // one thread each: block first / 256, thread first % 256
      for (int64_t o = first; o < c.n_out; o += stride)
        y[static_cast<size_t>(t * c.n_out + o)] +=
            lora::expand_dot<VE>(b_slot + o * c.rank, shrunk.data() + t * c.rank, c.rank);
  }
}

// Runs one instantiation of the emulated kernels on c and checks it against e.
void run_emulated(const test::lora_case& c, const test::lora_expected& e, int shrink_vector, int expand_vector,
                  void (*kernels)(const test::lora_case&, std::vector<float>&, std::vector<float>&)) {
  std::vector<float> shrunk = c.shrunk, y = c.y;
  kernels(c, shrunk, y);
  test::check_lora(c, e, shrunk, y,
                   "loads of " + std::to_string(shrink_vector) + " (shrink) and " + std::to_string(expand_vector) +
                       " (expand) floats");
}

struct shape {
  int64_t n, n_in, n_out, n_slots, rank;
};

}  // namespace

TEST_CASE("lora kernels' math on the cpu matches float64, 16-byte and scalar loads, ranks 1 to 17") {
  // n_in and rank multiples of 4 where the 16-byte path applies (the launcher picks it only then); the scalar path
  // on every shape.
  const shape shapes[] = {{1, 32, 45, 1, 1},     {1, 2048, 5632, 4, 16}, {3, 132, 7, 2, 8},   {40, 100, 77, 3, 8},
                          {40, 256, 130, 4, 16}, {40, 19, 301, 2, 17},   {7, 129, 63, 3, 17}, {2, 4100, 9, 2, 4}};
  uint64_t seed = 8100;
  for (const shape& s : shapes) {
    const test::lora_case c = test::random_lora_case(s.n, s.n_in, s.n_out, s.n_slots, s.rank, seed += 10);
    const test::lora_expected e = test::lora_reference(c);
    const bool shrink_4 = lora::vector_of(c.n_in, true) == 4, expand_4 = lora::vector_of(c.rank, true) == 4;
    run_emulated(c, e, 1, 1, &emulate_kernels<1, 1>);
    if (shrink_4)
      run_emulated(c, e, 4, 1, &emulate_kernels<4, 1>);
    if (expand_4)
      run_emulated(c, e, 1, 4, &emulate_kernels<1, 4>);
    if (shrink_4 && expand_4)
      run_emulated(c, e, 4, 4, &emulate_kernels<4, 4>);
  }
}

TEST_CASE("lora kernels' math: the expand sum is the same for either load width") {
  // Both sum r = 0, 1, ... in order with one fmaf each: the load width changes only how b and shrunk are read.
  for (int64_t rank : {4, 16, 64}) {
    const std::vector<float> b = test::random_floats(static_cast<size_t>(rank), 8300 + static_cast<uint64_t>(rank));
    const std::vector<float> s = test::random_floats(static_cast<size_t>(rank), 8400 + static_cast<uint64_t>(rank));
    CAPTURE(rank);
    CHECK(lora::expand_dot<4>(b.data(), s.data(), rank) == lora::expand_dot<1>(b.data(), s.data(), rank));
  }
}

TEST_CASE("lora kernels' math: a slot at or past the stack's end skips the row, as a negative one does") {
  const std::vector<int32_t> slots{0, 2, 3, -1, -7, 1000000};
  const int32_t want[] = {0, 2, -1, -1, -1, -1};
  for (size_t t = 0; t < slots.size(); ++t)
    CHECK(lora::row_slot(slots.data(), static_cast<int64_t>(t), 3) == want[t]);

  test::lora_case c = test::random_lora_case(4, 40, 30, 2, 8, 8200);
  c.slots = {1, 2, 0, 7};  // rows 1 and 3 name slots the stack has not
  test::lora_case only_valid = c;
  only_valid.slots = {1, -1, 0, -1};
  const test::lora_expected e = test::lora_reference(only_valid);
  std::vector<float> shrunk = c.shrunk, y = c.y;
  emulate_kernels<4, 4>(c, shrunk, y);
  test::check_lora(only_valid, e, shrunk, y, "slots past the end");
}

TEST_CASE("lora kernels' math: the shrink threads' parts cover every input exactly once") {
  // Integer-valued products summed exactly in f32: any input skipped or counted twice changes the total.
  for (int64_t n_in : {1, 3, 4, 31, 32, 100, 128, 129, 1000, 2048, 4100}) {
    for (int v : {1, 4}) {
      if (lora::vector_of(n_in, true) < v)
        continue;
      std::vector<float> ones(static_cast<size_t>(n_in), 1.0f), index(static_cast<size_t>(n_in));
      for (int64_t i = 0; i < n_in; ++i)
        index[static_cast<size_t>(i)] = static_cast<float>(i + 1);
      const int threads = lora::shrink_threads(n_in, v);
      double total = 0;
      for (int j = 0; j < threads; ++j)
        total += v == 4 ? lora::shrink_partial<4>(ones.data(), index.data(), n_in, j, threads)
                        : lora::shrink_partial<1>(ones.data(), index.data(), n_in, j, threads);
      CAPTURE(n_in);
      CAPTURE(v);
      CHECK(total == static_cast<double>(n_in) * static_cast<double>(n_in + 1) / 2);
    }
  }
}

TEST_CASE("lora kernels' launch shapes: whole warps within bounds, 16-byte loads only on aligned rows") {
  for (int64_t n_in : {0, 1, 17, 128, 129, 512, 2048, 4096, 8192, 1 << 20}) {
    for (int v : {1, 4}) {
      const int threads = lora::shrink_threads(n_in, v);
      CAPTURE(n_in);
      CHECK(threads % 32 == 0);
      CHECK(threads >= lora::min_shrink_threads);
      CHECK(threads <= lora::max_shrink_threads);
    }
  }
  CHECK(lora::shrink_threads(2048, 4) == 128);  // the decode shape: 4 loads of 16 bytes per thread per operand
  CHECK(lora::shrink_threads(2048, 1) == 256);
  CHECK(lora::vector_of(2048, true) == 4);
  CHECK(lora::vector_of(2048, false) == 1);
  CHECK(lora::vector_of(17, true) == 1);
  CHECK(lora::vector_of(16, true) == 4);
  CHECK(lora::expand_blocks(0) == 0);
  CHECK(lora::expand_blocks(1) == 1);
  CHECK(lora::expand_blocks(5632) == 22);
  CHECK(lora::expand_blocks(int64_t{1} << 40) == lora::max_expand_blocks);
}
