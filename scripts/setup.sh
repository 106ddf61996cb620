#!/usr/bin/env bash
# Installs what actorllm needs on Debian 12, and only what is missing (idempotent; safe to re-run).
set -euo pipefail

packages=(
  build-essential cmake ninja-build ccache pkg-config git clang-format
  libcaf-dev libboost-dev libsimdjson-dev doctest-dev libpcre2-dev libtomlplusplus-dev
  libfmt-dev libcli11-dev libgloo-dev libssl-dev libicu-dev
  openssl  # the command: the control-plane TLS tests make their certificates with it
  python3  # the GPU check's scripts and their tests (tests/scripts)
)

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
# Node and npm run the openai-client acceptance suite (tests/e2e_openai); any node on PATH will do here.
if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
  missing+=(nodejs npm)
fi

sudo_cmd=()
if [[ $(id -u) -ne 0 ]]; then sudo_cmd=(sudo); fi
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
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

# The npm packages of tests/e2e_openai (the official openai client, a schema validator), pinned by its
# package-lock.json: `npm ci` when node_modules is missing or older than the lock file.
suite="$(cd "$(dirname "$0")/.." && pwd)/tests/e2e_openai"
node_major=$(node -p 'process.versions.node.split(".")[0]')
if ((node_major < 20)); then
  echo "setup: WARNING: Node $(node --version) is installed, but tests/e2e_openai needs Node 20 or newer" \
    "(Debian 12's nodejs is 18: install Node 20, e.g. from NodeSource); its ctest test will fail until then" >&2
fi
if [[ ! -f "$suite/node_modules/.package-lock.json" || "$suite/package-lock.json" -nt "$suite/node_modules/.package-lock.json" ]]; then
  echo "setup: npm ci in tests/e2e_openai"
  (cd "$suite" && npm ci --no-audit --no-fund --loglevel=error)
else
  echo "setup: tests/e2e_openai npm packages present"
fi
