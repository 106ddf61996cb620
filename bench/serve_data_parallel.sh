#!/usr/bin/env bash
# Data-parallel throughput on this node: `actorllm serve -dp 2` (each replica one kernel thread) against dp 1 (two
# threads), the same `actorllm bench serve` load on each, alternated ROUNDS times (default 1). Prints each run's
# output tokens/s and, for dp 2, the router's balance (requests per replica from /metrics). Writes the runs to
# bench/results/serve_data_parallel.json.
#
#   bench/serve_data_parallel.sh [ROUNDS] [MODEL]
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-1}
model=${2:-../shared/models/stories260K}
bin=${ACTORLLM_BIN:-build/actorllm}
out=bench/results/serve_data_parallel.json
mkdir -p bench/results
tmp=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$tmp"' EXIT
load=(--num-prompts 256 --random-input-len 64 --random-output-len 128 --max-concurrency 32 --random-vocab-size 512
      --seed 1)
runs=()
run() {  # $1: dp
  local dp=$1 log=$tmp/serve-$1.log
  "$bin" serve "$model" --port 0 --served-model-name m --num-threads 2 -dp "$dp" --max-num-seqs 32 >"$log" 2>&1 &
  local pid=$! port=""
  for _ in $(seq 1 600); do
    port=$(grep -o 'Listening on http://127.0.0.1:[0-9]*' "$log" | head -1 | sed 's/.*://') || true
    [[ -n $port ]] && curl -sf "http://127.0.0.1:$port/health" >/dev/null && break
    sleep 0.05
  done
  "$bin" bench serve --base-url "http://127.0.0.1:$port" "${load[@]}" --result-file "$tmp/dp$dp.json" >"$tmp/bench.txt"
  local tps
  tps=$(python3 -c "import json;print(json.load(open('$tmp/dp$dp.json'))['output_throughput'])")
  local balance
  balance=$(curl -s "http://127.0.0.1:$port/metrics" | grep '^actorllm:replica_routed_requests_total' |
    sed 's/.*replica="\([0-9]*\)"} \(.*\)/\1:\2/' | tr '\n' ' ') || true
  kill "$pid"; wait "$pid" 2>/dev/null || true
  printf '%-4s %12.1f   %s\n' "dp$dp" "$tps" "${balance:--}"
  runs+=("{\"dp\": $dp, \"output_tokens_per_s\": $tps, \"routed\": \"${balance% }\"}")
}
printf '%-4s %12s   %s\n' run "out tok/s" "requests per replica"
for _ in $(seq 1 "$rounds"); do
  run 1
  run 2
done
(IFS=,; echo "{\"load\": \"${load[*]}\", \"runs\": [${runs[*]}]}") >"$out"
echo "wrote $out"
