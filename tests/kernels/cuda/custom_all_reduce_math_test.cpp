// The custom all-reduce's index arithmetic on the CPU (comm/cuda/custom_all_reduce_math.hpp): packs and the tail,
// the two-shot partition, the grid; then both kernels' loop structure emulated rank by rank, block by block, with the
// same helpers, against the rank-order sum: every element written once, identical bits on every rank and for both
// shots, and the two-shot's gather reading only what the same block index reduced (why per-block barriers suffice).
#include "comm/cuda/custom_all_reduce_math.hpp"
#include "kernels/dtype.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <random>
#include <set>
#include <vector>

using namespace actorllm;
using namespace actorllm::cuda;

TEST_CASE("custom all-reduce math: the partition covers every item once, in rank order, within one of even") {
  for (int world = 1; world <= car::max_ranks; ++world) {
    for (int64_t n : {0, 1, 2, 3, 7, 8, 9, 63, 64, 65, 1000, 1001, 524288, 524289}) {
      CAPTURE(world);
      CAPTURE(n);
      int64_t next = 0;
      int64_t smallest = n, largest = 0;
      for (int r = 0; r < world; ++r) {
        const auto p = car::partition(n, world, r);
        CHECK(p.begin == next);
        CHECK(p.size() >= 0);
        next = p.end;
        smallest = std::min(smallest, p.size());
        largest = std::max(largest, p.size());
      }
      CHECK(next == n);
      CHECK(largest - smallest <= 1);
      CHECK(car::partition(n, world, 0).size() == largest);  // rank 0 has the largest: the grid is sized by it
    }
  }
}

TEST_CASE("custom all-reduce math: 16-byte packs and the tail after them") {
  CHECK(car::pack_elems(4) == 4);
  CHECK(car::pack_elems(2) == 8);
  CHECK(car::full_packs(10, 4) == 2);
  CHECK(car::tail_elems(10, 4).begin == 8);
  CHECK(car::tail_elems(10, 4).end == 10);
  CHECK(car::full_packs(10, 2) == 1);
  CHECK(car::tail_elems(10, 2).begin == 8);
  CHECK(car::full_packs(3, 4) == 0);
  CHECK(car::tail_elems(3, 4).size() == 3);
  CHECK(car::tail_elems(16, 2).size() == 0);
  CHECK(car::tail_elems(0, 4).size() == 0);
  for (int64_t n = 0; n < 100; ++n)
    for (int eb : {2, 4}) {
      CHECK(car::tail_elems(n, eb).size() < car::pack_elems(eb));
      CHECK(car::full_packs(n, eb) * car::pack_elems(eb) + car::tail_elems(n, eb).size() == n);
    }
}

TEST_CASE("custom all-reduce math: the grid is one block at least, one pack per thread, 36 blocks at most") {
  CHECK(car::launch_blocks(0) == 1);
  CHECK(car::launch_blocks(1) == 1);
  CHECK(car::launch_blocks(car::block_threads) == 1);
  CHECK(car::launch_blocks(car::block_threads + 1) == 2);
  CHECK(car::launch_blocks(int64_t{36} * car::block_threads) == 36);
  CHECK(car::launch_blocks(int64_t{1} << 30) == car::max_launch_blocks);
  CHECK(car::max_launch_blocks <= car::signal_blocks);
  CHECK(car::grid_stride(3) == 3 * car::block_threads);
  CHECK(car::grid_first(2, 5) == 2 * car::block_threads + 5);
}

TEST_CASE("custom all-reduce math: the signal layout") {
  CHECK(sizeof(car::signal_layout) == 3 * car::signal_blocks * car::max_ranks * 4 + car::signal_blocks * 4);
  CHECK(offsetof(car::signal_layout, mid) == car::signal_blocks * car::max_ranks * 4);
  CHECK(offsetof(car::signal_layout, counter) % 4 == 0);
}

namespace {

// The rank-order sum the kernels promise: acc = x0; acc += x1; ... in f32; bf16 rounded once at the end.
uint32_t reference_bits(const std::vector<std::vector<float>>& in, size_t i, bool bf16) {
  float acc = in[0][i];
  for (size_t k = 1; k < in.size(); ++k)
    acc += in[k][i];
  return bf16 ? f32_to_bf16(acc) : std::bit_cast<uint32_t>(acc);
}

// One rank's view of an emulated launch: out[i] holds the result bits (u32 for f32, u16 for bf16), or none.
struct emulated_rank {
  std::vector<int64_t> out_bits;  // -1: never written
  std::vector<int> writes;        // how often each element was written
};

float round_like(float v, bool bf16) { return bf16 ? bf16_to_f32(f32_to_bf16(v)) : v; }

// The kernels' loops on the CPU: `in[k]` is rank k's staging buffer (already rounded to the element type).
std::vector<emulated_rank> emulate(const std::vector<std::vector<float>>& in, bool bf16, bool two_shot) {
  const int world = static_cast<int>(in.size());
  const int64_t n = static_cast<int64_t>(in[0].size());
  const int eb = bf16 ? 2 : 4;
  const int pe = car::pack_elems(eb);
  const int64_t packs = car::full_packs(n, eb);
  const int blocks = car::launch_blocks(two_shot ? car::partition(packs, world, 0).size() : packs);
  const int64_t stride = car::grid_stride(blocks);
  auto stage = in;  // the two-shot rewrites partitions of the staging buffers
  std::vector<emulated_rank> out(static_cast<size_t>(world));
  // reduced_by[k][pack] = block that reduced that pack on rank k (two-shot phase 1)
  std::vector<std::vector<int>> reduced_by(static_cast<size_t>(world),
                                           std::vector<int>(static_cast<size_t>(packs), -1));
  auto sum_elem = [&](const std::vector<std::vector<float>>& buf, int64_t e) {
    float acc = buf[0][static_cast<size_t>(e)];
    for (int k = 1; k < world; ++k)
      acc += buf[static_cast<size_t>(k)][static_cast<size_t>(e)];
    return acc;
  };
  auto put = [&](emulated_rank& r, int64_t e, float v) {
    r.out_bits[static_cast<size_t>(e)] = bf16 ? f32_to_bf16(v) : std::bit_cast<uint32_t>(v);
    ++r.writes[static_cast<size_t>(e)];
  };
  for (int rank = 0; rank < world; ++rank) {
    out[static_cast<size_t>(rank)].out_bits.assign(static_cast<size_t>(n), -1);
    out[static_cast<size_t>(rank)].writes.assign(static_cast<size_t>(n), 0);
  }
  // Phase 1 (one-shot: everything; two-shot: reduce-scatter), every rank, every block, every thread; then the tail.
  for (int rank = 0; rank < world; ++rank) {
    auto& me = out[static_cast<size_t>(rank)];
    const auto mine = two_shot ? car::partition(packs, world, rank) : car::index_range{0, packs};
    for (int b = 0; b < blocks; ++b)
      for (int t = 0; t < car::block_threads; ++t)
        for (int64_t i = car::grid_first(b, t); i < mine.size(); i += stride) {
          const int64_t pack = mine.begin + i;
          for (int j = 0; j < pe; ++j) {
            const int64_t e = pack * pe + j;
            const float v = sum_elem(in, e);
            if (two_shot)
              stage[static_cast<size_t>(rank)][static_cast<size_t>(e)] = round_like(v, bf16);
            else
              put(me, e, v);
          }
          if (two_shot)
            reduced_by[static_cast<size_t>(rank)][static_cast<size_t>(pack)] = b;
        }
    const auto tail = car::tail_elems(n, eb);
    for (int t = 0; t < car::block_threads; ++t)
      for (int64_t e = tail.begin + t; e < tail.end; e += car::block_threads)
        put(me, e, sum_elem(in, e));
  }
  if (!two_shot)
    return out;
  bool gathered_own_block = true;
  // Phase 2: the gather; block b may read only what block b of the owner reduced (its barrier covers nothing else).
  for (int rank = 0; rank < world; ++rank) {
    auto& me = out[static_cast<size_t>(rank)];
    for (int k = 0; k < world; ++k) {
      const auto part = car::partition(packs, world, k);
      for (int b = 0; b < blocks; ++b)
        for (int t = 0; t < car::block_threads; ++t)
          for (int64_t i = car::grid_first(b, t); i < part.size(); i += stride) {
            const int64_t pack = part.begin + i;
            gathered_own_block =
                gathered_own_block && reduced_by[static_cast<size_t>(k)][static_cast<size_t>(pack)] == b;
            for (int j = 0; j < pe; ++j) {
              const int64_t e = pack * pe + j;
              put(me, e, stage[static_cast<size_t>(k)][static_cast<size_t>(e)]);
            }
          }
    }
  }
  CHECK_MESSAGE(gathered_own_block, "a block gathered a pack another block index reduced");
  return out;
}

}  // namespace

TEST_CASE("custom all-reduce math: both kernels' loops give every rank the rank-order sum, each element once") {
  std::mt19937 rng(17);
  std::uniform_real_distribution<float> dist(-3.0f, 3.0f);
  for (bool bf16 : {false, true})
    for (int world : {2, 3, 4, 8})
      for (int64_t n : {1, 3, 7, 8, 9, 33, 1001, 4093, 4 * 512 * 3 + 5, 37 * 512 * 8 + 11}) {
        CAPTURE(bf16);
        CAPTURE(world);
        CAPTURE(n);
        std::vector<std::vector<float>> in(static_cast<size_t>(world), std::vector<float>(static_cast<size_t>(n)));
        for (auto& row : in)
          for (auto& v : row)
            v = round_like(dist(rng), bf16);
        for (bool two_shot : {false, true}) {
          CAPTURE(two_shot);
          const auto ranks = emulate(in, bf16, two_shot);
          for (int r = 0; r < world; ++r) {
            const auto& me = ranks[static_cast<size_t>(r)];
            bool all_once = true, all_equal = true;
            for (int64_t e = 0; e < n; ++e) {
              all_once = all_once && me.writes[static_cast<size_t>(e)] == 1;
              all_equal = all_equal && me.out_bits[static_cast<size_t>(e)] ==
                                           static_cast<int64_t>(reference_bits(in, static_cast<size_t>(e), bf16));
            }
            CHECK(all_once);
            CHECK(all_equal);
          }
        }
      }
}
