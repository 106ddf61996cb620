#!/usr/bin/env bash
# Builds, on a development machine, what scripts/gpu_check.sh runs on a GPU machine (x86-64, H100/H200, nvcc,
# PyTorch and transformers, but none of our Debian libraries and no network): `actorllm`, the GPU test binaries and
# bench_gpu, built for CUDA architecture 90 without -march=native (this host's AVX-512 code could SIGILL there), with
# their shared libraries except glibc and the CUDA libraries the GPU machine has itself (cuBLAS and NCCL come from
# its PyTorch wheels), and what scripts/gpu_root.sh lays out beside them (stories260K with its golden ids and the
# Llama 3 tokenizer from ../shared, the 8B-shape config, the check's Python helpers), packed as one tar.xz
# under .gpu-bundle/ (git-ignored; the device tool carries it with `carry: [".gpu-bundle"]`). Fails above 64 MiB.
#
#   bash scripts/gpu_bundle.sh            # -> .gpu-bundle/actorllm-gpu.tar.xz
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
out_dir=${ACTORLLM_GPU_BUNDLE_DIR:-$root/.gpu-bundle}
build=${ACTORLLM_GPU_BUILD_DIR:-$root/build-gpu}
shared=${ACTORLLM_SHARED_DIR:-$root/../shared}
limit=$((64 * 1024 * 1024))

command -v nvcc >/dev/null || [[ -x /usr/local/cuda/bin/nvcc ]] || {
  echo "gpu_bundle: no nvcc (the CUDA toolkit) on this machine" >&2
  exit 1
}
[[ -f "$shared/models/stories260K/config.json" ]] || {
  echo "gpu_bundle: $shared/models/stories260K is missing (set ACTORLLM_SHARED_DIR)" >&2
  exit 1
}

cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DACTORLLM_CUDA=ON -DACTORLLM_NATIVE=OFF \
  -DCMAKE_CUDA_ARCHITECTURES=90 -DACTORLLM_WERROR=ON >/dev/null
cmake --build "$build" -j "${ACTORLLM_JOBS:-$(nproc)}" --target actorllm test_cuda test_kernels gpu_probe bench_gpu

stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
b=$stage/actorllm-gpu
ACTORLLM_SHARED_DIR=$shared bash scripts/gpu_root.sh "$build" "$b"
mkdir -p "$b/lib"
bins=("$build/actorllm" "$build/tests/test_cuda" "$build/tests/test_kernels" "$build/tests/gpu_probe"
  "$build/bench/bench_gpu")
strip --strip-unneeded "$b"/bin/* 2>/dev/null || true

# Shared libraries: everything ldd resolves except glibc's own (the GPU machine's newer glibc runs our binaries)
# and the CUDA libraries found there (cuBLAS is 600 MB, NCCL 218 MB; the driver's libcuda must be the machine's).
# cudart is small and must match the toolkit we compiled with, so it travels.
for bin in "${bins[@]}"; do
  ldd "$bin" | awk '/=> \// {print $3}'
done | sort -u | while read -r lib; do
  name=$(basename "$lib")
  case "$name" in
  libc.so* | libm.so* | libpthread.so* | libdl.so* | librt.so* | ld-linux* | libcuda.so* | libcublas.so* | \
    libcublasLt.so* | libnccl.so* | libnvidia*) ;;
  *) cp -L "$lib" "$b/lib/$name" ;;
  esac
done

mkdir -p "$out_dir"
tar -C "$stage" -cf - actorllm-gpu | xz -T0 -6 >"$out_dir/actorllm-gpu.tar.xz.tmp"
mv "$out_dir/actorllm-gpu.tar.xz.tmp" "$out_dir/actorllm-gpu.tar.xz"
size=$(stat -c %s "$out_dir/actorllm-gpu.tar.xz")
raw=$(du -sb "$b" | cut -f1)
awk -v f="$out_dir/actorllm-gpu.tar.xz" -v s="$size" -v r="$raw" -v n="$(find "$b" -type f | wc -l)" \
  'BEGIN { printf "gpu_bundle: %s: %.1f MiB (%.1f MiB unpacked, %d files)\n", f, s / 1048576, r / 1048576, n }'
if ((size > limit)); then
  echo "gpu_bundle: the bundle is above the 64 MiB the device tool carries" >&2
  exit 1
fi
