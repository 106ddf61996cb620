#!/usr/bin/env bash
# Installs what actorllm needs on Debian 12, and only what is missing (idempotent; safe to re-run).
set -euo pipefail

packages=(
  build-essential cmake ninja-build ccache pkg-config git clang-format
  libcaf-dev libboost-dev libsimdjson-dev doctest-dev libpcre2-dev libtomlplusplus-dev
  libfmt-dev libcli11-dev libgloo-dev libssl-dev libicu-dev
)

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  sudo_cmd=()
  if [[ $(id -u) -ne 0 ]]; then sudo_cmd=(sudo); fi
  "${sudo_cmd[@]}" apt-get update -qq
  DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
else
  echo "setup: all packages present"
fi

if [[ -x /usr/local/cuda/bin/nvcc ]]; then
  echo "setup: CUDA toolkit found at /usr/local/cuda (the CUDA backend will be built)"
else
  echo "setup: no CUDA toolkit at /usr/local/cuda (CPU backend only)"
fi
