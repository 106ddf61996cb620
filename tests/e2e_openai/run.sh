#!/usr/bin/env bash
# CTest's entry for the openai npm client suite ("e2e_openai:openai npm client"). Fails, saying why, when Node 20+
# or the suite's node_modules (npm ci, done by scripts/setup.sh) are missing, never passes without running.
#   usage: run.sh [ACTORLLM_BIN]      (or ACTORLLM_BIN in the environment; ACTORLLM_SHARED optional)
set -euo pipefail
cd "$(dirname "$0")"
if (($#)); then export ACTORLLM_BIN=$1; fi
fail() {
  echo "e2e_openai: $*" >&2
  exit 1
}
command -v node >/dev/null || fail "node is not installed: run scripts/setup.sh (installs Node and the suite's npm packages)"
major=$(node -p 'process.versions.node.split(".")[0]')
((major >= 20)) || fail "Node $(node --version) is too old: the suite needs Node 20 or newer"
[[ -f node_modules/openai/package.json && -f node_modules/ajv/package.json ]] ||
  fail "tests/e2e_openai/node_modules is missing: run scripts/setup.sh (or: cd tests/e2e_openai && npm ci)"
[[ ! package-lock.json -nt node_modules/.package-lock.json ]] ||
  fail "tests/e2e_openai/node_modules is older than package-lock.json: run scripts/setup.sh (npm ci)"
exec node --test --test-concurrency=1 openai_client.test.mjs
