#!/usr/bin/env bash
# The README's test command: installs what is missing, builds (CUDA sources too where nvcc exists), runs every
# test, then the focused sanitizer run (ASan+UBSan over the parsers, loaders and kernels; the kernels again in an AVX2
# build where the CPU has AVX-512), the CPU kernels compiled for plain x86-64 and AVX2 (scripts/check_portable.sh), the
# layering check (scripts/check_layers.sh) and the format check.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
# ccache across clones in other directories (scripts/build.sh says why); the sanitizer build below uses it too.
export CCACHE_BASEDIR=${CCACHE_BASEDIR:-$(cd .. && pwd)} CCACHE_NOHASHDIR=${CCACHE_NOHASHDIR:-1}
# The tests' engines (and the scripts' servers) pack weights without writing a cache into $HOME (doctest_main sets it
# too, for ctest run by hand); the cache's own tests use temporary directories.
export ACTORLLM_PACKED_WEIGHT_CACHE=${ACTORLLM_PACKED_WEIGHT_CACHE:-off}
ACTORLLM_WERROR_FLAG=-DACTORLLM_WERROR=ON
bash scripts/build.sh "$ACTORLLM_WERROR_FLAG"
(cd build && ctest --output-on-failure -j "$(nproc)" --timeout 600)

if [[ "${ACTORLLM_SKIP_SANITIZE:-0}" != 1 ]]; then
  echo "== sanitizer run (ASan+UBSan): loaders, parsers, kernels"
  bash scripts/configure_sanitizer_build.sh build-asan >/dev/null
  # Only the suites that hold [asan] cases: loaders, parsers, kernels, collectives, the scheduler stress test, the
  # control gate, the fuzzers of the HTTP and control ports, and the Hub client's parsers and downloads.
  cmake --build build-asan -j "$(nproc)" --target actorllm test_util test_kernels test_comm test_model test_text test_engine test_net \
    test_actors test_e2e_cluster test_hub
  (cd build-asan && ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
    ctest --output-on-failure -j "$(nproc)" --timeout 900 -R '\[asan\]')
  # Where this machine has AVX-512, its builds never run the AVX2 kernels but in check_portable's plain build: the
  # kernels' [asan] cases again in an AVX2 build (-march=haswell) under the same sanitizers. The bf16 weights packed at
  # load are read there by other kernels, the decode's among them as takeover work (a grain computed twice, on two
  # threads, and after its call returned).
  if grep -qw avx512f /proc/cpuinfo && grep -qw avx2 /proc/cpuinfo && grep -qw fma /proc/cpuinfo; then
    echo "== sanitizer run (ASan+UBSan): the AVX2 kernels (-march=haswell)"
    bash scripts/configure_sanitizer_build.sh build-asan-avx2 -DACTORLLM_NATIVE=OFF "-DCMAKE_CXX_FLAGS=-march=haswell" \
      >/dev/null
    cmake --build build-asan-avx2 -j "$(nproc)" --target test_kernels
    (cd build-asan-avx2 && ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
      ctest --output-on-failure -j "$(nproc)" --timeout 900 -R '^kernels:.*\[asan\]')
  fi
fi

bash scripts/check_portable.sh
bash scripts/check_layers.sh
bash scripts/format.sh --check
