// cuda_backend::lora_add (kernels/cuda/lora.cu) on the GPU against the CPU backend and the float64 reference of
// tests/kernels/lora_reference.hpp: ranks 1 to 17, odd widths, mixed slots with rows that have none, 16-byte aligned
// tensors and tensors one float off (the scalar-load kernels), guards after every output; the same call replayed
// from a captured CUDA graph after its inputs change; and the device-side slot guard. Skipped ("skipped: no GPU")
// where there is none; the kernels' math runs on the CPU in lora_math_test.cpp.
#include "kernels/backend.hpp"
#include "kernels/cuda/cuda_backend.hpp"

#include "../lora_reference.hpp"
#include "gpu_test_util.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace {

using namespace actorllm;
using actorllm::cuda_test::gpu_available;
using actorllm::cuda_test::require_gpu;

constexpr float guard_value = 4242.0f;
constexpr int64_t guard_floats = 37;

// A tensor of `shape` inside a larger allocation: `lead` elements before it (1 puts an f32 tensor off 16-byte
// alignment) and guard_floats guard values after it.
struct placed {
  placed(backend& be, dtype type, tensor_shape shape, const void* data, int64_t lead) : lead_(lead) {
    whole = be.alloc(type, {lead + shape.numel() + guard_floats});
    std::vector<float> init(static_cast<size_t>(whole.numel()), guard_value);  // i32 guards: any fixed bits do
    be.upload(whole, init.data(), whole.nbytes());
    view = whole;
    view.shape = shape;
    view.offset = whole.offset + static_cast<size_t>(lead) * dtype_size(type);
    be.upload(view, data, view.nbytes());
  }
  // The view's values as floats; the guards after it must be intact.
  std::vector<float> read(backend& be) const {
    std::vector<float> all(static_cast<size_t>(whole.numel()));
    be.download(whole, all.data(), whole.nbytes());
    const auto begin = static_cast<size_t>(lead_), end = begin + static_cast<size_t>(view.numel());
    CHECK_MESSAGE(std::all_of(all.begin() + static_cast<std::ptrdiff_t>(end), all.end(),
                              [](float f) { return f == guard_value; }),
                  "a write past the output's end");
    return {all.begin() + static_cast<std::ptrdiff_t>(begin), all.begin() + static_cast<std::ptrdiff_t>(end)};
  }
  tensor whole, view;
  int64_t lead_ = 0;
};

// c's tensors on a backend.
struct lora_tensors {
  lora_tensors(backend& be, const test::lora_case& c, int64_t lead)
      : x(be, dtype::f32, {c.n, c.n_in}, c.x.data(), lead),
        a(be, dtype::f32, {c.n_slots, c.rank, c.n_in}, c.a.data(), lead),
        b(be, dtype::f32, {c.n_slots, c.n_out, c.rank}, c.b.data(), lead),
        slots(be, dtype::i32, {c.n}, c.slots.data(), lead),
        shrunk(be, dtype::f32, {c.n, c.rank}, c.shrunk.data(), lead),
        y(be, dtype::f32, {c.n, c.n_out}, c.y.data(), lead) {}
  void run(backend& be) const { be.lora_add(x.view, a.view, b.view, slots.view, shrunk.view, y.view); }
  placed x, a, b, slots, shrunk, y;
};

struct lora_shape {
  int64_t n, n_in, n_out, n_slots, rank;
};

}  // namespace

TEST_CASE("cuda lora_add equals the cpu backend and float64: ranks 1 to 17, mixed slots, aligned or not" *
          doctest::skip(!gpu_available())) {
  require_gpu();
  cuda::cuda_backend gpu{0};
  std::unique_ptr<backend> cpu = make_backend(device_kind::cpu, 2);
  const lora_shape shapes[] = {{1, 33, 45, 1, 1},     {1, 2048, 5632, 4, 16}, {3, 132, 7, 2, 8},  {40, 100, 77, 3, 8},
                               {40, 256, 130, 4, 16}, {40, 19, 301, 2, 17},   {40, 64, 48, 5, 1}, {7, 129, 63, 3, 17},
                               {300, 512, 96, 4, 16}, {2, 4096, 70000, 2, 16}};  // an output as wide as a vocabulary
  uint64_t seed = 9100;
  for (const lora_shape& s : shapes) {
    const test::lora_case c = test::random_lora_case(s.n, s.n_in, s.n_out, s.n_slots, s.rank, seed += 10);
    const test::lora_expected e = test::lora_reference(c);
    const lora_tensors on_cpu(*cpu, c, 0);
    on_cpu.run(*cpu);
    const std::vector<float> cpu_y = on_cpu.y.read(*cpu);
    for (int64_t lead : {0, 1}) {  // 16-byte loads where the widths allow, then scalar loads everywhere
      const std::string what = lead == 0 ? "aligned" : "one float off alignment";
      const lora_tensors on_gpu(gpu, c, lead);
      on_gpu.run(gpu);
      const std::vector<float> y = on_gpu.y.read(gpu), shrunk = on_gpu.shrunk.read(gpu);
      test::check_lora(c, e, shrunk, y, what);
      // Against the CPU backend: each within its tolerance of float64, so within twice it of each other.
      std::vector<double> cpu_ref(cpu_y.begin(), cpu_y.end()), twice(e.y_tol.size());
      std::transform(e.y_tol.begin(), e.y_tol.end(), twice.begin(), [](double t) { return 2 * t; });
      test::check_close(y.data(), cpu_ref.data(), y.size(), twice.data(), 0.0, 0.0, what + ": y against the cpu");
    }
  }
}

TEST_CASE("cuda lora_add inside a captured graph equals the eager run after x and the slots change" *
          doctest::skip(!gpu_available())) {
  require_gpu();
  cuda::cuda_backend be{0};
  test::lora_case c = test::random_lora_case(8, 2048, 5632, 4, 16, 9200);
  const lora_tensors t(be, c, 0);
  auto graph = be.capture_graph([&] { t.run(be); });
  // New inputs through the same addresses: other x values, other slots, y back to its start.
  const test::lora_case next = test::random_lora_case(8, 2048, 5632, 4, 16, 9300);
  c.x = next.x;
  c.slots = next.slots;
  be.upload(t.x.view, c.x.data(), t.x.view.nbytes());
  be.upload(t.slots.view, c.slots.data(), t.slots.view.nbytes());
  be.upload(t.y.view, c.y.data(), t.y.view.nbytes());
  be.upload(t.shrunk.view, c.shrunk.data(), t.shrunk.view.nbytes());
  graph->replay();
  const std::vector<float> replayed_y = t.y.read(be), replayed_shrunk = t.shrunk.read(be);
  test::check_lora(c, test::lora_reference(c), replayed_shrunk, replayed_y, "from the graph");
  be.upload(t.y.view, c.y.data(), t.y.view.nbytes());
  be.upload(t.shrunk.view, c.shrunk.data(), t.shrunk.view.nbytes());
  t.run(be);
  CHECK_MESSAGE(t.y.read(be) == replayed_y, "the graph and the eager run differ (the kernels' order is fixed)");
  CHECK(t.shrunk.read(be) == replayed_shrunk);
}

TEST_CASE("cuda lora_add skips a row whose slot is past the stack's end, as one with a negative slot" *
          doctest::skip(!gpu_available())) {
  require_gpu();
  cuda::cuda_backend be{0};
  test::lora_case c = test::random_lora_case(5, 256, 130, 3, 16, 9400);
  c.slots = {2, 3, -1, 1000000, 0};  // rows 1 and 3 name slots the stack has not
  test::lora_case only_valid = c;
  only_valid.slots = {2, -1, -1, -1, 0};
  const lora_tensors t(be, c, 0);
  t.run(be);
  test::check_lora(only_valid, test::lora_reference(only_valid), t.shrunk.read(be), t.y.read(be), "slots past the end");
}
