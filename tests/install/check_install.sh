#!/usr/bin/env bash
# Installs the build into a temporary prefix, builds examples/host_app against it with find_package(actorllm),
# and runs it on stories260K. Usage: check_install.sh BUILD_DIR SOURCE_DIR MODEL_DIR
set -euo pipefail
build_dir=$1 source_dir=$2 model_dir=$3
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cmake --install "$build_dir" --prefix "$work/prefix" >/dev/null
test -f "$work/prefix/lib/cmake/actorllm/actorllmConfig.cmake"
test -f "$work/prefix/include/actorllm/llm.hpp"
launcher=()
command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
cmake -S "$source_dir/examples/host_app" -B "$work/build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_PREFIX_PATH="$work/prefix" "${launcher[@]}" >/dev/null
cmake --build "$work/build" >/dev/null
"$work/build/host_app" "$model_dir" "Once upon a time"
