#!/usr/bin/env bash
# The README's first command: installs what is missing, builds, and serves a model with the OpenAI-compatible HTTP
# server (`actorllm serve`, http://127.0.0.1:8000 by default). MODEL_DIR defaults to stories260K from
# ../shared/models; further arguments go to `actorllm serve` (e.g. --port 8080 -tp 2).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/build.sh
model=${1:-../shared/models/stories260K}
if [[ ! -f "$model/config.json" ]]; then
  echo "serve: no config.json in '$model'; give a Hugging Face model directory as the first argument" >&2
  exit 2
fi
shift || true
exec ./build/actorllm serve "$model" "$@"
