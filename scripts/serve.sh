#!/usr/bin/env bash
# The README's first command: installs what is missing, builds, and runs the model (default: stories260K from
# ../shared/models). The OpenAI-compatible HTTP server (`actorllm serve`) is not built yet; until it lands this runs
# the same model through `actorllm generate` so a new user sees the engine produce text.
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
if ./build/actorllm --help 2>/dev/null | grep -qE '^[[:space:]]+serve([[:space:]]|$)'; then
  exec ./build/actorllm serve "$model" "$@"
fi
echo "serve: the HTTP server is not part of this build yet; generating from '$model' instead" >&2
exec ./build/actorllm generate --model "$model" --prompt "${ACTORLLM_PROMPT:-Once upon a time}" --max-tokens 64 \
  --temperature 0 "$@"
