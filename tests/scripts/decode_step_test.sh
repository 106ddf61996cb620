#!/usr/bin/env bash
# bench_kernels --decode-step-rounds: one quick round prints the step's matmuls, the same bytes as one call, as calls of
# 2, 8 and 32 MiB (and the per-call cost), the step with the caller busy between its calls and the step with gate/up and
# down as one call, each as a fraction of the probe, and their medians; each bad --decode-step-gaps is refused (exit
# non-zero, nothing measured) with a message naming the flag and the value. --compact-step-rounds: one quick round of
# the step on compact panels and on plain panels of the same values, each against the probe and the two against each other.
#   decode_step_test.sh BENCH_KERNELS
set -uo pipefail
bench=$1
tmp=$(mktemp -d /tmp/actorllm-decode-step.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
# shellcheck source=tests/scripts/check_helpers.sh
source "$(dirname "$0")/check_helpers.sh"

"$bench" --decode-step-rounds 1 --quick --threads 2 --decode-step-gaps 1,2,0.5,0 >"$tmp/out" 2>&1
rc=$?
check "a quick round exits 0 (got $rc: $(tail -c 300 "$tmp/out"))" test "$rc" -eq 0
check "the round names the gaps it used" grep -qF "the step with 1,2,0.5,0 us between calls" "$tmp/out"
for what in "one call" "step" "step with gaps"; do
  check "a positive median $what / probe" grep -qE "^median $what / probe: [0-9]*[1-9][0-9]*\.[0-9]%" "$tmp/out"
done
check "the medians of calls of 2, 8 and 32 MiB" \
  grep -qE "^median calls of 2, 8 and 32 MiB / probe: [0-9]+\.[0-9]% [0-9]+\.[0-9]% [0-9]+\.[0-9]%$" "$tmp/out"
check "the medians of the step with gate/up and down as one call" \
  grep -qE "^median step, gate/up and down as one call / probe: [0-9]+\.[0-9]%; with the gaps [0-9]+\.[0-9]%$" "$tmp/out"
check "a per-call cost in us" grep -qE "^median per-call cost \(2 MiB calls against one call\): -?[0-9]+\.[0-9] us$" "$tmp/out"

refuses() { # DESCRIPTION EXPECTED_TEXT GAPS
  "$bench" --decode-step-rounds 1 --quick --decode-step-gaps "$3" >"$tmp/out" 2>&1
  local rc=$?
  check "$1: exits non-zero (got $rc)" test "$rc" -ne 0
  check "$1: says '$2' (got: $(head -c 300 "$tmp/out"))" grep -qF -- "$2" "$tmp/out"
  check "$1: measures nothing" bash -c "! grep -q 'round 1' '$tmp/out'"
}
refuses "three gaps" "--decode-step-gaps: four values expected (q/k/v, o, gate/up, down), got 3" "1,2,3"
refuses "five gaps" "four values expected, got more" "1,2,3,4,5"
refuses "a word" "'x' is not a number of microseconds" "1,x,3,4"
refuses "an empty value" "'' is not a number of microseconds" "1,,3,4"
refuses "a negative gap" "'-1' is not a number of microseconds" "1,-1,3,4"
refuses "a number with a tail" "'2us' is not a number of microseconds" "1,2us,3,4"

# --compact-step-rounds: the step on compact panels and on plain ones alternated, each against the probe and the two
# against each other; not together with --decode-step-rounds.
"$bench" --compact-step-rounds 1 --quick --threads 2 >"$tmp/out" 2>&1
rc=$?
check "a quick compact round exits 0 (got $rc: $(tail -c 300 "$tmp/out"))" test "$rc" -eq 0
if grep -q "compact panels: not in this build" "$tmp/out"; then
  echo "skipped: this build has no compact-panel kernels (AVX512-VBMI with AVX512-BF16)"
else
  check "the round times both panel kinds against the probe" grep -qE \
    "^round 1: probe [0-9.]+ GB/s \| compact [0-9.]+ ms, [0-9.]+ GB/s \([0-9.]+%\) \| plain [0-9.]+ ms, [0-9.]+ GB/s \([0-9.]+%\) \| compact [0-9]\.[0-9]{3}x plain's steps a second$" \
    "$tmp/out"
  check "the medians" grep -qE \
    "^median: compact panels read [0-9.]+% of the probe, plain [0-9.]+%; compact [0-9]\.[0-9]{3}x plain's steps a second \(rounds [0-9]\.[0-9]{3} to [0-9]\.[0-9]{3}\)$" \
    "$tmp/out"
  check "each way against the probe passes of its turns" grep -qE \
    "^  plain: [0-9.]+% \(fastest third [0-9.]+%\)$" "$tmp/out"
  check "how many turns and their passes" grep -qE \
    "^against the probe pass read in the same turn \(3 turns; passes [0-9.]+-[0-9.]+ GB/s, fastest third from [0-9.]+\):$" \
    "$tmp/out"
fi
"$bench" --compact-step-rounds 1 --decode-step-rounds 1 >"$tmp/out" 2>&1
rc=$?
check "both modes at once: exits non-zero (got $rc)" test "$rc" -ne 0
check "both modes at once: says which excludes which" grep -qF -- "--decode-step-rounds excludes --compact-step-rounds" "$tmp/out"
check "both modes at once: measures nothing" bash -c "! grep -q 'round 1' '$tmp/out'"
exit "$fail"
