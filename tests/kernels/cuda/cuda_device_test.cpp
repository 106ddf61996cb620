// The CUDA device query and the backend's start-up, on any machine: without a GPU they must fail cleanly (a message
// naming the device and the driver's reason), never crash. With a GPU: the backend's memory accounting and the
// caching allocator's reuse.
#include "kernels/backend.hpp"
#include "kernels/cuda/cuda_backend.hpp"
#include "kernels/cuda/device.hpp"

#include "gpu_test_util.hpp"

#include <doctest/doctest.h>

#include <stdexcept>
#include <string>

using actorllm::cuda_test::gpu_available;
using actorllm::cuda_test::require_gpu;

TEST_CASE("cuda device query never fails without a GPU") {
  const int n = actorllm::cuda::device_count();
  CHECK(n >= 0);
  CHECK(actorllm::cuda::devices().size() == static_cast<size_t>(n));
  if (n == 0)
    CHECK(!actorllm::cuda::unavailable_reason().empty());
}

TEST_CASE("cuda backend on a missing device is refused with the device and the reason") {
  const int n = actorllm::cuda::device_count();
  try {
    actorllm::cuda::cuda_backend be{n};  // one past the last visible device (cuda:0 on a machine without GPUs)
    FAIL("a backend on a device that is not there was created");
  } catch (const std::runtime_error& e) {
    const std::string what = e.what();
    CAPTURE(what);
    CHECK(what.find("cuda:" + std::to_string(n)) != std::string::npos);
  }
  CHECK_THROWS_AS(actorllm::make_backend(actorllm::device{actorllm::device_kind::cuda, n}, 1), std::runtime_error);
}

TEST_CASE("cuda backend memory: the pool reuses freed blocks and tracks the peak" * doctest::skip(!gpu_available())) {
  require_gpu();
  actorllm::cuda::cuda_backend be{0};
  const actorllm::device_memory before = be.memory_info();
  CHECK(before.total > 0);
  CHECK(before.free <= before.total);
  be.reset_peak_memory();
  void* first = nullptr;
  {
    actorllm::tensor t = be.alloc(actorllm::dtype::f32, {1000, 1000});
    first = t.data();
    CHECK(be.memory_info().in_use >= 4000000);
  }
  const actorllm::device_memory after_free = be.memory_info();
  CHECK(after_free.in_use == before.in_use);
  CHECK(after_free.peak_in_use >= before.in_use + 4000000);
  actorllm::tensor again = be.alloc(actorllm::dtype::f32, {1000, 1000});
  CHECK(again.data() == first);  // the same size class comes back from the cache, not from cudaMalloc
  CHECK(be.describe().find("cuda:0") == 0);
}
