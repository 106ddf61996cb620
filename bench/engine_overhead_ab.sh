#!/usr/bin/env bash
# Engine overhead per decode step, A against B in one run: bench_engine_overhead of two builds (e.g. a base commit's
# worktree and this one), alternated ROUNDS times (default 30) on stories260K's shape, whose forward takes well under
# a millisecond, so the engine's own per-step cost (scheduling, messages, bookkeeping) dominates. Prints the median and
# quartiles of each side's per-step overhead at batch 1 and 64 and their ratio (B / A), and writes them to
# bench/results/engine_overhead_ab.json.
#
#   bench/engine_overhead_ab.sh BUILD_DIR_A BUILD_DIR_B [ROUNDS]
#   e.g. git worktree add /tmp/base a98e51f && (cd /tmp/base && bash scripts/build.sh) &&
#        bench/engine_overhead_ab.sh /tmp/base/build build 40
set -euo pipefail
cd "$(dirname "$0")/.."
if (($# < 2)); then
  sed -n '2,10p' "$0" | sed 's/^# \{0,1\}//'
  exit 2
fi
a=$1 b=$2 rounds=${3:-30}
config=${ACTORLLM_SHARED_DIR:-../shared}/models/stories260K
for dir in "$a" "$b"; do
  [[ -x $dir/bench/bench_engine_overhead ]] || { echo "no $dir/bench/bench_engine_overhead: build it first" >&2; exit 2; }
done
out=bench/results/engine_overhead_ab.json
mkdir -p bench/results
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
args=(--config "$config" --steps-batch1 400 --steps-large 200 --prompt-len 16)
for i in $(seq 1 "$rounds"); do
  "$a/bench/bench_engine_overhead" "${args[@]}" --json "$tmp/a-$i.json" >/dev/null 2>&1
  "$b/bench/bench_engine_overhead" "${args[@]}" --json "$tmp/b-$i.json" >/dev/null 2>&1
done
python3 - "$tmp" "$rounds" "$a" "$b" "$out" <<'EOF'
import glob, json, statistics, sys
tmp, rounds, a, b, out = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5]
def per_step(side):
    by_batch = {}
    for f in glob.glob(f"{tmp}/{side}-*.json"):
        for r in json.load(open(f))["per_decode_step"]:
            by_batch.setdefault(r["batch"], []).append(r["overhead_us"])
    return by_batch
A, B = per_step("a"), per_step("b")
rows = []
print(f"engine overhead per decode step (us), {rounds} alternated runs each; A = {a}, B = {b}")
print(f"{'batch':>5}  {'A q1':>7} {'A median':>9} {'A q3':>7}  {'B q1':>7} {'B median':>9} {'B q3':>7}  {'B / A':>6}")
for batch in sorted(A):
    qa, qb = statistics.quantiles(A[batch], n=4), statistics.quantiles(B[batch], n=4)
    ratio = qb[1] / qa[1]
    print(f"{batch:>5}  {qa[0]:7.1f} {qa[1]:9.1f} {qa[2]:7.1f}  {qb[0]:7.1f} {qb[1]:9.1f} {qb[2]:7.1f}  {ratio:6.3f}")
    rows.append({"batch": batch, "a_quartiles_us": qa, "b_quartiles_us": qb, "ratio_of_medians": ratio})
json.dump({"benchmark": "engine_overhead_ab", "a": a, "b": b, "rounds": rounds, "per_decode_step": rows},
          open(out, "w"), indent=1)
print(f"wrote {out}")
EOF
