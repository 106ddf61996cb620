#!/usr/bin/env bash
# Compiles the CPU kernels for the instruction sets other than this machine's: plain x86-64 (no -march: what
# scripts/gpu_bundle.sh builds, since a GPU machine's CPU may lack AVX-512) and AVX2+FMA (-march=haswell). The
# ordinary build uses -march=native, so a kernel whose scalar or AVX2 path no longer compiles would otherwise go
# unnoticed until a GPU bundle is built (it did once: a static_assert in attention.cpp's transpose, 2026-11-30).
# The benches' bandwidth probe (bench/memory_bandwidth.hpp) has its own vector paths and is checked the same way: its
# AVX2 build once failed under -Werror where only AVX-512 had been compiled (2026-12-02, a Zen 3 VM).
# scripts/test.sh runs it; the build directories are build-portable/ and build-avx2/ (ccache makes a rerun cheap).
#
#   bash scripts/check_portable.sh
set -euo pipefail
cd "$(dirname "$0")/.."
export CCACHE_BASEDIR=${CCACHE_BASEDIR:-$(cd .. && pwd)} CCACHE_NOHASHDIR=${CCACHE_NOHASHDIR:-1}
for variant in "build-portable|" "build-avx2|-march=haswell"; do
  IFS='|' read -r dir flags <<<"$variant"
  echo "== the CPU kernels compile for ${flags:-plain x86-64} ($dir)"
  cmake -S . -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=Release -DACTORLLM_NATIVE=OFF -DACTORLLM_CUDA=OFF \
    -DACTORLLM_BUILD_BENCH=OFF -DACTORLLM_BUILD_TESTS=OFF -DACTORLLM_WERROR=ON "-DCMAKE_CXX_FLAGS=$flags" >/dev/null
  cmake --build "$dir" -j "$(nproc)" --target actorllm_kernels_cpu >"$dir/check_portable.log" 2>&1 || {
    grep -E -B2 -A12 'error|FAILED' "$dir/check_portable.log" | head -60
    echo "check_portable: the CPU kernels do not compile for ${flags:-plain x86-64} (log: $dir/check_portable.log)" >&2
    exit 1
  }
  echo "#include \"bench/memory_bandwidth.hpp\"" >"$dir/probe_check.cpp"
  c++ -std=c++20 -fsyntax-only -Wall -Wextra -Wpedantic -Wshadow -Werror $flags -I. -Iinclude "$dir/probe_check.cpp" || {
    echo "check_portable: bench/memory_bandwidth.hpp does not compile for ${flags:-plain x86-64}" >&2
    exit 1
  }
done
echo "check_portable: the CPU kernels and the bandwidth probe compile for plain x86-64 and for AVX2+FMA"
