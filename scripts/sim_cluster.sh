#!/usr/bin/env bash
# Simulated multi-node cluster on loopback (DESIGN.md §5): one head (registry only) and N `actorllm node` agents
# with D CPU devices each, every one its own process. Prints the head address, the token and `actorllm status`.
#   bash scripts/sim_cluster.sh [N=2] [D=1]     start (stops a previous one first)
#   bash scripts/sim_cluster.sh stop            stop it
# The binary is $ACTORLLM_BIN, else $ACTORLLM_BUILD_DIR/actorllm, else build/actorllm; logs and pids go to
# $ACTORLLM_SIM_DIR (default ${TMPDIR:-/tmp}/actorllm-sim-cluster-$USER). With $ACTORLLM_TLS_CERT, $ACTORLLM_TLS_KEY
# and $ACTORLLM_TLS_CA exported, every node (and the final status) uses control-plane TLS.
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${ACTORLLM_BIN:-${ACTORLLM_BUILD_DIR:-build}/actorllm}
state=${ACTORLLM_SIM_DIR:-${TMPDIR:-/tmp}/actorllm-sim-cluster-${USER:-$(id -u)}}

# SIGTERM, then SIGKILL for whatever still runs after 2 s.
terminate() {
  local pid alive
  for pid in "$@"; do kill -TERM "$pid" 2>/dev/null || true; done
  for _ in $(seq 20); do
    alive=0
    for pid in "$@"; do kill -0 "$pid" 2>/dev/null && alive=1; done
    ((alive)) || return 0
    sleep 0.1
  done
  for pid in "$@"; do kill -KILL "$pid" 2>/dev/null || true; done
}

stop_cluster() {
  [[ -f "$state/pids" ]] || return 0
  mapfile -t pids <"$state/pids"
  # The agents first (the head is the first line), so that none of them sees its head go away.
  terminate "${pids[@]:1}"
  terminate "${pids[0]}"
  rm -f "$state/pids"
  echo "sim_cluster: stopped ${#pids[@]} process(es)"
}

if [[ "${1:-}" == "stop" ]]; then
  stop_cluster
  exit 0
fi
n=${1:-2}
devices=${2:-1}
if [[ ! -x "$bin" ]]; then
  echo "sim_cluster: no actorllm binary at '$bin' (build with scripts/build.sh or set ACTORLLM_BIN)" >&2
  exit 2
fi
stop_cluster
mkdir -p "$state"
rm -f "$state"/*.log
token=$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')

"$bin" node --head --host 127.0.0.1 --port 0 --cpu-devices 0 --cluster-token "$token" >"$state/head.log" 2>&1 &
echo $! >"$state/pids"
address=""
for _ in $(seq 100); do
  address=$(grep -oE 'Cluster head listening on [0-9.]+:[0-9]+' "$state/head.log" | awk '{print $5}' || true)
  [[ -n "$address" ]] && break
  sleep 0.1
done
if [[ -z "$address" ]]; then
  echo "sim_cluster: the head did not start; $state/head.log:" >&2
  cat "$state/head.log" >&2
  stop_cluster
  exit 1
fi
for ((i = 0; i < n; ++i)); do
  "$bin" node --join "$address" --host 127.0.0.1 --cpu-devices "$devices" --node-id "node-$i" \
    --cluster-token "$token" >"$state/node-$i.log" 2>&1 &
  echo $! >>"$state/pids"
done
for _ in $(seq 100); do
  if "$bin" status --address "$address" --cluster-token "$token" 2>/dev/null | grep -q ": $n node(s)"; then break; fi
  sleep 0.1
done
echo "Head:  $address"
echo "Token: $token"
echo "Logs:  $state"
echo "Use:   export ACTORLLM_CLUSTER_ADDRESS=$address ACTORLLM_CLUSTER_TOKEN=$token"
echo
"$bin" status --address "$address" --cluster-token "$token"
