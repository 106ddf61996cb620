// The CPU backend's lora_add (kernels/cpu/lora.cpp) against the float64 reference of lora_reference.hpp: ranks 1 to
// 17, widths that are not multiples of the vector width, one row and 40 (the pool's parallel path), several adapter
// slots with rows that have none; and its promise of one fixed summation order whatever the thread count.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "kernels/backend.hpp"
#include "lora_reference.hpp"

using namespace actorllm;

namespace {

struct lora_result {
  std::vector<float> shrunk, y;
};

// Runs c through be.lora_add (y and shrunk start as c has them) and returns both outputs.
lora_result run_lora(backend& be, const test::lora_case& c) {
  auto input = [&](dtype type, tensor_shape shape, const void* data) {
    tensor t = be.alloc(type, shape);
    be.upload(t, data, t.nbytes());
    return t;
  };
  const tensor x = input(dtype::f32, {c.n, c.n_in}, c.x.data());
  const tensor a = input(dtype::f32, {c.n_slots, c.rank, c.n_in}, c.a.data());
  const tensor b = input(dtype::f32, {c.n_slots, c.n_out, c.rank}, c.b.data());
  const tensor slots = input(dtype::i32, {c.n}, c.slots.data());
  const tensor shrunk = input(dtype::f32, {c.n, c.rank}, c.shrunk.data());
  const tensor y = input(dtype::f32, {c.n, c.n_out}, c.y.data());
  be.lora_add(x, a, b, slots, shrunk, y);
  lora_result r{std::vector<float>(c.shrunk.size()), std::vector<float>(c.y.size())};
  be.download(shrunk, r.shrunk.data(), shrunk.nbytes());
  be.download(y, r.y.data(), y.nbytes());
  return r;
}

struct lora_shape {
  int64_t n, n_in, n_out, n_slots, rank;
};

// Ranks 1, 8, 16 and 17; n_in and n_out mostly off every multiple of 16; the decode shape of a 1B model's MLP.
const lora_shape shapes[] = {
    {1, 33, 45, 1, 1},     {1, 2048, 5632, 4, 16}, {3, 130, 7, 2, 8},  {40, 100, 77, 3, 8},
    {40, 257, 130, 4, 16}, {40, 19, 301, 2, 17},   {40, 64, 48, 5, 1}, {7, 129, 63, 3, 17},
};

}  // namespace

TEST_CASE("lora_add on the cpu matches float64 for ranks 1 to 17, mixed slots, 1 and 2 threads, bit-identical [asan]") {
  uint64_t seed = 7100;
  for (const lora_shape& s : shapes) {
    const test::lora_case c = test::random_lora_case(s.n, s.n_in, s.n_out, s.n_slots, s.rank, seed += 10);
    const test::lora_expected e = test::lora_reference(c);
    std::vector<lora_result> results;
    for (int threads : {1, 2}) {
      std::unique_ptr<backend> be = make_backend(device_kind::cpu, threads);
      results.push_back(run_lora(*be, c));
      test::check_lora(c, e, results.back().shrunk, results.back().y, std::to_string(threads) + " threads");
    }
    INFO(c.describe());
    CHECK_MESSAGE(results[0].y == results[1].y, "y depends on the thread count");
    CHECK_MESSAGE(results[0].shrunk == results[1].shrunk, "shrunk depends on the thread count");
  }
}

TEST_CASE("lora_add on the cpu: one row without an adapter, and a batch where no row has one, change nothing [asan]") {
  std::unique_ptr<backend> be = make_backend(device_kind::cpu, 2);
  for (int64_t n : {1, 40}) {
    test::lora_case c = test::random_lora_case(n, 300, 200, 2, 16, 7200 + static_cast<uint64_t>(n));
    for (int32_t& s : c.slots)
      s = -1;
    const lora_result r = run_lora(*be, c);
    INFO(c.describe());
    CHECK(r.y == c.y);
    CHECK(r.shrunk == c.shrunk);
  }
}

TEST_CASE("lora_add on the cpu: a batch equals its rows run one at a time, bit for bit [asan]") {
  // Rows do not interact: the batched call and n single-row calls agree bit for bit (the parallel path splits the
  // work over rows and outputs, never inside one sum).
  std::unique_ptr<backend> be = make_backend(device_kind::cpu, 2);
  test::lora_case c = test::random_lora_case(40, 211, 333, 3, 16, 7300);
  const lora_result batched = run_lora(*be, c);
  for (int64_t t = 0; t < c.n; ++t) {
    test::lora_case one{1, c.n_in, c.n_out, c.n_slots, c.rank, {}, c.a, c.b, {}, {}, {c.slots[static_cast<size_t>(t)]}};
    one.x.assign(c.x.begin() + t * c.n_in, c.x.begin() + (t + 1) * c.n_in);
    one.y.assign(c.y.begin() + t * c.n_out, c.y.begin() + (t + 1) * c.n_out);
    one.shrunk.assign(c.shrunk.begin() + t * c.rank, c.shrunk.begin() + (t + 1) * c.rank);
    const lora_result single = run_lora(*be, one);
    CAPTURE(t);
    CHECK(std::equal(single.y.begin(), single.y.end(), batched.y.begin() + t * c.n_out));
    CHECK(std::equal(single.shrunk.begin(), single.shrunk.end(), batched.shrunk.begin() + t * c.rank));
  }
}
