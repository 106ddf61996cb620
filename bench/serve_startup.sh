#!/usr/bin/env bash
# Start-up and serving benchmark of `actorllm serve`: starts the server on a free port (--port 0, read back from
# its log), measures the wall time from process start to the first 200 on /health (polled every 10 ms), then,
# unless --no-bench, runs `actorllm bench serve` against it. Prints both; writes JSON to
# bench/results/serve_startup[_NAME].json (the bench result's scalar fields; the per-request arrays stay out).
#
#   bench/serve_startup.sh [--name NAME] [--no-bench] MODEL [serve args...] [-- bench serve args...]
#   bench/serve_startup.sh --name stories260K ../shared/models/stories260K -- --num-prompts 200 \
#       --random-input-len 64 --random-output-len 64 --max-concurrency 32 --random-vocab-size 512
#
# ACTORLLM_BIN picks the binary (default: build/actorllm); ACTORLLM_STARTUP_TIMEOUT the seconds to wait for /health.
set -euo pipefail
cd "$(dirname "$0")/.."

name=""
run_bench=1
while (($#)); do
  case "$1" in
    --name) name=$2; shift 2 ;;
    --no-bench) run_bench=0; shift ;;
    *) break ;;
  esac
done
if (($# < 1)); then
  sed -n '2,11p' "$0" | sed 's/^# \{0,1\}//' >&2
  exit 2
fi
model=$1
shift
serve_args=()
bench_args=()
while (($#)); do
  if [[ $1 == -- ]]; then
    shift
    bench_args=("$@")
    break
  fi
  serve_args+=("$1")
  shift
done

bin=${ACTORLLM_BIN:-build/actorllm}
timeout_s=${ACTORLLM_STARTUP_TIMEOUT:-300}
[[ -x $bin ]] || { echo "serve_startup.sh: no executable $bin (build first, or set ACTORLLM_BIN)" >&2; exit 1; }
work=$(mktemp -d)
log=$work/server.log
server_pid=""
cleanup() {
  if [[ -n $server_pid ]] && kill -0 "$server_pid" 2>/dev/null; then
    kill -TERM "$server_pid" 2>/dev/null || true
    for _ in $(seq 100); do kill -0 "$server_pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$server_pid" 2>/dev/null || true
    wait "$server_pid" 2>/dev/null || true
  fi
  rm -rf "$work"
}
trap cleanup EXIT

now_ns() { date +%s%N; }

start_ns=$(now_ns)
"$bin" serve "$model" --port 0 "${serve_args[@]}" 2>"$log" >&2 &
server_pid=$!

port=""
listen_ns=""
health_ns=""
deadline_ns=$((start_ns + timeout_s * 1000000000))
while [[ -z $health_ns ]]; do
  if ! kill -0 "$server_pid" 2>/dev/null; then
    echo "serve_startup.sh: the server exited during start-up; its log:" >&2
    cat "$log" >&2
    exit 1
  fi
  if (($(now_ns) > deadline_ns)); then
    echo "serve_startup.sh: no 200 on /health within ${timeout_s} s; the log:" >&2
    cat "$log" >&2
    exit 1
  fi
  if [[ -z $port ]]; then
    port=$(sed -n 's/.*Listening on http:\/\/[^ ]*:\([0-9][0-9]*\).*/\1/p' "$log" | head -n1)
    [[ -n $port ]] && listen_ns=$(now_ns)
  fi
  if [[ -n $port ]] &&
    [[ $(curl -s -o /dev/null -w '%{http_code}' --max-time 1 "http://127.0.0.1:$port/health" || true) == 200 ]]; then
    health_ns=$(now_ns)
    break
  fi
  sleep 0.01
done

seconds() { awk -v ns="$1" 'BEGIN { printf "%.3f", ns / 1e9 }'; }
time_to_listen=$(seconds $((listen_ns - start_ns)))
time_to_health=$(seconds $((health_ns - start_ns)))
echo "actorllm serve $model ${serve_args[*]}"
echo "Time to listening socket (s):            $time_to_listen"
echo "Time to first 200 on /health (s):        $time_to_health"

bench_json=null
bench_status=0
if ((run_bench)); then
  # Exit status 1 when some requests failed: the JSON is still written, and this script then exits 1 too.
  "$bin" bench serve --base-url "http://127.0.0.1:$port" --result-file "$work/bench.json" "${bench_args[@]}" ||
    bench_status=$?
  [[ -f $work/bench.json ]] || { echo "serve_startup.sh: bench serve failed (status $bench_status)" >&2; exit 1; }
  # The scalar fields only: the per-request arrays (input_lens, itls, ...) would dwarf the summary.
  bench_json=$(jq -c 'with_entries(select(.value | type != "array"))' "$work/bench.json")
fi

mkdir -p bench/results
out=bench/results/serve_startup${name:+_$name}.json
jq -cn --arg model "$model" --arg serve_args "${serve_args[*]}" --arg bench_args "${bench_args[*]}" \
  --argjson listen "$time_to_listen" --argjson health "$time_to_health" --argjson bench "$bench_json" \
  --arg threads "$(nproc)" \
  '{benchmark: "serve_startup", model: $model, serve_args: $serve_args, bench_args: $bench_args,
    cpu_threads: ($threads | tonumber), time_to_listen_s: $listen, time_to_health_s: $health, bench_serve: $bench}' \
  >"$out"
echo "Wrote $out"
exit "$bench_status"
