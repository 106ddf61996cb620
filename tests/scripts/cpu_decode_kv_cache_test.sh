#!/usr/bin/env bash
# bench_cpu_decode's KV cache follows serve's --kv-cache-dtype: auto keeps the weights' dtype (float32 for ../shared's
# f32 stories260K), bfloat16 is taken and reported in the table and the JSON, and a value the CPU does not store or
# nobody implements is refused by name before anything is measured.
#   cpu_decode_kv_cache_test.sh BENCH_CPU_DECODE MODEL_DIR
set -uo pipefail
bench=${1:?usage: cpu_decode_kv_cache_test.sh BENCH_CPU_DECODE MODEL_DIR}
model=${2:?usage: cpu_decode_kv_cache_test.sh BENCH_CPU_DECODE MODEL_DIR}
tmp=$(mktemp -d /tmp/actorllm-cpu-decode-kv.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
# shellcheck source=tests/scripts/check_helpers.sh
source "$(dirname "$0")/check_helpers.sh"
export ACTORLLM_PACKED_WEIGHT_CACHE=off
args=(--model "$model" --dtype auto --threads 2 --rounds 1 --batch 2 --decode-steps 2 --batch1-steps 2
  --paired-segment-steps 0 --prefill-tokens 8 --prefill-reps 1)

for kv in auto bfloat16; do
  "$bench" "${args[@]}" --kv-cache-dtype "$kv" --json "$tmp/$kv.json" >"$tmp/$kv.out" 2>&1
  rc=$?
  check "--kv-cache-dtype $kv: exit 0 (got $rc: $(tail -c 300 "$tmp/$kv.out"))" test "$rc" -eq 0
done
check "auto keeps the f32 model's dtype, in the table" grep -qE "^KV cache dtype +float32$" "$tmp/auto.out"
check "and in the JSON" python3 -c "
import json, sys
sys.exit(0 if json.load(open('$tmp/auto.json'))['kv_cache_dtype'] == 'float32' else 1)"
check "bfloat16 is taken, in the table" grep -qE "^KV cache dtype +bfloat16$" "$tmp/bfloat16.out"
check "and in the JSON, with a prefill measured over it" python3 -c "
import json, sys
d = json.load(open('$tmp/bfloat16.json'))
sys.exit(0 if d['kv_cache_dtype'] == 'bfloat16' and d['prefill_tokens_per_s'] > 0 else 1)"

"$bench" "${args[@]}" --kv-cache-dtype fp8 >"$tmp/fp8.out" 2>&1
rc=$?
check "fp8 (GPU only) is refused (exit $rc)" test "$rc" -eq 2
check "naming the flag and the value" grep -qF -- "--kv-cache-dtype fp8: the cpu backend has no fp8 KV cache" \
  "$tmp/fp8.out"
check "before anything is measured" bash -c "! grep -q 'memory bandwidth probe' '$tmp/fp8.out'"
"$bench" "${args[@]}" --kv-cache-dtype int4 >"$tmp/bad.out" 2>&1
rc=$?
check "an unknown value is refused (exit $rc)" test "$rc" -eq 2
check "naming it and what is accepted" grep -qF -- "--kv-cache-dtype: 'int4' is not one of auto, bfloat16" "$tmp/bad.out"
exit "$fail"
