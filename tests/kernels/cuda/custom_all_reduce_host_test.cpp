// The custom all-reduce's host side without a GPU: what goes to the fallback (host tensors, host primitives, the
// messages the rule refuses), the per-message choice for the group's topology, and the arguments refused before any
// CUDA call. The kernels themselves run in custom_all_reduce_gpu_test.cpp.
#include "comm/cuda/custom_all_reduce.hpp"

#include "kernels/tensor.hpp"

#include <doctest/doctest.h>

#include <memory>
#include <stdexcept>
#include <vector>

using namespace actorllm;
using namespace actorllm::cuda;

namespace {

// Host memory posing as every rank's mapped buffers; nothing is ever opened or closed.
struct no_ipc final : ipc_backend {
  ipc_handle export_handle(void*) override { return {}; }
  void* open_handle(const ipc_handle&) override { return nullptr; }
  void close_handle(void*) override { closes++; }
  int device_id() const override { return 0; }
  int device_index() const override { return 0; }
  int closes = 0;
};

// Counts what reaches it.
struct recording_collective final : tp_collective {
  explicit recording_collective(int r, int n) : rank_(r), size_(n) {}
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  void all_reduce_sum(const tensor&) override { ++tensor_reduces; }
  void all_reduce_sum(float*, int64_t) override { ++host_reduces; }
  void all_gather(const float*, int64_t, float*) override { ++host_gathers; }
  int rank_, size_;
  int tensor_reduces = 0, host_reduces = 0, host_gathers = 0;
};

struct fixture {
  no_ipc ipc;
  std::vector<std::vector<char>> data, signal;
  recording_collective* fallback = nullptr;
  std::unique_ptr<custom_all_reduce> car;

  explicit fixture(int world, all_reduce_limits limits = {}, size_t staging = 1 << 20) {
    auto buffers = std::make_unique<ipc_peer_buffers>(ipc, 0, world, staging, sizeof(car::signal_layout));
    for (int r = 0; r < world; ++r) {
      data.emplace_back(64);
      signal.emplace_back(sizeof(car::signal_layout));
    }
    buffers->set_own({data[0].data(), signal[0].data(), 0});
    for (int r = 1; r < world; ++r)
      buffers->set_opened_peer(r, {data[static_cast<size_t>(r)].data(), signal[static_cast<size_t>(r)].data(), 0});
    const auto topology = ipc_group_topology(*buffers, false);
    auto fb = std::make_unique<recording_collective>(0, world);
    fallback = fb.get();
    car = std::make_unique<custom_all_reduce>(std::move(buffers), std::move(fb), topology, nullptr, limits);
  }
};

}  // namespace

TEST_CASE("custom all-reduce host side: host tensors and host primitives go to the fallback") {
  fixture f(2);
  const tensor t = make_host_tensor(dtype::f32, tensor_shape{8});
  f.car->all_reduce_sum(t);
  CHECK(f.fallback->tensor_reduces == 1);
  CHECK(f.car->last_path() == all_reduce_path::host_staged);
  std::vector<float> v(8), out(16);
  f.car->all_reduce_sum(v.data(), 8);
  f.car->all_gather(v.data(), 8, out.data());
  CHECK(f.fallback->host_reduces == 1);
  CHECK(f.fallback->host_gathers == 1);
  CHECK(f.car->rank() == 0);
  CHECK(f.car->size() == 2);
}

TEST_CASE("custom all-reduce host side: ranks on one device take the custom path only when asked") {
  // All ranks report device 0: one GPU shared by processes.
  fixture plain(2);
  const auto* aligned = reinterpret_cast<const void*>(uintptr_t{0x7f0000001000});
  CHECK(plain.car->choose(dtype::f32, 4096, aligned) == all_reduce_path::host_staged);
  all_reduce_limits asked;
  asked.custom_on_shared_device = true;
  fixture f(2, asked);
  CHECK(f.car->choose(dtype::f32, 4096, aligned) == all_reduce_path::custom_one_shot);
  CHECK(f.car->choose(dtype::bf16, 4094, aligned) == all_reduce_path::custom_one_shot);
  CHECK(f.car->choose(dtype::f32, 2 << 20, aligned) == all_reduce_path::host_staged);  // above the staging buffer
  CHECK(f.car->choose(dtype::f32, 4096, static_cast<const char*>(aligned) + 4) == all_reduce_path::host_staged);
  // Four ranks on one device count as fully connected: two-shot above 512 KiB.
  fixture four(4, asked);
  CHECK(four.car->choose(dtype::f32, 600 << 10, aligned) == all_reduce_path::custom_two_shot);
}

TEST_CASE("custom all-reduce host side: bad calls are refused before any CUDA call") {
  fixture f(2, {}, 4096);
  CHECK_THROWS_AS(f.car->all_reduce_device(nullptr, 16, element_type::f32, all_reduce_path::nccl),
                  std::invalid_argument);
  CHECK_THROWS_WITH_AS(f.car->all_reduce_device(nullptr, 2048, element_type::f32, all_reduce_path::custom_one_shot),
                       doctest::Contains("exceed the 4096-byte staging buffer"), std::invalid_argument);
  f.car->all_reduce_device(nullptr, 0, element_type::f32, all_reduce_path::custom_one_shot);  // nothing to do
}

TEST_CASE("custom all-reduce host side: destroying it closes the peers' mappings") {
  auto f = std::make_unique<fixture>(4);
  no_ipc* ipc = &f->ipc;
  f->car.reset();
  CHECK(ipc->closes == 6);  // data and signal of ranks 1..3
}
