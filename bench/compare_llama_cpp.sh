#!/usr/bin/env bash
# actorllm against llama.cpp on the CPU, on the same weights: a config's dummy weights written once as a safetensors
# checkpoint (bench_cpu_decode --save-weights) and as a GGUF file with the same tensor bytes (bench_gguf_from_hf),
# then, alternately for --rounds rounds: bench_cpu_decode on the checkpoint (decode batch 32, prefill 512, the memory
# bandwidth probe, then decode batch 1 over 64 steps as llama-bench's tg64 generates 64 tokens), llama.cpp's
# llama-bench on the GGUF (tg64 at once, then pp512) and its llama-batched-bench at batch 32 (16-token prompts and 16
# generated tokens per sequence, as bench_cpu_decode decodes); each engine warms up before it times. This VM's memory
# bandwidth changes state within seconds, so each engine's batch-1 decode is also held to the probe's best pattern
# read just before and just after it (bench_probe_passes runs beside llama-bench, in the pattern bench_cpu_decode's
# probe found best that round; bench_cpu_decode reads its own passes), and the ratio of those two fractions compares
# the engines on the same footing. Prints each round's figures and ratios and their medians, llama.cpp's commit,
# and writes JSON.
#
# llama.cpp is never downloaded or built by this script: point it at a build (--llama-cpp DIR: DIR/bin or DIR holds
# llama-bench and llama-batched-bench) or at the two binaries.
#
#   bench/compare_llama_cpp.sh --llama-cpp /tmp/llama.cpp/build [--config bench/configs/tinyllama-1.1b] [--rounds 5]
#       [--threads 2] [--build build] [--tokenizer ../shared/models/llama2-tokenizer/tokenizer.model]
#       [--json bench/results/compare_llama_cpp.json] [--llama-cpp-commit SHA]
#   bench/compare_llama_cpp.sh --llama-bench PATH --llama-batched-bench PATH ...
#
# llama.cpp's commit is the one its llama-bench reports; a build from a source tree without git history reports
# "unknown", and --llama-cpp-commit SHA (7 to 40 hex digits) names it instead (printed and written as given by the user).
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
me=compare_llama_cpp.sh

usage() {
  sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'
  exit "${1:-2}"
}
die() {
  echo "$me: $*" >&2
  exit 2
}

llama_dir="" llama_bench="" llama_batched="" llama_commit="" config="$repo/bench/configs/tinyllama-1.1b" rounds=5 threads=2
build="$repo/build" tokenizer="$repo/../shared/models/llama2-tokenizer/tokenizer.model"
json="$repo/bench/results/compare_llama_cpp.json"
batch=32 prompt_len=16 steps=16 prefill=512 tg=64
while [[ $# -gt 0 ]]; do
  case $1 in
    --llama-cpp | --llama-bench | --llama-batched-bench | --llama-cpp-commit | --config | --rounds | --threads | --build | \
      --tokenizer | --json)
      [[ $# -ge 2 ]] || die "$1 needs a value"
      case $1 in
        --llama-cpp) llama_dir=$2 ;;
        --llama-cpp-commit) llama_commit=$2 ;;
        --llama-bench) llama_bench=$2 ;;
        --llama-batched-bench) llama_batched=$2 ;;
        --config) config=$2 ;;
        --rounds) rounds=$2 ;;
        --threads) threads=$2 ;;
        --build) build=$2 ;;
        --tokenizer) tokenizer=$2 ;;
        --json) json=$2 ;;
      esac
      shift 2
      ;;
    -h | --help) usage 0 ;;
    *) die "unknown argument '$1' (--help lists them)" ;;
  esac
done

[[ $rounds =~ ^[1-9][0-9]*$ ]] || die "--rounds: a positive integer, got '$rounds'"
[[ $threads =~ ^[1-9][0-9]*$ ]] || die "--threads: a positive integer, got '$threads'"
[[ -z $llama_commit || $llama_commit =~ ^[0-9a-fA-F]{7,40}$ ]] ||
  die "--llama-cpp-commit: 7 to 40 hex digits, got '$llama_commit'"

# llama.cpp: a build directory, or the two binaries named one by one (either may override the directory's).
if [[ -z $llama_dir && (-z $llama_bench || -z $llama_batched) ]]; then
  die "llama.cpp is needed: --llama-cpp DIR (a llama.cpp build) or --llama-bench PATH and --llama-batched-bench PATH"
fi
if [[ -n $llama_dir ]]; then
  [[ -d $llama_dir ]] || die "--llama-cpp: $llama_dir is not a directory"
  find_tool() { # NAME: DIR/bin/NAME or DIR/NAME
    local p
    for p in "$llama_dir/bin/$1" "$llama_dir/$1"; do
      [[ -x $p && -f $p ]] && { echo "$p"; return; }
    done
    die "--llama-cpp: no executable $1 in $llama_dir/bin or $llama_dir (build the targets llama-bench and llama-batched-bench)"
  }
  [[ -n $llama_bench ]] || llama_bench=$(find_tool llama-bench) || exit 2
  [[ -n $llama_batched ]] || llama_batched=$(find_tool llama-batched-bench) || exit 2
fi
[[ -f $llama_bench && -x $llama_bench ]] || die "--llama-bench: $llama_bench is not an executable file"
[[ -f $llama_batched && -x $llama_batched ]] || die "--llama-batched-bench: $llama_batched is not an executable file"

[[ -f $config/config.json ]] || die "--config: $config has no config.json"
[[ -f $tokenizer ]] || die "--tokenizer: $tokenizer is not a file (a SentencePiece tokenizer.model)"
for b in bench_cpu_decode bench_gguf_from_hf bench_probe_passes; do
  [[ -x $build/bench/$b ]] || die "--build: $build/bench/$b is missing (cmake --build $build --target $b)"
done
command -v python3 >/dev/null || die "python3 is needed to read the benchmarks' JSON"

tmp=$(mktemp -d /tmp/actorllm-vs-llama.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
# The checkpoint is new every run, so a packed-weight cache would only gain entries nobody maps again, and the first
# round's 2.2 GB of cache pages written back to disk during the next rounds took cores from both engines (actorllm
# 59-65% of the roofline and llama.cpp 43% in rounds 2-3 of one run). Packed in memory, as llama.cpp's are loaded.
export ACTORLLM_PACKED_WEIGHT_CACHE=${ACTORLLM_PACKED_WEIGHT_CACHE:-off}

echo "== preparing the weights ($(basename "$config"), bf16 dummy weights, seed 0)" >&2
"$build/bench/bench_cpu_decode" --model "$config" --save-weights "$tmp/weights" >&2
"$build/bench/bench_gguf_from_hf" --model "$tmp/weights" --tokenizer "$tokenizer" --out "$tmp/model.gguf" >&2

# One probe pass on demand (bench/probe_passes.cpp): its buffer stays filled and its threads asleep in between.
coproc probe { "$build/bench/bench_probe_passes" --threads "$threads" --json "$tmp/passes.json" 2>"$tmp/passes.err"; }
# shellcheck disable=SC2154  # probe_PID is set by coproc
probe_in=${probe[1]} probe_out=${probe[0]} probe_pid=$probe_PID
ready=""
read -r ready _ <&"$probe_out" || true
[[ $ready == ready ]] || die "bench_probe_passes did not start: $(cat "$tmp/passes.err")"
probe_pass() { # LABEL STREAMS PREFETCH_BYTES NTA [LINES]: one pass in that pattern, recorded under LABEL in passes.json
  local answer
  echo "$*" >&"$probe_in"
  read -r answer <&"$probe_out" || die "bench_probe_passes stopped: $(cat "$tmp/passes.err")"
  [[ $answer != error* ]] || die "bench_probe_passes: $answer"
}

for ((r = 1; r <= rounds; ++r)); do
  # actorllm's batch 1 ends its run and llama.cpp's tg64 follows at once (about 2 s apart, where the other
  # measurements between them had put about 12 s): this VM's bandwidth state changes within seconds, and the two
  # batch-1 runs should meet the same one as often as they can.
  echo "== round $r/$rounds: bench_cpu_decode (b$batch, prefill $prefill, then bandwidth probe and decode b1)" >&2
  "$build/bench/bench_cpu_decode" --model "$tmp/weights" --threads "$threads" --rounds 1 --batch "$batch" \
    --prompt-len "$prompt_len" --decode-steps "$steps" --batch1-steps "$tg" --prefill-tokens "$prefill" \
    --batch1-last --json "$tmp/actorllm.$r.json" >"$tmp/actorllm.$r.txt"
  # In the pattern actorllm's probe found best this round and in its reference pattern (the higher kept, as
  # bench_cpu_decode keeps beside its decode), so that both engines are held to the same reads.
  patterns=$(python3 -c 'import json, sys
d = json.load(open(sys.argv[1]))
for key in ("memory_bandwidth_best_pattern_fields", "memory_bandwidth_reference_pattern_fields"):
    f = d.get(key)
    if f is not None:
        print(f["streams"], f["prefetch_bytes"], int(f["nta"]), f.get("lines", 1))' "$tmp/actorllm.$r.json") ||
    die "bench_cpu_decode wrote no best read pattern (round $r)"
  pattern=$(sed -n 1p <<<"$patterns")
  reference=$(sed -n 2p <<<"$patterns")
  [[ -n $pattern ]] || die "bench_cpu_decode wrote no best read pattern (round $r)"
  echo "== round $r/$rounds: llama-bench (tg$tg between two probe passes; then pp$prefill)" >&2
  probe_pass "llama_tg_before_$r" "$pattern"
  [[ -z $reference ]] || probe_pass "llama_tg_before_${r}_reference" "$reference"
  "$llama_bench" -m "$tmp/model.gguf" -p 0 -n "$tg" -t "$threads" -r 1 -o json \
    >"$tmp/llama_bench_tg.$r.json" 2>"$tmp/llama_bench.$r.err" ||
    {
      tail -20 "$tmp/llama_bench.$r.err" >&2
      die "llama-bench failed (round $r, tg$tg)"
    }
  probe_pass "llama_tg_after_$r" "$pattern"
  [[ -z $reference ]] || probe_pass "llama_tg_after_${r}_reference" "$reference"
  "$llama_bench" -m "$tmp/model.gguf" -p "$prefill" -n 0 -t "$threads" -r 1 -o json \
    >"$tmp/llama_bench_pp.$r.json" 2>"$tmp/llama_bench.$r.err" ||
    {
      tail -20 "$tmp/llama_bench.$r.err" >&2
      die "llama-bench failed (round $r, pp$prefill)"
    }
  echo "== round $r/$rounds: llama-batched-bench (batch $batch)" >&2
  "$llama_batched" -m "$tmp/model.gguf" -c $((batch * (prompt_len + steps) + 64)) -npp "$prompt_len" -ntg "$steps" \
    -npl "$batch" -t "$threads" --output-format jsonl >"$tmp/llama_batched.$r.jsonl" 2>"$tmp/llama_batched.$r.err" ||
    {
      tail -20 "$tmp/llama_batched.$r.err" >&2
      die "llama-batched-bench failed (round $r)"
    }
done

exec {probe_in}>&- # end of input: the helper writes passes.json and exits
wait "$probe_pid" || die "bench_probe_passes failed: $(cat "$tmp/passes.err")"

mkdir -p "$(dirname "$json")"
python3 - "$tmp" "$rounds" "$json" "$config" "$threads" "$batch" "$prefill" "$tg" "$llama_commit" <<'EOF'
import json, statistics, sys

tmp, rounds, out, config, threads, batch, prefill, tg, given_commit = sys.argv[1:]
rounds, threads, batch, prefill, tg = int(rounds), int(threads), int(batch), int(prefill), int(tg)

def llama_bench_rate(rows, n_prompt, n_gen):
    for row in rows:
        if row["n_prompt"] == n_prompt and row["n_gen"] == n_gen:
            return row["avg_ts"]
    sys.exit(f"compare_llama_cpp.sh: llama-bench reported no test with n_prompt {n_prompt}, n_gen {n_gen}")

passes = {p["label"]: p["bytes_per_s"] for p in json.load(open(f"{tmp}/passes.json"))["passes"]}
per_round, commit = [], {}
for r in range(1, rounds + 1):
    a = json.load(open(f"{tmp}/actorllm.{r}.json"))
    lb = json.load(open(f"{tmp}/llama_bench_pp.{r}.json")) + json.load(open(f"{tmp}/llama_bench_tg.{r}.json"))
    batched = [json.loads(line) for line in open(f"{tmp}/llama_batched.{r}.jsonl") if line.strip().startswith("{")]
    batched = [b for b in batched if b.get("pl") == batch]
    if not batched:
        sys.exit(f"compare_llama_cpp.sh: llama-batched-bench reported no batch {batch} (round {r})")
    commit = {k: lb[0].get(k) for k in ("build_commit", "build_number", "cpu_info", "model_type", "backends")}
    bw = a["memory_bandwidth_bytes_per_s"]
    bytes_per_token = a["weight_bytes_per_token"]
    row = {
        "memory_bandwidth_bytes_per_s": bw,
        "actorllm_decode_b1": a["decode_batch1_tokens_per_s"],
        "llama_tg": llama_bench_rate(lb, 0, tg),
        "actorllm_prefill": a["prefill_tokens_per_s"],
        "llama_pp": llama_bench_rate(lb, prefill, 0),
        "actorllm_decode_batch": a["decode_batchN_tokens_per_s"],
        "llama_batched_tg": batched[0]["speed_tg"],
    }
    row["actorllm_b1_of_roofline"] = row["actorllm_decode_b1"] * bytes_per_token / bw
    # The decode against the probe's best pattern read just before and after each of its segments (bench_cpu_decode,
    # bench/paired_roofline.hpp): the round's probe and decode, seconds apart, can see different bandwidth states.
    row["actorllm_b1_of_probe_beside"] = a["batch1_fraction_of_probe_beside"]
    # The probe's own passes beside the decode (their median) against the round's probe best: what the probe itself
    # read of its best seconds later, the ceiling a reader that holds for seconds meets in this state.
    row["probe_beside_of_roofline"] = (statistics.median(a["per_round"][0]["probe_passes_beside_bytes_per_s"]) / bw)
    # actorllm's fastest segment of batch-1 decode (8 steps) against the round's probe best: what the decode read while
    # the machine was at its fastest during it.
    row["actorllm_b1_fastest_segment_of_roofline"] = max(a["per_round"][0]["batch1_segment_bytes_per_s"]) / bw
    row["llama_tg_of_roofline"] = row["llama_tg"] * bytes_per_token / bw
    # Each engine's whole batch-1 run against the higher of the passes read just before and just after it: llama.cpp's
    # around its llama-bench process (bench_probe_passes), actorllm's the first and last of those it reads beside its
    # decode. Their ratio compares the engines as if each had run in the other's bandwidth state.
    a_passes = a["per_round"][0]["probe_passes_beside_bytes_per_s"]
    row["actorllm_b1_of_passes_around"] = (row["actorllm_decode_b1"] * bytes_per_token /
                                           max(a_passes[0], a_passes[-1]))
    around = [passes[label] for label in (f"llama_tg_before_{r}", f"llama_tg_after_{r}",
                                          f"llama_tg_before_{r}_reference", f"llama_tg_after_{r}_reference")
              if label in passes]
    row["llama_tg_of_passes_around"] = row["llama_tg"] * bytes_per_token / max(around)
    row["decode_b1_ratio_same_footing"] = row["actorllm_b1_of_passes_around"] / row["llama_tg_of_passes_around"]
    row["decode_b1_ratio"] = row["actorllm_decode_b1"] / row["llama_tg"]
    row["prefill_ratio"] = row["actorllm_prefill"] / row["llama_pp"]
    row["decode_batch_ratio"] = row["actorllm_decode_batch"] / row["llama_batched_tg"]
    per_round.append(row)

med = {k: statistics.median(row[k] for row in per_round) for k in per_round[0]}
named = f"{commit['build_commit']} (build {commit['build_number']})"
if given_commit:
    commit["given_commit"] = given_commit
    named = f"{given_commit} (given with --llama-cpp-commit; the build reports {named})"
print(f"actorllm vs llama.cpp {named}, "
      f"{config.rstrip('/').split('/')[-1]}, same bf16 bytes, {threads} threads, {rounds} alternated rounds")
print(f"cpu: {commit['cpu_info']}; llama.cpp model type: {commit['model_type']}")
print("a: actorllm (bench_cpu_decode), l: llama.cpp (llama-bench, llama-batched-bench); tokens/s")
head = (f"{'round':>6} {'GB/s':>7} | {'a b1':>8} {'l tg'+str(tg):>8} {'ratio':>6} {'a/BW':>6} {'p/BW':>6} {'a^/BW':>6} {'a/bsd':>6} "
        f"{'l/BW':>6} {'a/arn':>6} {'l/arn':>6} {'ratio':>6} | "
        f"{'a pp'+str(prefill):>9} {'l pp'+str(prefill):>8} {'ratio':>6} | {'a b'+str(batch):>8} "
        f"{'l b'+str(batch):>8} {'ratio':>6}")
print(head)
print("-" * len(head))
def line(label, x):
    print(f"{label:>6} {x['memory_bandwidth_bytes_per_s']/1e9:7.2f} | {x['actorllm_decode_b1']:8.2f} "
          f"{x['llama_tg']:8.2f} {x['decode_b1_ratio']:5.2f}x {100*x['actorllm_b1_of_roofline']:5.1f}% "
          f"{100*x['probe_beside_of_roofline']:5.1f}% {100*x['actorllm_b1_fastest_segment_of_roofline']:5.1f}% "
          f"{100*x['actorllm_b1_of_probe_beside']:5.1f}% "
          f"{100*x['llama_tg_of_roofline']:5.1f}% {100*x['actorllm_b1_of_passes_around']:5.1f}% "
          f"{100*x['llama_tg_of_passes_around']:5.1f}% {x['decode_b1_ratio_same_footing']:5.2f}x "
          f"| {x['actorllm_prefill']:9.2f} {x['llama_pp']:8.2f} "
          f"{x['prefill_ratio']:5.2f}x | {x['actorllm_decode_batch']:8.2f} {x['llama_batched_tg']:8.2f} "
          f"{x['decode_batch_ratio']:5.2f}x")
for i, x in enumerate(per_round, 1):
    line(str(i), x)
print("-" * len(head))
line("median", med)
print("ratio: a / l (the median row: medians of the per-round ratios); a/BW, l/BW: batch-1 decode as a fraction of "
      "the roofline, the round's probed read bandwidth over the weight bytes read per token; p/BW: the probe's own "
      "passes read beside actorllm's decode (their median) against the round's probe best; a^/BW: actorllm's fastest "
      "segment of batch-1 decode against it; a/bsd: actorllm's "
      "decode against the probe's best pattern read beside it (each segment of 8 steps against the higher of the "
      "passes just before and after it; the median over segments); a/arn, l/arn: each engine's whole batch-1 run "
      "against the higher of the probe passes read just before and just after it, and their ratio")

result = {
    "benchmark": "compare_llama_cpp",
    "model": config,
    "threads": threads,
    "rounds": rounds,
    "decode_batch": batch,
    "prefill_tokens": prefill,
    "llama_tg_tokens": tg,
    "llama_cpp": commit,
    "medians": med,
    "per_round": per_round,
}
with open(out, "w") as f:
    json.dump(result, f, indent=2)
    f.write("\n")
print(f"wrote {out}", file=sys.stderr)
EOF
