// The `--device` choice and the GPU a shard gets, in any build (with or without the CUDA backend).
#include "kernels/device.hpp"

#include <doctest/doctest.h>

#include <string>
#include <vector>

using namespace actorllm;

TEST_CASE("device choice: cpu always, auto follows the visible GPUs, cuda needs the backend in the build") {
  CHECK(resolve_device("cpu").error.empty());
  CHECK(resolve_device("cpu").kind == device_kind::cpu);
  const bool has_cuda = compiled_backends().size() > 1;
  const device_choice a = resolve_device("auto");
  CHECK(a.error.empty());
  CHECK(a.kind == (has_cuda && visible_gpu_count() > 0 ? device_kind::cuda : device_kind::cpu));
  const device_choice c = resolve_device("cuda");
  if (has_cuda) {
    CHECK(c.error.empty());
    CHECK(c.kind == device_kind::cuda);
    CHECK(compiled_backends() == std::vector<std::string>{"cpu", "cuda"});
  } else {
    CHECK(c.error.find("--device cuda") != std::string::npos);
  }
  const device_choice bad = resolve_device("tpu");
  CHECK(bad.error.find("'tpu'") != std::string::npos);
  CHECK(bad.error.find("cpu") != std::string::npos);
  if (visible_gpu_count() == 0)
    CHECK(!gpu_unavailable_reason().empty());
}

TEST_CASE("device choice: shards take the visible GPUs round robin by global rank") {
  CHECK(device_for_rank(device_kind::cpu, 5, 8) == device{});
  // tp 2 x pp 2 on 4 GPUs: one GPU each; on 1 GPU: all share cuda:0; on 2: ranks 0, 2 on cuda:0.
  for (int rank = 0; rank < 4; ++rank) {
    CHECK(device_for_rank(device_kind::cuda, rank, 4) == device{device_kind::cuda, rank});
    CHECK(device_for_rank(device_kind::cuda, rank, 1) == device{device_kind::cuda, 0});
    CHECK(device_for_rank(device_kind::cuda, rank, 2) == device{device_kind::cuda, rank % 2});
  }
  CHECK(device_for_rank(device_kind::cuda, 3, 0) == device{device_kind::cuda, 0});  // no count known: the first
  CHECK(device_for_rank(device_kind::cuda, 1, 8).to_string() == "cuda:1");
}
