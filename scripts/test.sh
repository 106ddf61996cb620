#!/usr/bin/env bash
# The README's test command: installs what is missing, builds (CUDA sources too where nvcc exists), runs every
# test, then the focused sanitizer run (ASan+UBSan over the parsers, loaders and kernels) and the format check.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
ACTORLLM_WERROR_FLAG=-DACTORLLM_WERROR=ON
bash scripts/build.sh "$ACTORLLM_WERROR_FLAG"
(cd build && ctest --output-on-failure -j "$(nproc)" --timeout 600)

if [[ "${ACTORLLM_SKIP_SANITIZE:-0}" != 1 ]]; then
  echo "== sanitizer run (ASan+UBSan): loaders, parsers, kernels"
  ACTORLLM_BUILD_DIR=build-asan ACTORLLM_BUILD_TYPE=RelWithDebInfo bash scripts/build.sh \
    -DACTORLLM_SANITIZE=ON -DACTORLLM_CUDA=OFF -DACTORLLM_BUILD_BENCH=OFF -DACTORLLM_WERROR=ON
  (cd build-asan && ASAN_OPTIONS=detect_leaks=1 ctest --output-on-failure -j "$(nproc)" --timeout 900 -L sanitize)
fi

bash scripts/format.sh --check
