#!/usr/bin/env bash
# bench_probe_passes, the probe as a companion process: "ready" with the best pattern once it has probed, one answer
# per line of stdin (a pass in the best pattern, or in the pattern the line names), a clear error for a pattern it
# cannot read (and it goes on), and at end of input the passes in its JSON, each with its label and pattern.
#   probe_passes_test.sh BENCH_PROBE_PASSES
set -uo pipefail
bin=$1
tmp=$(mktemp -d /tmp/actorllm-probe-passes.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
# shellcheck source=tests/scripts/check_helpers.sh
source "$(dirname "$0")/check_helpers.sh"

printf 'first\nsecond 2 512 0\nbad 9 0 0\nworse x\nthird 1 0 0 7\nruns 8 0 0 4\nlast 8 1024 1\n' |
  "$bin" --threads 2 --json "$tmp/passes.json" >"$tmp/out" 2>"$tmp/err"
rc=$?
check "it exits 0 at end of input (got $rc; $(tail -3 "$tmp/err" | tr '\n' ' '))" test "$rc" -eq 0
check "it says ready, with the best pattern and its bytes/s (got: $(head -1 "$tmp/out"))" \
  grep -qE '^ready [0-9] streams?( of [0-9] lines)?, prefetch .* [0-9]+$' <(head -1 "$tmp/out")
check "one answer per line, in order (got: $(tr '\n' '|' <"$tmp/out"))" \
  test "$(sed -n '2,8p' "$tmp/out" | cut -d' ' -f1 | tr '\n' ' ')" = "first second error error error runs last "
check "a pass's answer is a positive rate" grep -qE '^second [1-9][0-9]*$' "$tmp/out"
check "a pattern it cannot read is refused naming the line and what it expects" \
  grep -qF "error 'bad 9 0 0': expected LABEL STREAMS (1-8) PREFETCH_BYTES (0-4096) NTA (0 or 1) [LINES (1, 2, 4 or 8)]" \
  "$tmp/out"
check "a line count other than 1, 2, 4 or 8 is refused" grep -qF "error 'third 1 0 0 7': expected" "$tmp/out"
check "the JSON holds the four passes read, each with its pattern" python3 -c "import json, sys
d = json.load(open('$tmp/passes.json'))
p = [(x['label'], x['pattern']) for x in d['passes']]
best = d['memory_bandwidth_best_pattern']
ok = p == [('first', best), ('second', '2 streams, prefetch 512 B'), ('runs', '8 streams of 4 lines, prefetch off'),
           ('last', '8 streams, prefetch 1024 B (nta)')]
ok = ok and all(x['bytes_per_s'] > 0 for x in d['passes'])
sys.exit(0 if ok else 1)"
exit "$fail"
