// When `actorllm check` measures the custom all-reduce: GPUs of their own on one host, at most 8 ranks; otherwise
// the line it prints says why. The measurement itself needs GPUs (unverified here).
#include "comm/check/custom_all_reduce_check.hpp"

#include <doctest/doctest.h>

#include <string>
#include <vector>

using actorllm::comm::custom_all_reduce_check_refusal;
using actorllm::comm::rank_device;

namespace {
bool has(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }
}  // namespace

TEST_CASE("custom all-reduce check: GPUs of their own on one host qualify") {
  CHECK(custom_all_reduce_check_refusal({{"h/0000:01:00.0", true}, {"h/0000:02:00.0", false}}).empty());
}

TEST_CASE("custom all-reduce check: refusals name the reason") {
  CHECK(has(custom_all_reduce_check_refusal({{"h/0000:01:00.0", true}, {"", true}}), "rank 1 is not on a GPU"));
  CHECK(has(custom_all_reduce_check_refusal({{"h/0000:01:00.0", true}, {"h/0000:01:00.0", true}}),
            "rank 1 shares the GPU h/0000:01:00.0"));
  CHECK(has(custom_all_reduce_check_refusal({{"a/0000:01:00.0", true}, {"b/0000:01:00.0", true}}),
            "the ranks are on 2 hosts"));
  std::vector<rank_device> nine;
  for (int i = 0; i < 9; ++i)
    nine.push_back({"h/gpu" + std::to_string(i), true});
  CHECK(has(custom_all_reduce_check_refusal(nine), "9 ranks; the custom all-reduce serves at most 8"));
}
