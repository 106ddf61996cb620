// What the actorllm binary costs before it does anything: the libraries it needs at start.
#include "support/test_paths.hpp"

#include <doctest/doctest.h>

#include <string>

using namespace actorllm;

TEST_CASE("the actorllm binary does not need cuBLAS at start (opened by the first CUDA backend instead)") {
  // Linked, libcublas and libcublasLt ran their initialisers at every start: 0.35 s of 0.42 s for `--version` on a
  // 2-vCPU VM, a CPU-only run included.
  const auto r = test::run_command("readelf -d " + test::actorllm_binary().string());
  REQUIRE(r.status == 0);
  CHECK(r.out.find("(NEEDED)") != std::string::npos);  // readelf listed the binary's libraries
  CHECK(r.out.find("libcublas") == std::string::npos);
  if (r.out.find("libcudart") == std::string::npos)
    MESSAGE("a build without CUDA: nothing of CUDA is needed at all");
  const auto version = test::run_command(test::actorllm_binary().string() + " --version");
  CHECK(version.status == 0);
}
