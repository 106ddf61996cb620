#!/usr/bin/env bash
# bench_cpu_decode's batch-1 decode against the probe read beside it (bench/paired_roofline.hpp), on ../shared's
# stories260K: with segments of 2 steps a round prints the figure and the passes' range, and the JSON holds one pass
# more than the segments and names the reference pattern read beside the decode as well as the round's best (the
# segments a batch-1 run of their own, before the one no pass interrupts, which gives the tokens/s); with
# --paired-segment-steps 0 there is neither and the run still succeeds; with --batch1-last each round runs batch 1 last
# (and --variants beside it is refused); a negative segment is refused by name before anything is measured.
#   cpu_decode_paired_test.sh BENCH_CPU_DECODE MODEL_DIR
set -uo pipefail
bench=${1:?usage: cpu_decode_paired_test.sh BENCH_CPU_DECODE MODEL_DIR}
model=${2:?usage: cpu_decode_paired_test.sh BENCH_CPU_DECODE MODEL_DIR}
tmp=$(mktemp -d /tmp/actorllm-cpu-decode-paired.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
# shellcheck source=tests/scripts/check_helpers.sh
source "$(dirname "$0")/check_helpers.sh"
export ACTORLLM_PACKED_WEIGHT_CACHE=off
args=(--model "$model" --threads 2 --rounds 1 --batch 2 --decode-steps 2 --batch1-steps 6 --prefill-tokens 8
  --prefill-reps 1)

"$bench" "${args[@]}" --paired-segment-steps 2 --json "$tmp/on.json" >"$tmp/on.out" 2>&1
rc=$?
check "segments of 2 steps: exit 0 (got $rc: $(tail -c 300 "$tmp/on.out"))" test "$rc" -eq 0
check "the median against the probe read beside it is printed" \
  grep -qE "^batch-1 decode / probe read beside it +[0-9]+\.[0-9]%" "$tmp/on.out"
check "and the probe's own passes beside the decode against its best" \
  grep -qE "^  probe passes beside it / the probe's best +[0-9]+\.[0-9]%" "$tmp/on.out"
check "and the fastest pass and segment against it" \
  grep -qE "^  the fastest pass, segment / probe's best +[0-9]+\.[0-9]% [0-9]+\.[0-9]%" "$tmp/on.out"
check "the round names its figure beside the probe and the passes' range" \
  grep -qE "round 1: .*\(beside: [0-9]+\.[0-9]%, passes [0-9.]+-[0-9.]+ GB/s\)" "$tmp/on.out"
check "the JSON: 6 steps in segments of 2 give 4 passes, a positive fraction, and the round's shares of the step (computing, reading ahead, a worker waiting)" python3 -c "
import json, sys
d = json.load(open('$tmp/on.json'))
r = d['per_round'][0]
ok = (d['paired_segment_steps'] == 2 and len(r['probe_passes_beside_bytes_per_s']) == 4
      and all(p > 0 for p in r['probe_passes_beside_bytes_per_s'])
      and r['batch1_fraction_of_probe_beside'] > 0 and d['batch1_fraction_of_probe_beside'] > 0
      and d['probe_passes_beside_of_probe_best'] > 0 and d['batch1_fastest_segment_of_probe_best'] > 0
      and len(r['batch1_segment_bytes_per_s']) == 3 and all(b > 0 for b in r['batch1_segment_bytes_per_s'])
      and (0 < r['decode_batch1_matmul_call_share'] <= 1.0001 if d['decode_matmul_calls_timed']
           else r['decode_batch1_matmul_call_share'] == 0)
      and len(r['decode_batch1_thread_compute_share']) == 2
      and len(r['decode_batch1_read_ahead_share']) == 2 and all(0 <= x <= 1.0001 for x in r['decode_batch1_read_ahead_share'])
      and 0 <= r['decode_batch1_worker_wait_share'] <= 1.0001)
sys.exit(0 if ok else 1)"
check "the JSON names the reference pattern read beside the decode too (8 streams of 4 lines)" python3 -c "
import json, sys
f = json.load(open('$tmp/on.json'))['memory_bandwidth_reference_pattern_fields']
sys.exit(0 if (f['streams'], f['prefetch_bytes'], f['nta'], f['lines']) == (8, 0, False, 4) else 1)"

"$bench" "${args[@]}" --paired-segment-steps 0 --json "$tmp/off.json" >"$tmp/off.out" 2>&1
rc=$?
check "--paired-segment-steps 0: exit 0 (got $rc: $(tail -c 300 "$tmp/off.out"))" test "$rc" -eq 0
check "and no figure beside the probe" bash -c "! grep -q 'beside' '$tmp/off.out'"
check "and no batch-1 run in segments" bash -c "! grep -q 'in segments' '$tmp/off.out'"
check "and a decode figure" grep -qE "^decode tokens/s, batch 1 \(6 steps\) +[0-9]" "$tmp/off.out"
check "and no such key in the JSON" python3 -c "
import json, sys
d = json.load(open('$tmp/off.json'))
sys.exit(0 if 'batch1_fraction_of_probe_beside' not in d and d['paired_segment_steps'] == 0 else 1)"

# --batch1-last: each round measures the larger batch and prefill first, so that batch 1 ends it
# (compare_llama_cpp.sh starts llama.cpp's tg64 right after it).
"$bench" --model "$model" --threads 2 --rounds 2 --batch 2 --decode-steps 2 --batch1-steps 6 --prefill-tokens 8 \
  --prefill-reps 1 --batch1-last --json "$tmp/last.json" >"$tmp/last.out" 2>&1
rc=$?
check "--batch1-last: exit 0 (got $rc: $(tail -c 300 "$tmp/last.out"))" test "$rc" -eq 0
check "--batch1-last: every round runs batch 2, prefill, the probe, batch 1 in segments, then batch 1 in one run" python3 -c "
import re, sys
steps = [m.group(1) for m in re.finditer(
    r'^round \\d/2: (decode batch 2|prefill|memory bandwidth probe|decode batch 1 in segments|decode batch 1)',
    open('$tmp/last.out').read(), re.M)]
order = ['decode batch 2', 'prefill', 'memory bandwidth probe', 'decode batch 1 in segments', 'decode batch 1']
sys.exit(0 if steps == order * 2 else 1)"
check "--batch1-last: the JSON has both rounds' figures" python3 -c "
import json, sys
d = json.load(open('$tmp/last.json'))
sys.exit(0 if len(d['per_round']) == 2 and all(r['batch1_fraction_of_probe_beside'] > 0 for r in d['per_round']) else 1)"
"$bench" "${args[@]}" --batch1-last --variants bf16,int8 >"$tmp/mixed.out" 2>&1
rc=$?
check "--batch1-last with --variants is refused (exit $rc)" test "$rc" -eq 2
check "naming both flags" grep -qF -- "--batch1-last: orders the rounds of one model's measurements; it does not combine with --variants" \
  "$tmp/mixed.out"

"$bench" "${args[@]}" --paired-segment-steps -3 >"$tmp/bad.out" 2>&1
rc=$?
check "a negative segment is refused (exit $rc)" test "$rc" -eq 2
check "naming the flag and the value" grep -qF -- "--paired-segment-steps: must be at least 0 (0: no paired probe), got -3" \
  "$tmp/bad.out"
check "before anything is measured" bash -c "! grep -q 'memory bandwidth probe' '$tmp/bad.out'"
exit "$fail"
