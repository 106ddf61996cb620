#!/usr/bin/env bash
# scripts/gpu_check.sh without a GPU, from a layout scripts/gpu_root.sh makes of this build: every step runs up to
# where it needs the GPU and says "SKIP no GPU", the check exits 77 ("skipped: no GPU"), OUTDIR holds at most the 7
# files the device tool brings back, --quick names its five steps, and bad arguments are refused by name (exit 2).
# On a machine with a GPU this test skips itself (exit 77): the check would run for real there.
#   gpu_check_no_gpu_test.sh BUILD_DIR SOURCE_DIR
set -uo pipefail
build=$1
src=$2
if "$build/tests/gpu_probe" >/dev/null 2>&1; then
  echo "skipped: this machine has a GPU (run scripts/gpu_check.sh itself)"
  exit 77
fi
tmp=$(mktemp -d /tmp/actorllm-gpucheck-test.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
# shellcheck source=tests/scripts/check_helpers.sh
source "$(dirname "$0")/check_helpers.sh"

bash "$src/scripts/gpu_root.sh" "$build" "$tmp/root" --link || exit 1
export ACTORLLM_GPU_ROOT=$tmp/root

ACTORLLM_GPU_CHECK_SECONDS=120 bash "$src/scripts/gpu_check.sh" "$tmp/full" >"$tmp/full.log" 2>&1
rc=$?
check "the full check exits 77 without a GPU (got $rc)" test "$rc" -eq 77
check "it says 'skipped: no GPU'" grep -q '^skipped: no GPU' "$tmp/full.log"
for s in probe sanitize parity sampling allreduce golden layouts nccl 8b bench profile serve hf; do
  check "step $s is in the summary as SKIP" grep -qE "^$s +SKIP" "$tmp/full/summary.txt"
done
check "the probe says why" grep -qE '^probe +SKIP .*skipped: no GPU' "$tmp/full/summary.txt"
check "the summary's last line is the total" bash -c "tail -1 '$tmp/full/summary.txt' | grep -qE '^total +[0-9]+ +budget 120 s'"
n=$(find "$tmp/full" -type f | wc -l)
check "at most 7 files in OUTDIR (got $n)" test "$n" -le 7
check "summary.json holds every step" python3 -c "
import json, sys
d = json.load(open('$tmp/full/summary.json'))
assert len(d['steps']) == 13 and all(v['result'] == 'SKIP' for v in d['steps'].values()), d
assert d['budget_seconds'] == 120"

bash "$src/scripts/gpu_check.sh" --quick "$tmp/quick" >"$tmp/quick.log" 2>&1
rc=$?
check "--quick exits 77 without a GPU (got $rc)" test "$rc" -eq 77
check "--quick runs probe, parity, golden, sampling and bench" \
  bash -c "awk 'NR > 2 && \$1 != \"total\" {print \$1}' '$tmp/quick/summary.txt' | tr '\n' ' ' | grep -qx 'probe parity sampling golden bench \|probe parity golden sampling bench '"
check "--quick's budget is 180 s" grep -qE '^total .*budget 180 s' "$tmp/quick/summary.txt"

bash "$src/scripts/gpu_check.sh" "$tmp/some" profile serve >"$tmp/some.log" 2>&1
rc=$?
check "profile and serve alone skip without a GPU (got $rc)" test "$rc" -eq 77
check "profile says no GPU" grep -qE '^profile +SKIP +[0-9]+ +no GPU' "$tmp/some/summary.txt"
check "serve says no GPU" grep -qE '^serve +SKIP +[0-9]+ +no GPU' "$tmp/some/summary.txt"

bash "$src/scripts/gpu_check.sh" "$tmp/bad" warp >"$tmp/bad.log" 2>&1
rc=$?
check "an unknown step is refused with exit 2 (got $rc)" test "$rc" -eq 2
check "naming it and the steps" grep -q "unknown step 'warp' (steps: probe sanitize" "$tmp/bad.log"
bash "$src/scripts/gpu_check.sh" --quick "$tmp/bad2" probe >"$tmp/bad2.log" 2>&1
rc=$?
check "--quick with steps is refused with exit 2 (got $rc)" test "$rc" -eq 2

[[ $fail -eq 0 ]] || {
  echo "--- full.log"
  cat "$tmp/full.log"
}
exit $fail
