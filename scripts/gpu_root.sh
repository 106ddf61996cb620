#!/usr/bin/env bash
# Lays out what scripts/gpu_check.sh runs from: bin/ (actorllm, the GPU test binaries, gpu_probe, bench_gpu),
# models/stories260K with its golden ids and tokenizers/llama3 (from ../shared, which does not travel to a GPU
# machine), configs/llama-3.1-8b, the check's Python helpers and COMMIT. scripts/gpu_bundle.sh packs it (with the
# shared libraries) for a GPU machine; here, ACTORLLM_GPU_ROOT=DEST bash scripts/gpu_check.sh runs the check from it
# up to where a GPU is needed (tests/scripts runs it so in CI).
#
#   bash scripts/gpu_root.sh BUILD_DIR DEST [--link]   # --link: symlink the binaries instead of copying them
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:?usage: gpu_root.sh BUILD_DIR DEST [--link]}
dest=${2:?usage: gpu_root.sh BUILD_DIR DEST [--link]}
link=${3:-}
shared=${ACTORLLM_SHARED_DIR:-$(pwd)/../shared}

bins=("$build/actorllm" "$build/tests/test_cuda" "$build/tests/test_kernels" "$build/tests/gpu_probe"
  "$build/bench/bench_gpu")
for b in "${bins[@]}"; do
  [[ -x "$b" ]] || {
    echo "gpu_root: $b is missing (build actorllm test_cuda test_kernels gpu_probe bench_gpu first)" >&2
    exit 1
  }
done
[[ -f "$shared/models/stories260K/config.json" && -f "$shared/models/tokenizers/llama3/tokenizer.json" ]] || {
  echo "gpu_root: $shared/models lacks stories260K or tokenizers/llama3 (set ACTORLLM_SHARED_DIR)" >&2
  exit 1
}

mkdir -p "$dest/bin" "$dest/models" "$dest/configs" "$dest/tokenizers/llama3"
for b in "${bins[@]}"; do
  if [[ "$link" == --link ]]; then
    ln -sf "$(realpath "$b")" "$dest/bin/$(basename "$b")"
  else
    cp "$b" "$dest/bin/"
  fi
done
cp -r "$shared/models/stories260K" "$dest/models/"
cp "$shared/models/tokenizers/llama3/tokenizer.json" "$shared/models/tokenizers/llama3/tokenizer_config.json" \
  "$dest/tokenizers/llama3/"
cp -r bench/configs/llama-3.1-8b "$dest/configs/"
cp scripts/gpu_check_hf.py scripts/gpu_profile_table.py "$dest/"
git rev-parse HEAD >"$dest/COMMIT" 2>/dev/null || echo unknown >"$dest/COMMIT"
date -u +%FT%TZ >"$dest/BUILT"
