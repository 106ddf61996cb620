#!/usr/bin/env bash
# Prefix caching under load: the same `actorllm bench serve` workload with a shared prompt prefix
# (--random-prefix-len) against `actorllm serve` with prefix caching on, then off, one server after the other
# (bench/serve_startup.sh starts each). Prints throughput and TTFT side by side; writes
# bench/results/prefix_cache_serve.json.
#
#   bench/prefix_cache_serve.sh MODEL [serve args...] [-- bench serve args...]
#   bench/prefix_cache_serve.sh ../shared/models/stories260K -- --num-prompts 200 --random-prefix-len 384 \
#       --random-input-len 32 --random-output-len 32 --max-concurrency 16 --random-vocab-size 512
set -euo pipefail
cd "$(dirname "$0")/.."
if (($# < 1)); then
  sed -n '2,9p' "$0" | sed 's/^# \{0,1\}//' >&2
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

for mode in on off; do
  flag=--enable-prefix-caching
  [[ $mode == off ]] && flag=--no-enable-prefix-caching
  echo "=== prefix caching $mode ==="
  bash bench/serve_startup.sh --name "prefix_$mode" "$model" "${serve_args[@]}" "$flag" -- "${bench_args[@]}"
done

on=bench/results/serve_startup_prefix_on.json
off=bench/results/serve_startup_prefix_off.json
row() {  # label, jq field, printf format
  printf "%-34s %14s %14s\n" "$1" "$(jq -r ".bench_serve.$2 | $3" "$on")" "$(jq -r ".bench_serve.$2 | $3" "$off")"
}
echo
echo "prefix caching: on vs off, $model, bench serve ${bench_args[*]}"
printf "%-34s %14s %14s\n" "" "caching on" "caching off"
row "Completed requests" completed tostring
row "Request throughput (req/s)" request_throughput '.*100|round/100|tostring'
row "Output token throughput (tok/s)" output_throughput '.*100|round/100|tostring'
row "Total token throughput (tok/s)" total_token_throughput '.*100|round/100|tostring'
row "Median TTFT (ms)" median_ttft_ms '.*100|round/100|tostring'
row "P99 TTFT (ms)" p99_ttft_ms '.*100|round/100|tostring'
row "Median TPOT (ms)" median_tpot_ms '.*100|round/100|tostring'
jq -cn --slurpfile on "$on" --slurpfile off "$off" --arg model "$model" --arg bench_args "${bench_args[*]}" \
  '{benchmark: "prefix_cache_serve", model: $model, bench_args: $bench_args, caching_on: $on[0].bench_serve,
    caching_off: $off[0].bench_serve,
    throughput_ratio: ($on[0].bench_serve.output_throughput / $off[0].bench_serve.output_throughput),
    median_ttft_ratio: ($off[0].bench_serve.median_ttft_ms / $on[0].bench_serve.median_ttft_ms)}' \
  >bench/results/prefix_cache_serve.json
echo "Wrote bench/results/prefix_cache_serve.json"
