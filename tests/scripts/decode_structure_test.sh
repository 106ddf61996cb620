#!/usr/bin/env bash
# bench_decode_structure on stories260K's shapes: one short round writes a table and JSON whose three fractions of the
# probe are positive numbers, each bad --gaps is refused (exit non-zero) with a message naming the flag and the value,
# and a missing model directory is refused by name (exit 2).
#   decode_structure_test.sh BENCH_BINARY SHARED_DIR
set -uo pipefail
bench=$1
model=$2/models/stories260K
tmp=$(mktemp -d /tmp/actorllm-decode-structure.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
# shellcheck source=tests/scripts/check_helpers.sh
source "$(dirname "$0")/check_helpers.sh"

"$bench" --model "$model" --threads 2 --rounds 1 --cycles 1 --steps 2 --json "$tmp/out.json" >"$tmp/table" 2>"$tmp/err"
rc=$?
check "a short run exits 0 (got $rc: $(tail -c 300 "$tmp/err"))" test "$rc" -eq 0
check "the table gives calls+gaps / probe" grep -q "calls+gaps / probe" "$tmp/table"
check "the JSON holds three positive fractions and the gaps" python3 - "$tmp/out.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
assert d["benchmark"] == "decode_structure", d
for k in ("one_call_of_probe", "calls_of_probe", "calls_with_gaps_of_probe", "memory_bandwidth_bytes_per_s"):
    assert d[k] > 0, (k, d[k])
assert d["gaps_us"] == [6, 25, 4, 3.5], d["gaps_us"]
assert len(d["per_round"]) == 1 and d["weight_bytes_per_step"] > 0, d
PY

refuses() { # DESCRIPTION EXPECTED_TEXT GAPS
  "$bench" --model "$model" --rounds 1 --cycles 1 --steps 1 --gaps "$3" >"$tmp/out" 2>&1
  local rc=$?
  check "$1: exits non-zero (got $rc)" test "$rc" -ne 0
  check "$1: says '$2' (got: $(head -c 300 "$tmp/out"))" grep -qF -- "$2" "$tmp/out"
}
refuses "three gaps" "four values expected (q/k/v, o, gate|up, down), got 3" "1,2,3"
refuses "five gaps" "four values expected, got more" "1,2,3,4,5"
refuses "a word" "'x' is not a number of microseconds" "1,x,3,4"
refuses "a negative gap" "'-1' is not a number of microseconds" "1,-1,3,4"
refuses "a number with a tail" "'2us' is not a number of microseconds" "1,2us,3,4"
"$bench" --model "$tmp/no-such-model" --rounds 1 >"$tmp/out" 2>&1
rc=$?
check "a missing model directory: exit 2 (got $rc)" test "$rc" -eq 2
check "a missing model directory: names its config.json (got: $(head -c 300 "$tmp/out"))" \
  grep -qF -- "--model: $tmp/no-such-model/config.json: cannot read" "$tmp/out"
exit "$fail"
