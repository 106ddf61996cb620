#!/usr/bin/env bash
# bench/compare_llama_cpp.sh's argument handling, without llama.cpp: each missing or invalid path or value is refused
# (exit 2) with a message naming it, before anything is prepared or run. Then a whole run against stand-in programs
# (shell scripts printing fixed figures in each tool's output format): the per-round ratios, medians and JSON.
#   compare_llama_cpp_test.sh SOURCE_DIR
set -uo pipefail
src=$1
script=$src/bench/compare_llama_cpp.sh
tmp=$(mktemp -d /tmp/actorllm-compare-args.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
# shellcheck source=tests/scripts/check_helpers.sh
source "$(dirname "$0")/check_helpers.sh"

refuses() { # DESCRIPTION EXPECTED_TEXT ARGS...: exit 2 and EXPECTED_TEXT on stderr
  local what=$1 expected=$2
  shift 2
  bash "$script" "$@" >"$tmp/out" 2>"$tmp/err"
  local rc=$?
  check "$what: exit 2 (got $rc)" test "$rc" -eq 2
  check "$what: says '$expected' (got: $(head -c 300 "$tmp/err"))" grep -qF -- "$expected" "$tmp/err"
  check "$what: prints nothing on stdout" test ! -s "$tmp/out"
}

refuses "no llama.cpp at all" "--llama-cpp DIR" --rounds 1
refuses "a missing llama.cpp directory" "--llama-cpp: $tmp/no-such-llama is not a directory" \
  --llama-cpp "$tmp/no-such-llama"
mkdir -p "$tmp/empty-build/bin"
refuses "a build without llama-bench" "no executable llama-bench in $tmp/empty-build/bin or $tmp/empty-build" \
  --llama-cpp "$tmp/empty-build"
printf '#!/bin/sh\nexit 0\n' >"$tmp/empty-build/bin/llama-bench"
chmod +x "$tmp/empty-build/bin/llama-bench"
refuses "a build without llama-batched-bench" "no executable llama-batched-bench in $tmp/empty-build/bin" \
  --llama-cpp "$tmp/empty-build"
refuses "a missing llama-bench path" "--llama-bench: $tmp/nope/llama-bench is not an executable file" \
  --llama-bench "$tmp/nope/llama-bench" --llama-batched-bench "$tmp/empty-build/bin/llama-bench"
printf 'not a program\n' >"$tmp/not-executable"
refuses "a llama-batched-bench that is not executable" \
  "--llama-batched-bench: $tmp/not-executable is not an executable file" \
  --llama-bench "$tmp/empty-build/bin/llama-bench" --llama-batched-bench "$tmp/not-executable"
cp "$tmp/empty-build/bin/llama-bench" "$tmp/empty-build/bin/llama-batched-bench"
refuses "a config directory without config.json" "--config: $tmp/no-config has no config.json" \
  --llama-cpp "$tmp/empty-build" --config "$tmp/no-config"
refuses "a missing tokenizer" "--tokenizer: $tmp/none.model is not a file" \
  --llama-cpp "$tmp/empty-build" --tokenizer "$tmp/none.model"
refuses "a build directory without the benches" "--build: $tmp/no-build/bench/bench_cpu_decode is missing" \
  --llama-cpp "$tmp/empty-build" --build "$tmp/no-build"
refuses "zero rounds" "--rounds: a positive integer, got '0'" --llama-cpp "$tmp/empty-build" --rounds 0
refuses "threads that are not a number" "--threads: a positive integer, got 'two'" \
  --llama-cpp "$tmp/empty-build" --threads two
refuses "a llama.cpp commit that is not hex" "--llama-cpp-commit: 7 to 40 hex digits, got 'main'" \
  --llama-cpp "$tmp/empty-build" --llama-cpp-commit main
refuses "an unknown argument" "unknown argument '--gpu'" --gpu
refuses "a flag without its value" "--rounds needs a value" --llama-cpp "$tmp/empty-build" --rounds

# ---- a run with stand-ins for both engines: 3 rounds, figures that differ per round ----
fake=$tmp/fake
mkdir -p "$fake/build/bench" "$fake/llama" "$fake/config"
echo '{}' >"$fake/config/config.json"
echo tokenizer >"$fake/tokenizer.model"
cat >"$fake/build/bench/bench_cpu_decode" <<'FAKE'
#!/usr/bin/env bash
# bench_cpu_decode's stand-in: --save-weights DIR makes DIR; otherwise writes the JSON of --json, the round counted in
# a file beside it (decode batch 1 = 3, 4, 5 tok/s over the rounds).
echo "$*" >>"$(dirname "$0")/args"
save="" json=""
while [[ $# -gt 0 ]]; do
  case $1 in --save-weights) save=$2; shift ;; --json) json=$2; shift ;; esac
  shift
done
if [[ -n $save ]]; then mkdir -p "$save"; echo '{}' >"$save/config.json"; exit 0; fi
n=$(($(cat "$(dirname "$0")/round" 2>/dev/null || echo 0) + 1))
echo "$n" >"$(dirname "$0")/round"
printf '{"memory_bandwidth_bytes_per_s": 1e10, "weight_bytes_per_token": 2000000000, "decode_batch1_tokens_per_s": %d,
 "prefill_tokens_per_s": 150, "decode_batchN_tokens_per_s": 75, "batch1_fraction_of_probe_beside": 0.9%d,
 "memory_bandwidth_best_pattern_fields": {"streams": 4, "prefetch_bytes": 512, "nta": false, "lines": 4},
 "memory_bandwidth_reference_pattern_fields": {"streams": 8, "prefetch_bytes": 0, "nta": false, "lines": 4},
 "per_round": [{"probe_passes_beside_bytes_per_s": [1e10, 5e9, 8e9], "batch1_segment_bytes_per_s": [7e9, 9e9]}]}\n' \
  $((n + 2)) "$n" >"$json"
FAKE
cat >"$fake/build/bench/bench_probe_passes" <<'FAKE'
#!/usr/bin/env bash
# bench_probe_passes' stand-in: a pass before llama-bench reads 20 GB/s, one after 25 GB/s, and in the reference
# pattern 40 GB/s before and 10 after; the JSON at end of input.
json=""
while [[ $# -gt 0 ]]; do [[ $1 == --json ]] && json=$2; shift; done
echo "ready 4-streams 30000000000"
passes=""
while read -r label pattern; do
  echo "$label $pattern" >>"$(dirname "$0")/pass_lines"
  bw=2e10
  [[ $label == *after* ]] && bw=2.5e10
  [[ $label == *before*_reference ]] && bw=4e10
  [[ $label == *after*_reference ]] && bw=1e10
  echo "$label $bw"
  passes+="${passes:+,}{\"label\": \"$label\", \"bytes_per_s\": $bw}"
done
echo "{\"passes\": [$passes]}" >"$json"
FAKE
cat >"$fake/build/bench/bench_gguf_from_hf" <<'FAKE'
#!/usr/bin/env bash
while [[ $# -gt 0 ]]; do [[ $1 == --out ]] && echo gguf >"$2"; shift; done
FAKE
cat >"$fake/llama/llama-bench" <<'FAKE'
#!/usr/bin/env bash
# llama-bench's stand-in: a pp512 row for -p 512 and a tg64 row for -n 64 (none for 0), as llama-bench skips them.
echo "$*" >>"$(dirname "$0")/args"
echo "loading model" >&2
p=0 n=0
while [[ $# -gt 0 ]]; do
  case $1 in -p) p=$2; shift ;; -n) n=$2; shift ;; esac
  shift
done
rows=()
[[ $p != 0 ]] && rows+=('{"build_commit": "abc1234", "build_number": 7, "cpu_info": "fake", "model_type": "llama 1B BF16",
  "backends": "CPU", "n_prompt": 512, "n_gen": 0, "avg_ts": 100.0}')
[[ $n != 0 ]] && rows+=('{"build_commit": "abc1234", "build_number": 7, "cpu_info": "fake", "model_type": "llama 1B BF16",
  "backends": "CPU", "n_prompt": 0, "n_gen": 64, "avg_ts": 10.0}')
(IFS=,; echo "[${rows[*]}]")
FAKE
cat >"$fake/llama/llama-batched-bench" <<'FAKE'
#!/usr/bin/env bash
echo "main: n_kv_max = 1088"
echo '{"n_kv_max": 1088, "pp": 16, "tg": 16, "pl": 32, "speed_pp": 90.0, "speed_tg": 50.0}'
FAKE
chmod +x "$fake"/build/bench/* "$fake"/llama/*
bash "$script" --llama-cpp "$fake/llama" --build "$fake/build" --config "$fake/config" --tokenizer \
  "$fake/tokenizer.model" --rounds 3 --json "$fake/out.json" >"$tmp/run.out" 2>"$tmp/run.err"
rc=$?
check "a run with stand-ins succeeds (exit $rc; $(tail -3 "$tmp/run.err" | tr "\n" " "))" test "$rc" -eq 0
check "it names llama.cpp's commit" grep -q "llama.cpp abc1234 (build 7)" "$tmp/run.out"
timed_like_tg64=$(grep -c -- '--batch1-steps 64 ' "$fake/build/bench/args")
check "each round times batch 1 over as many steps as tg64 ($timed_like_tg64 of 3)" test "$timed_like_tg64" -eq 3
check "each round's decode ratio: 3/10, 4/10, 5/10" \
  python3 -c "import json,sys; d=json.load(open('$fake/out.json'));
r=[x['decode_b1_ratio'] for x in d['per_round']]; sys.exit(0 if [round(v, 6) for v in r] == [0.3, 0.4, 0.5] else 1)"
check "the medians: decode 0.4x, prefill 1.5x, batch 1.5x, roofline 80% (4 tok/s x 2 GB / 10 GB/s)" \
  python3 -c "import json,sys; m=json.load(open('$fake/out.json'))['medians'];
ok = [round(m[k], 6) for k in ('decode_b1_ratio', 'prefill_ratio', 'decode_batch_ratio', 'actorllm_b1_of_roofline')]
sys.exit(0 if ok == [0.4, 1.5, 1.5, 0.8] else 1)"
check "the decode against the probe read beside it, per round (0.91, 0.92, 0.93) and their median" \
  python3 -c "import json,sys; d=json.load(open('$fake/out.json'));
r=[round(x['actorllm_b1_of_probe_beside'], 6) for x in d['per_round']]
sys.exit(0 if r == [0.91, 0.92, 0.93] and round(d['medians']['actorllm_b1_of_probe_beside'], 6) == 0.92 else 1)"
check "the probe's own passes beside actorllm's decode against the round's best: median 8 of 10 GB/s, every round" \
  python3 -c "import json,sys; d=json.load(open('$fake/out.json'));
r=[round(x['probe_beside_of_roofline'], 6) for x in d['per_round']]; sys.exit(0 if r == [0.8, 0.8, 0.8] else 1)"
check "actorllm's fastest segment against the round's best: 9 of 10 GB/s, every round" \
  python3 -c "import json,sys; d=json.load(open('$fake/out.json'));
r=[round(x['actorllm_b1_fastest_segment_of_roofline'], 6) for x in d['per_round']]; sys.exit(0 if r == [0.9] * 3 else 1)"
check "llama.cpp's passes read in the pattern actorllm's probe found best (4 streams of 4 lines, 512 B ahead, not nta)" \
  test "$(grep -c '^llama_tg_[a-z]*_[123] 4 512 0 4$' "$fake/build/bench/pass_lines")" -eq 6
check "and in its reference pattern too (8 streams of 4 lines), before and after, every round" \
  test "$(grep -c '^llama_tg_[a-z]*_[123]_reference 8 0 0 4$' "$fake/build/bench/pass_lines")" -eq 6
check "llama-bench runs pp512 alone, then tg64 alone, every round" \
  test "$(grep -c -- '-p 512 -n 0 ' "$fake/llama/args")" -eq 3 -a "$(grep -c -- '-p 0 -n 64 ' "$fake/llama/args")" -eq 3
check "each engine's run against the passes around it: actorllm 3, 4, 5 tok/s x 2 GB over 10 GB/s (the first and last
of its own), llama.cpp 10 tok/s x 2 GB over 40 GB/s (the highest of the four passes around llama-bench: the reference
pattern's before it), and their ratio" \
  python3 -c "import json,sys; d=json.load(open('$fake/out.json'));
got = [[round(x[k], 6) for x in d['per_round']] for k in
       ('actorllm_b1_of_passes_around', 'llama_tg_of_passes_around', 'decode_b1_ratio_same_footing')]
sys.exit(0 if got == [[0.6, 0.8, 1.0], [0.5, 0.5, 0.5], [1.2, 1.6, 2.0]] else 1)"
check "the table's median row (got: $(grep "^median" "$tmp/run.out"))" grep -qE "^median +10.00 \| +4.00 +10.00 +0.40x +80.0% +80.0% +90.0% +92.0% +200.0% +80.0% +50.0% +1.60x \| +150.00 +100.00 +1.50x \| +75.00 +50.00 +1.50x" "$tmp/run.out"
bash "$script" --llama-cpp "$fake/llama" --build "$fake/build" --config "$fake/config" --tokenizer \
  "$fake/tokenizer.model" --rounds 1 --llama-cpp-commit c392e509 --json "$fake/given.json" >"$tmp/given.out" 2>&1
rc=$?
check "a run naming llama.cpp's commit succeeds (exit $rc)" test "$rc" -eq 0
check "it prints the given commit beside what the build reports (got: $(grep "actorllm vs" "$tmp/given.out"))" \
  grep -qF "llama.cpp c392e509 (given with --llama-cpp-commit; the build reports abc1234 (build 7))" "$tmp/given.out"
check "and writes both" python3 -c "import json,sys; c=json.load(open('$fake/given.json'))['llama_cpp'];
sys.exit(0 if (c['given_commit'], c['build_commit']) == ('c392e509', 'abc1234') else 1)"
check "the temporary weights are removed" test -z "$(find /tmp -maxdepth 1 -name 'actorllm-vs-llama.*' -newer "$fake/config/config.json" 2>/dev/null)"

exit "$fail"
