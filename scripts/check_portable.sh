#!/usr/bin/env bash
# Compiles the CPU kernels for the instruction sets other than this machine's: plain x86-64 (no -march: what
# scripts/gpu_bundle.sh builds, since a GPU machine's CPU may lack AVX-512) and AVX2+FMA (-march=haswell). The
# ordinary build uses -march=native, so a kernel whose scalar or AVX2 path no longer compiles would otherwise go
# unnoticed until a GPU bundle is built (it did once: a static_assert in attention.cpp's transpose, 2026-11-30).
# The benches' bandwidth probe (bench/memory_bandwidth.hpp) has its own vector paths and is checked the same way: its
# AVX2 build once failed under -Werror where only AVX-512 had been compiled (2026-12-02, a Zen 3 VM).
# On a CPU with AVX2 and FMA the AVX2 build's kernel tests run too (test_kernels): on a machine with AVX-512 the
# ordinary build never runs the AVX2 kernels, which differ in more than width since bf16 weights packed at load are
# read by the AVX2 FMA kernels (2026-12-03).
# scripts/test.sh runs it; the build directories are build-portable/ and build-avx2/ (ccache makes a rerun cheap).
#
#   bash scripts/check_portable.sh
set -euo pipefail
cd "$(dirname "$0")/.."
export CCACHE_BASEDIR=${CCACHE_BASEDIR:-$(cd .. && pwd)} CCACHE_NOHASHDIR=${CCACHE_NOHASHDIR:-1}
run_avx2_tests=OFF
if grep -qw avx2 /proc/cpuinfo && grep -qw fma /proc/cpuinfo; then
  run_avx2_tests=ON
fi
for variant in "build-portable||OFF" "build-avx2|-march=haswell|$run_avx2_tests"; do
  IFS='|' read -r dir flags tests <<<"$variant"
  echo "== the CPU kernels compile for ${flags:-plain x86-64} ($dir)"
  cmake -S . -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=Release -DACTORLLM_NATIVE=OFF -DACTORLLM_CUDA=OFF \
    -DACTORLLM_BUILD_BENCH=OFF "-DACTORLLM_BUILD_TESTS=$tests" -DACTORLLM_WERROR=ON "-DCMAKE_CXX_FLAGS=$flags" >/dev/null
  targets=(actorllm_kernels_cpu)
  [[ $tests == ON ]] && targets+=(test_kernels)
  cmake --build "$dir" -j "$(nproc)" --target "${targets[@]}" >"$dir/check_portable.log" 2>&1 || {
    grep -E -B2 -A12 'error|FAILED' "$dir/check_portable.log" | head -60
    echo "check_portable: the CPU kernels do not compile for ${flags:-plain x86-64} (log: $dir/check_portable.log)" >&2
    exit 1
  }
  echo "#include \"bench/memory_bandwidth.hpp\"" >"$dir/probe_check.cpp"
  c++ -std=c++20 -fsyntax-only -Wall -Wextra -Wpedantic -Wshadow -Werror $flags -I. -Iinclude "$dir/probe_check.cpp" || {
    echo "check_portable: bench/memory_bandwidth.hpp does not compile for ${flags:-plain x86-64}" >&2
    exit 1
  }
  if [[ $tests == ON ]]; then
    echo "== the kernel tests of the ${flags} build ($dir/tests/test_kernels)"
    "$dir/tests/test_kernels" --minimal || {
      echo "check_portable: the kernel tests fail in the ${flags} build" >&2
      exit 1
    }
  fi
done
echo "check_portable: the CPU kernels and the bandwidth probe compile for plain x86-64 and for AVX2+FMA" \
  "$([[ $run_avx2_tests == ON ]] && echo "(and the AVX2 build's kernel tests pass)")"
