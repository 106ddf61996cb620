#!/usr/bin/env bash
# Configures the focused sanitizer build that scripts/test.sh runs (ASan+UBSan, no CUDA, no benchmarks) into DIR
# (default build-asan). One place for its options: scripts/test.sh builds it, and a ctest case
# (tests/scripts/sanitizer_configure_test.sh) configures it in a temporary directory, so an option that breaks this
# configuration (a test that names a benchmark target, say) fails the ordinary test run, not only CI's last step.
#   configure_sanitizer_build.sh [DIR [CMAKE_ARGS...]]   (more cmake arguments: the AVX2 variant's -march=haswell)
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${1:-build-asan}
shift $(($# > 0 ? 1 : 0))
# -O1 -g1: ASan's reports keep their file:line stacks (line tables) at 60% of -O2 -g1's compile time (13.8 against
# 22.8 min cold on a 2-vCPU VM); a sanitizer build compiles only the test files that hold [asan] cases
# (tests/CMakeLists.txt).
cmake -S . -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O1 -g1 -DNDEBUG" \
  -DACTORLLM_SANITIZE=ON -DACTORLLM_CUDA=OFF -DACTORLLM_BUILD_BENCH=OFF -DACTORLLM_WERROR=ON "$@"
