// Exit status 0 when this process sees a usable GPU; otherwise prints why and exits 77, which the "gpu:" ctest
// entries declare as their skip code (tests/run_gpu_cases.sh), so ctest reports them as Skipped, not passed.
#include "kernels/device.hpp"

#include <cstdio>

int main() {
  const int n = actorllm::visible_gpu_count();
  if (n > 0) {
    std::printf("%d GPU(s) visible\n", n);
    return 0;
  }
  std::printf("skipped: no GPU (%s)\n", actorllm::gpu_unavailable_reason().c_str());
  return 77;
}
