// The choice between NCCL and the host-staged collective for a GPU group: NCCL only with a GPU per rank and NCCL in
// every rank's build; ACTORLLM_NCCL=0 turns it off, =1 makes its absence an error that says why.
#include "comm/transport_choice.hpp"

#include <doctest/doctest.h>

#include <string>
#include <vector>

using namespace actorllm::comm;

namespace {
std::vector<rank_device> gpus(std::vector<std::string> ids, bool nccl = true) {
  std::vector<rank_device> out;
  for (auto& id : ids)
    out.push_back(rank_device{std::move(id), nccl});
  return out;
}
bool has(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }
}  // namespace

TEST_CASE("transport: distinct GPUs with NCCL everywhere take NCCL") {
  const auto c =
      choose_device_transport(gpus({"a/0000:01:00.0", "a/0000:02:00.0", "b/0000:01:00.0"}), nccl_mode::automatic);
  CHECK(c.transport == device_transport::nccl);
  CHECK(c.error.empty());
  CHECK(has(c.reason, "3 distinct GPUs"));
}

TEST_CASE("transport: ranks sharing a GPU take the host-staged collective, naming the ranks") {
  const auto ranks = gpus({"a/0000:01:00.0", "a/0000:02:00.0", "a/0000:01:00.0"});
  auto c = choose_device_transport(ranks, nccl_mode::automatic);
  CHECK(c.transport == device_transport::host_staged);
  CHECK(c.error.empty());
  CHECK(has(c.reason, "ranks 0 and 2 share the GPU a/0000:01:00.0"));
  c = choose_device_transport(ranks, nccl_mode::required);
  CHECK(c.transport == device_transport::host_staged);
  CHECK(has(c.error, "NCCL was required (ACTORLLM_NCCL=1)"));
  CHECK(has(c.error, "share the GPU"));
}

TEST_CASE("transport: the same bus id on two hosts is two GPUs") {
  CHECK(choose_device_transport(gpus({"a/0000:01:00.0", "b/0000:01:00.0"}), nccl_mode::automatic).transport ==
        device_transport::nccl);
}

TEST_CASE("transport: a rank without NCCL or without a GPU keeps the group host-staged") {
  auto ranks = gpus({"a/1", "a/2"});
  ranks[1].nccl = false;
  auto c = choose_device_transport(ranks, nccl_mode::automatic);
  CHECK(c.transport == device_transport::host_staged);
  CHECK(has(c.reason, "rank 1's build has no NCCL"));
  c = choose_device_transport(gpus({"a/1", ""}), nccl_mode::required);
  CHECK(c.transport == device_transport::host_staged);
  CHECK(has(c.error, "rank 1 is not on a GPU"));
}

TEST_CASE("transport: ACTORLLM_NCCL=0 turns NCCL off, one rank has nothing to communicate") {
  auto c = choose_device_transport(gpus({"a/1", "a/2"}), nccl_mode::off);
  CHECK(c.transport == device_transport::host_staged);
  CHECK(c.error.empty());
  CHECK(has(c.reason, "ACTORLLM_NCCL=0"));
  c = choose_device_transport(gpus({"a/1"}), nccl_mode::automatic);
  CHECK(c.transport == device_transport::host_staged);
}

TEST_CASE("transport: ACTORLLM_NCCL values") {
  CHECK(parse_nccl_mode(nullptr) == nccl_mode::automatic);
  CHECK(parse_nccl_mode("") == nccl_mode::automatic);
  CHECK(parse_nccl_mode("auto") == nccl_mode::automatic);
  CHECK(parse_nccl_mode("1") == nccl_mode::required);
  CHECK(parse_nccl_mode("0") == nccl_mode::off);
  CHECK_FALSE(parse_nccl_mode("yes").has_value());
}
