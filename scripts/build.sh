#!/usr/bin/env bash
# Configures and builds actorllm into build/ (or $ACTORLLM_BUILD_DIR). Extra arguments go to CMake's configure.
set -euo pipefail
cd "$(dirname "$0")/.."
# ccache: paths below the checkout's parent are hashed relative to it, so a fresh clone elsewhere (CI) hits the cache
# of an earlier one (a setting of the caller's wins).
export CCACHE_BASEDIR=${CCACHE_BASEDIR:-$(cd .. && pwd)} CCACHE_NOHASHDIR=${CCACHE_NOHASHDIR:-1}
build_dir=${ACTORLLM_BUILD_DIR:-build}
jobs=${ACTORLLM_JOBS:-$(nproc)}
if [[ ! -f "$build_dir/build.ninja" ]] || (($#)); then
  cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE="${ACTORLLM_BUILD_TYPE:-Release}" "$@"
fi
cmake --build "$build_dir" -j "$jobs"
