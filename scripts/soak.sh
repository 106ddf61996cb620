#!/usr/bin/env bash
# Soak test of `actorllm serve` (not in the default test run): builds actorllm and bench_serve_soak, starts the
# server on a free port, runs bench/serve_soak.cpp against it (mixed traffic at concurrency 32: streams,
# non-streams, hang-ups, bad requests, and the attacks of issue 30 interleaved: hostile regexes and schemas, oversized
# stop lists, n and prompt lists, idle connections; /health probed every second; RSS, fds and KV usage before and
# after; a temperature-0 text at the start and the end), stops the server with SIGTERM and exits with the driver's
# status (1 when a criterion failed, or when the server did not stop cleanly).
#
#   scripts/soak.sh [serve args...] [-- bench_serve_soak args...]
#   SOAK_MINUTES=1 scripts/soak.sh --max-num-seqs 64 -- --seed 7
#
# MODEL (default ../shared/models/stories260K), SOAK_MINUTES (default 10), SOAK_WARMUP_S (default 120: glibc's
# arenas grow once in the first minutes under load, a one-off step rather than a leak, measured with malloc_stats),
# SOAK_CONCURRENCY (default 32), SOAK_KV_CACHE_MEMORY (default 128MiB, unless --kv-cache-memory is given),
# SOAK_JSON (default bench/results/serve_soak.json), ACTORLLM_BUILD_DIR (default build), SOAK_SKIP_BUILD=1 to use the
# binaries as they are, ACTORLLM_STARTUP_TIMEOUT (seconds, default 300).
set -euo pipefail
cd "$(dirname "$0")/.."

model=${MODEL:-../shared/models/stories260K}
minutes=${SOAK_MINUTES:-10}
warmup_s=${SOAK_WARMUP_S:-120}
concurrency=${SOAK_CONCURRENCY:-32}
json=${SOAK_JSON:-bench/results/serve_soak.json}
build_dir=${ACTORLLM_BUILD_DIR:-build}
startup_timeout=${ACTORLLM_STARTUP_TIMEOUT:-300}
serve_args=()
soak_args=()
while (($#)); do
  if [[ $1 == -- ]]; then
    shift
    soak_args=("$@")
    break
  fi
  serve_args+=("$1")
  shift
done
if [[ ! -f $model/config.json ]]; then
  echo "soak.sh: no config.json in '$model' (set MODEL to a model directory)" >&2
  exit 2
fi
duration_s=$(awk -v m="$minutes" 'BEGIN { printf "%d", m * 60 }')
((duration_s > 0)) || { echo "soak.sh: SOAK_MINUTES must be positive, got '$minutes'" >&2; exit 2; }

if [[ ${SOAK_SKIP_BUILD:-0} != 1 ]]; then
  # Only the two binaries: the whole tree (tests included) is much longer to build.
  if [[ ! -f $build_dir/build.ninja ]]; then
    cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE="${ACTORLLM_BUILD_TYPE:-Release}"
  fi
  cmake --build "$build_dir" -j "${ACTORLLM_JOBS:-$(nproc)}" --target actorllm bench_serve_soak
fi
bin=$build_dir/actorllm
soak_bin=$build_dir/bench/bench_serve_soak
for b in "$bin" "$soak_bin"; do
  [[ -x $b ]] || { echo "soak.sh: no executable $b" >&2; exit 2; }
done

work=$(mktemp -d)
log=$work/server.log
server_pid=""
stop_server() {
  # SIGTERM drains (nothing is in flight by now) and exits 0; SIGKILL only when it does not within 60 s.
  server_status=0
  [[ -n $server_pid ]] || return 0
  if kill -0 "$server_pid" 2>/dev/null; then
    kill -TERM "$server_pid" 2>/dev/null || true
    for _ in $(seq 600); do kill -0 "$server_pid" 2>/dev/null || break; sleep 0.1; done
    if kill -0 "$server_pid" 2>/dev/null; then
      echo "soak.sh: the server did not exit within 60 s of SIGTERM; killing it" >&2
      kill -KILL "$server_pid" 2>/dev/null || true
    fi
  fi
  wait "$server_pid" 2>/dev/null || server_status=$?
  server_pid=""
}
cleanup() {
  stop_server
  rm -rf "$work"
}
trap cleanup EXIT

# The KV cache's pages are first touched as blocks are first used, a one-off growth that is not a leak: the default
# 4 GiB takes many minutes of traffic to touch, so unless the caller sizes it, the soak serves a 128 MiB cache (6,553
# blocks of 16 tokens, several times what its requests in flight hold), which the warm-up touches (SOAK_KV_CACHE_MEMORY
# overrides it).
if [[ " ${serve_args[*]} " != *" --kv-cache-memory "* ]]; then
  serve_args+=(--kv-cache-memory "${SOAK_KV_CACHE_MEMORY:-128MiB}")
fi
echo "soak.sh: actorllm serve $model --port 0 ${serve_args[*]}"
: >"$log"  # exists before the server's shell opens it: the wait below reads it at once
"$bin" serve "$model" --port 0 "${serve_args[@]}" 2>"$log" >&2 &
server_pid=$!

# The log names the port once the socket listens; then /health answers 200.
port=""
deadline=$((SECONDS + startup_timeout))
while :; do
  if ! kill -0 "$server_pid" 2>/dev/null; then
    echo "soak.sh: the server exited during start-up; its log:" >&2
    cat "$log" >&2
    exit 1
  fi
  if ((SECONDS > deadline)); then
    echo "soak.sh: no 200 on /health within ${startup_timeout} s; the log:" >&2
    cat "$log" >&2
    exit 1
  fi
  [[ -n $port ]] || port=$(sed -n 's/.*Listening on http:\/\/[^ ]*:\([0-9][0-9]*\).*/\1/p' "$log" | head -n1)
  if [[ -n $port ]] &&
    [[ $(curl -s -o /dev/null -w '%{http_code}' --max-time 1 "http://127.0.0.1:$port/health" || true) == 200 ]]; then
    break
  fi
  sleep 0.05
done
echo "soak.sh: server pid $server_pid on port $port; ${minutes} min of soak after a ${warmup_s} s warm-up"

soak_status=0
"$soak_bin" --base-url "http://127.0.0.1:$port" --pid "$server_pid" --duration "$duration_s" --warmup "$warmup_s" \
  --concurrency "$concurrency" --json "$json" "${soak_args[@]}" || soak_status=$?

stop_server
if ((server_status != 0)); then
  echo "soak.sh: the server exited with status $server_status after SIGTERM; the end of its log:" >&2
  tail -n 30 "$log" >&2
  ((soak_status != 0)) || soak_status=1
elif ((soak_status != 0)); then
  echo "soak.sh: the soak failed (status $soak_status); the end of the server log:" >&2
  tail -n 30 "$log" >&2
else
  echo "soak.sh: the server stopped cleanly on SIGTERM (status 0)"
fi
exit "$soak_status"
