#!/usr/bin/env bash
# The one command for a GPU machine (x86-64 with an H100 or H200, nvcc, PyTorch and transformers, no network, none
# of our Debian libraries). Unpacks the bundle scripts/gpu_bundle.sh built on a development machine, finds the CUDA
# libraries there, and runs, each step under its own time limit, the whole within 8 minutes:
#   probe      the GPU, driver and libraries
#   sanitize   compute-sanitizer memcheck over the GPU tests at small shapes; racecheck and synccheck over every
#              attention and sampling case
#   parity     every backend op on CUDA against float64 references, and the kernel tests
#   sampling   the GPU sampler against cpu::sample: greedy identical, seeded draws and random streams identical over
#              successive steps, logprobs within tolerance, chi-square over 1e5 seeded draws ("cuda sample:" cases)
#   allreduce  the custom all-reduce across two processes (CUDA IPC; one GPU shared, or two GPUs): bit-equal to
#              the rank-order host sum, both shots, f32 and bf16, odd sizes
#   golden     stories260K greedy ids on CUDA (f32) equal the golden file, with CUDA graphs and eager
#   layouts    tp 2, pp 2 and tp 2 x pp 2 sharing the one GPU, in-process and multi-process: the same ids
#   nccl       the NCCL communicator's GPU tests (test_cuda "nccl*"); the cases that need 2 GPUs say so on one, and
#              with 2 or more `actorllm check` runs over a one-node cluster of this machine
#   8b         CUDA bf16 against the CPU on identical dummy weights at Llama-3.1-8B shape: top-1 agreement
#   bench      copy bandwidth, the quantized GEMV's weight bytes per second at the 8B shapes (int4 g128, int8;
#              bar 90% of copy on the large shapes at 1 token), batch-1 decode vs the roofline (eager, and with CUDA
#              graphs: bar 85%), engine output tokens/s at b64/b256 128/128 and b64 1024/1024, and batch-1 decode
#              under the bf16 GEMV's size rule against the cap a single-call sweep favoured (ACTORLLM_GEMV)
#   profile    ncu's gpu__time_duration and DRAM bytes (clocks and caches left as they are) over one batch-1 and one
#              batch-64 decode step at the 8B shape: a table per kernel kind (count, time, share, bytes over time)
#   serve      `actorllm serve` of the 8B shape (dummy weights, the bundle's Llama 3 tokenizer) loaded by
#              `actorllm bench serve`: 512-token prompts, 128 out, concurrency 1, 16 and 64: TTFT, TPOT, tokens/s
#   hf         transformers `generate` on the same shapes as bench, same run
# and prints one summary table last (result and seconds per step). A step that runs past its limit is reported
# TIMEOUT and the rest go on; the limits shrink to what is left of the whole run's budget (8 minutes; --quick 3).
# OUTDIR gets at most 7 files (what the device tool brings back): env.json, tests.log, bench.log, bench.json,
# hf.json, summary.txt, summary.json. Exit 0 only when every step passes; 77 when there is no GPU (every step then
# says "SKIP no GPU" after the probe). It never changes clocks, modes or MIG and never resets the GPU.
#
#   bash scripts/gpu_check.sh OUTDIR [STEP ...]     # steps by name; default: all, in the order above
#   bash scripts/gpu_check.sh --quick OUTDIR        # probe, parity, golden, sampling and the batch-1 bench (3 minutes)
#   ACTORLLM_GPU_ROOT=DIR bash scripts/gpu_check.sh ...  # run from an unpacked bundle's layout instead of the
#                                                    # bundle (scripts/gpu_root.sh makes one from a build here)
set -uo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
all_steps=(probe sanitize parity sampling allreduce golden layouts nccl 8b bench profile serve hf)
quick=0
if [[ "${1:-}" == --quick ]]; then
  quick=1
  shift
fi
out=${1:-${OUT:-/tmp/gpu-check}}
shift || true
steps=("$@")
if ((quick)); then
  ((${#steps[@]} == 0)) || {
    echo "gpu_check: --quick runs its own steps (probe parity golden sampling bench); name no steps with it" >&2
    exit 2
  }
  steps=(probe parity golden sampling bench)
fi
((${#steps[@]})) || steps=("${all_steps[@]}")
for s in "${steps[@]}"; do
  [[ " ${all_steps[*]} " == *" $s "* ]] || {
    echo "gpu_check: unknown step '$s' (steps: ${all_steps[*]})" >&2
    exit 2
  }
done
mkdir -p "$out"

# The time budget: the whole run (8 minutes; --quick 3), and each step's own limit, cut to what is left of the
# whole. Seconds; ACTORLLM_GPU_CHECK_SECONDS overrides the whole.
budget=${ACTORLLM_GPU_CHECK_SECONDS:-$((quick ? 180 : 480))}
declare -A limit=([probe]=20 [sanitize]=100 [parity]=45 [sampling]=30 [allreduce]=30 [golden]=20 [layouts]=30
  [nccl]=25 [8b]=60 [bench]=75 [profile]=60 [serve]=60 [hf]=60)
((quick)) && limit[bench]=45
started=$SECONDS
step_limit() { # name -> the seconds this step may take now (at least 1)
  local left=$((budget - (SECONDS - started)))
  local l=${limit[$1]}
  ((left < l)) && l=$left
  ((l < 1)) && l=1
  echo "$l"
}
# Runs a command under a limit (SIGTERM, then SIGKILL 5 s later); returns its status, 124 when it ran out of time.
limited() { # seconds cmd...
  local s=$1
  shift
  timeout --kill-after=5 "$s" "$@"
  local rc=$?
  ((rc == 137)) && rc=124
  return $rc
}

if [[ -n "${ACTORLLM_GPU_ROOT:-}" ]]; then
  root=$ACTORLLM_GPU_ROOT
  [[ -x "$root/bin/gpu_probe" ]] || {
    echo "gpu_check: $root is not a bundle's layout (no bin/gpu_probe; scripts/gpu_root.sh makes one)" >&2
    exit 2
  }
  work=$(mktemp -d /tmp/actorllm-gpu.XXXXXX)
  trap 'rm -rf "$work"' EXIT
else
  bundle=${ACTORLLM_GPU_BUNDLE:-$here/.gpu-bundle/actorllm-gpu.tar.xz}
  [[ -f "$bundle" ]] || {
    echo "gpu_check: no bundle at $bundle (build it on a development machine: bash scripts/gpu_bundle.sh)" >&2
    exit 2
  }
  work=$(mktemp -d /tmp/actorllm-gpu.XXXXXX)
  trap 'rm -rf "$work"' EXIT
  tar -C "$work" -xJf "$bundle"
  root=$work/actorllm-gpu
fi
bin=$root/bin
# The test binaries find stories260K (the decode-graph golden cases) in the bundle, not at the build machine's path.
export ACTORLLM_SHARED=$root

# cuBLAS (and cuBLASLt) and NCCL from the CUDA toolkit or PyTorch's nvidia-* wheels (nvidia/nccl/lib for NCCL); our
# own libraries first. The binaries link libnccl.so.2 (built against NCCL 2.28.9 headers; the wheel's version is
# recorded in env.json and printed by the nccl step).
find_lib() {
  local dirs=("${CUDA_HOME:-/usr/local/cuda}/lib64" /usr/local/cuda/lib64 /usr/lib/x86_64-linux-gnu)
  mapfile -t -O "${#dirs[@]}" dirs < <(python3 -c 'import site; print("\n".join(site.getsitepackages()))' 2>/dev/null)
  for d in "${dirs[@]}"; do
    [[ -d "$d" ]] && find "$d/" -maxdepth 5 -name "$1" 2>/dev/null | head -1
  done | head -1
}
cublas=$(find_lib 'libcublas.so.13*')
cublaslt=$(find_lib 'libcublasLt.so.13*')
nccl=$(find_lib 'libnccl.so.2*')
libpath=$root/lib
for l in "$cublas" "$cublaslt" "$nccl"; do
  [[ -n "$l" ]] && libpath=$libpath:$(dirname "$l")
done
export LD_LIBRARY_PATH=$libpath${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}

# The custom all-reduce's GPU cases (two worker processes each): the allreduce step runs them, the others leave them.
car_cases='custom all-reduce: two processes*'
declare -a names=() results=() details=() seconds=()
record() { # name PASS|FAIL|SKIP|TIMEOUT detail
  names+=("$1")
  results+=("$2")
  details+=("$3")
  seconds+=("$((SECONDS - step_started))")
  echo "== $1: $2 $3"
}
wants() {
  local s
  for s in "${steps[@]}"; do [[ "$s" == "$1" ]] && return 0; done
  return 1
}
# FAIL, or TIMEOUT when the status says the step's limit ran out.
failed() { # rc limit -> result word and its detail prefix
  if (($1 == 124)); then echo "TIMEOUT after $2 s:"; else echo "FAIL rc $1:"; fi
}
record_failure() { # name rc limit detail
  local f
  f=$(failed "$2" "$3")
  record "$1" "${f%% *}" "${f#* } $4"
}

# ---- probe -------------------------------------------------------------------------------------------------------
gpu_ok=0
step_probe() {
  echo "== probe"
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm,clocks.mem --format=csv \
    >"$work/nvidia-smi.txt" 2>&1
  cat "$work/nvidia-smi.txt"
  missing=$(for b in "$bin"/*; do ldd "$b" | grep 'not found'; done | sort -u)
  limited "$1" "$bin/gpu_probe" >"$work/probe.txt" 2>&1
  probe_rc=$?
  python3 - "$out/env.json" "$cublas" "$cublaslt" "$root" "$nccl" <<'PY'
import json, os, platform, subprocess, sys
commit = os.path.join(sys.argv[4], "COMMIT")
env = {"uname": platform.uname()._asdict(), "glibc": platform.libc_ver()[1], "cublas": sys.argv[2],
       "cublasLt": sys.argv[3], "nccl": sys.argv[5],
       "bundle_commit": open(commit).read().strip() if os.path.exists(commit) else "unknown"}
try:
    env["nvidia_smi"] = subprocess.run(["nvidia-smi", "-q"], capture_output=True, text=True).stdout[:20000]
except Exception as e:  # noqa: BLE001
    env["nvidia_smi"] = str(e)
try:
    import torch, transformers
    env["torch"] = torch.__version__
    env["transformers"] = transformers.__version__
    env["torch_cuda"] = torch.version.cuda
    p = torch.cuda.get_device_properties(0)
    env["gpu"] = {"name": p.name, "sm_count": p.multi_processor_count, "memory": p.total_memory}
except Exception as e:  # noqa: BLE001
    env["torch_error"] = str(e)
json.dump(env, open(sys.argv[1], "w"), indent=1)
PY
  if ((probe_rc == 77)); then
    record probe SKIP "$(head -1 "$work/probe.txt")"
  elif [[ $probe_rc -ne 0 || -n "$missing" || -z "$cublas" || -z "$nccl" ]]; then
    gpu_ok=$((probe_rc == 0))
    record_failure probe "$probe_rc" "$1" "gpu_probe; unresolved: ${missing:-none}; cublas: ${cublas:-not found}; nccl: ${nccl:-not found}"
  else
    gpu_ok=1
    record probe PASS "$(head -1 "$work/probe.txt"); cublas $(basename "$cublas"); nccl $(basename "$nccl")"
  fi
}

# ---- sanitize ----------------------------------------------------------------------------------------------------
# memcheck over test_cuda's cases and the backend parity cases; racecheck and synccheck over the attention and
# sampling kernels (every case of both; the chi-square case's 1e5 draws left to the sampling step). The custom
# all-reduce's two-process cases run in their own step (memcheck across CUDA IPC with spinning barriers is
# unverified), and NCCL's stay out (its kernels and proxy threads are not ours; the nccl step runs them).
step_sanitize() {
  if ! command -v compute-sanitizer >/dev/null; then
    record sanitize SKIP "no compute-sanitizer on this machine"
    return
  fi
  local lim=$1 deadline=$((SECONDS + $1)) rc=0 r tool left errors
  local kernels='*paged_attention*,cuda write_kv*,cuda sample: random*,cuda sample: greedy*,cuda sample: three*'
  local -a runs=(
    "memcheck|$bin/test_cuda|--test-case-exclude=$car_cases,nccl*,cuda sample: 1e5*"
    "memcheck|$bin/test_kernels|--test-case=*on cuda*"
    "racecheck|$bin/test_cuda|--test-case=$kernels"
    "synccheck|$bin/test_cuda|--test-case=$kernels")
  : >"$work/sanitize.log"
  for r in "${runs[@]}"; do
    IFS='|' read -r tool binary filter <<<"$r"
    left=$((deadline - SECONDS))
    if ((left < 1)); then
      rc=124
      break
    fi
    echo "== compute-sanitizer --tool $tool $(basename "$binary") $filter" >>"$work/sanitize.log"
    limited "$left" compute-sanitizer --tool "$tool" --error-exitcode 99 "$binary" "$filter" >>"$work/sanitize.log" 2>&1
    r=$?
    ((r != 0 && rc == 0)) && rc=$r
    ((r == 124)) && break
  done
  cat "$work/sanitize.log" >>"$out/tests.log"
  # memcheck and synccheck end with "ERROR SUMMARY: N errors"; racecheck with "RACECHECK SUMMARY: N hazards
  # displayed (E errors, W warnings)", and its warnings (a read and a write of shared memory with no barrier
  # between them) are races too.
  errors=$(grep -ho 'ERROR SUMMARY: [0-9]* error' "$work/sanitize.log" | awk '{s += $3} END {print s + 0}')
  hazards=$(grep -ho '([0-9]* errors, [0-9]* warnings)' "$work/sanitize.log" | tr -d '(,' |
    awk '{s += $1 + $3} END {print s + 0}')
  errors=$((errors + hazards))
  if ((rc == 0 && errors == 0)); then
    record sanitize PASS "memcheck (test_cuda, parity cases), racecheck and synccheck (attention, sampling): $errors errors"
  else
    record_failure sanitize "$rc" "$lim" "$errors errors and race hazards reported (tests.log)"
  fi
}

# ---- parity ------------------------------------------------------------------------------------------------------
step_parity() {
  local deadline=$((SECONDS + $1)) rc1 rc2
  {
    limited "$1" "$bin/test_kernels" '--test-case=*on cuda*'
    rc1=$?
    limited "$(((deadline - SECONDS) > 1 ? deadline - SECONDS : 1))" "$bin/test_cuda" \
      "--test-case-exclude=cuda sample:*,$car_cases,nccl*"
    rc2=$?
  } >"$work/parity.log" 2>&1
  cat "$work/parity.log" >>"$out/tests.log"
  cases=$(grep -h 'test cases:' "$work/parity.log" | tr '\n' ' ')
  if [[ $rc1 -eq 0 && $rc2 -eq 0 ]] && ! grep -q 'skipped: no GPU' "$work/parity.log"; then
    record parity PASS "$cases"
  else
    record_failure parity "$((rc1 == 124 || rc2 == 124 ? 124 : rc1 | rc2))" "$1" "$rc1 / $rc2: $cases"
  fi
}

# ---- sampling ----------------------------------------------------------------------------------------------------
step_sampling() {
  limited "$1" "$bin/test_cuda" '--test-case=cuda sample:*' >"$work/sampling.log" 2>&1
  local rc=$?
  cat "$work/sampling.log" >>"$out/tests.log"
  cases=$(grep -h 'test cases:' "$work/sampling.log" | tr '\n' ' ')
  chi=$(grep -ho 'chi-square [0-9.e+-]* (threshold [0-9.e+-]*)' "$work/sampling.log" | tr '\n' ';')
  if [[ $rc -eq 0 ]] && grep -q 'test cases: *[1-9][0-9]* | *[1-9]' "$work/sampling.log" &&
    ! grep -q 'skipped: no GPU' "$work/sampling.log"; then
    record sampling PASS "$cases $chi"
  else
    record_failure sampling "$rc" "$1" "$cases (tests.log)"
  fi
}

# ---- allreduce ---------------------------------------------------------------------------------------------------
# test_cuda starts itself twice as worker processes that meet through a directory and map each other's buffers.
step_allreduce() {
  limited "$1" "$bin/test_cuda" "--test-case=$car_cases" >"$work/allreduce.log" 2>&1
  local rc=$?
  cat "$work/allreduce.log" >>"$out/tests.log"
  cases=$(grep -h 'test cases:' "$work/allreduce.log" | tr '\n' ' ')
  if [[ $rc -eq 0 ]] && ! grep -q 'skipped: no GPU' "$work/allreduce.log" &&
    grep -q 'test cases: *[1-9]' "$work/allreduce.log"; then
    record allreduce PASS "$cases"
  else
    record_failure allreduce "$rc" "$1" "$cases (tests.log)"
  fi
}

# ---- golden and layouts ------------------------------------------------------------------------------------------
stories=$root/models/stories260K
golden_ids() { # seconds extra-args... -> prints the ids as JSON, or nothing; returns generate's status
  local s=$1
  shift
  limited "$s" "$bin/actorllm" generate --model "$stories" --prompt-ids 1 --max-tokens 256 --temperature 0 \
    --ignore-eos --output json "$@" 2>>"$out/tests.log" | tail -1
  return "${PIPESTATUS[0]}"
}
compare_golden() { # json -> exit 0 when equal
  python3 - "$1" "$stories/reference/expected_outputs.json" <<'PY'
import json, sys
got = json.loads(sys.argv[1])["output_ids"]
want = json.load(open(sys.argv[2]))["greedy_from_bos"]["output_ids"]
n = next((i for i, (a, b) in enumerate(zip(got, want)) if a != b), None)
if got == want:
    sys.exit(0)
print(f"first difference at {n}: got {got[n] if n is not None else len(got)} want {want[n] if n is not None else len(want)}")
sys.exit(1)
PY
}
left_of() { # deadline -> seconds left, at least 1
  local l=$(($1 - SECONDS))
  echo $((l < 1 ? 1 : l))
}
step_golden() {
  # By default batch-1 decode steps replay a CUDA graph (generate runs max_num_seqs 1); --enforce-eager runs them
  # eagerly. Both must give the golden ids.
  local deadline=$((SECONDS + $1)) ids eager_ids rc1 rc2 why=""
  ids=$(golden_ids "$(left_of $deadline)" --device cuda --dtype float32)
  rc1=$?
  eager_ids=$(golden_ids "$(left_of $deadline)" --device cuda --dtype float32 --enforce-eager)
  rc2=$?
  if [[ -n "$ids" ]] && why=$(compare_golden "$ids") && [[ -n "$eager_ids" ]] && why=$(compare_golden "$eager_ids"); then
    record golden PASS "stories260K CUDA f32: 256 greedy ids equal the golden, with CUDA graphs and with --enforce-eager"
  elif ((rc1 == 124 || rc2 == 124)); then
    record golden TIMEOUT "after $1 s"
  else
    record golden FAIL "stories260K CUDA f32: ${why:-no output (rc $rc1 / $rc2, tests.log)}"
  fi
}
step_layouts() {
  local deadline=$((SECONDS + $1)) fails="" timed_out=0 ids run why
  # Shards sharing the one GPU run in-process (uni; the mp executor, like vLLM, wants a GPU per worker): tp 2, pp 2
  # and 2 x 2. The mp executor's worker path on the GPU: one worker process.
  gpus=$(nvidia-smi -L 2>/dev/null | wc -l)
  local -a runs=("-tp 2 --distributed-executor-backend uni" "-pp 2 --distributed-executor-backend uni"
    "-tp 2 -pp 2 --distributed-executor-backend uni" "--distributed-executor-backend mp")
  ((gpus >= 2)) && runs+=("-tp 2 --distributed-executor-backend mp")
  ((gpus >= 4)) && runs+=("-tp 2 -pp 2 --distributed-executor-backend mp")
  for run in "${runs[@]}"; do
    # shellcheck disable=SC2086
    ids=$(golden_ids "$(left_of $deadline)" --device cuda --dtype float32 $run)
    (($? == 124)) && timed_out=1
    if [[ -z "$ids" ]] || ! why=$(compare_golden "$ids"); then
      fails="$fails [$run: ${why:-no output}]"
    fi
  done
  if [[ -z "$fails" ]]; then
    record layouts PASS "${#runs[@]} layouts on $gpus GPU(s): golden ids"
  elif ((timed_out)); then
    record layouts TIMEOUT "after $1 s:$fails"
  else
    record layouts FAIL "$fails"
  fi
}

# `actorllm check` over a one-node cluster of this machine with N CPU slices (a head and one agent on loopback,
# stopped again): prints the check's tables, returns its status (2 when the cluster did not come up).
local_cluster_check() { # actorllm N seconds
  local actorllm=$1 n=$2 token address="" head_pid node_pid rc
  token=$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')
  "$actorllm" node --head --host 127.0.0.1 --port 0 --cpu-devices 0 --cluster-token "$token" >"$work/head.log" 2>&1 &
  head_pid=$!
  for _ in $(seq 100); do
    address=$(grep -oE 'Cluster head listening on [0-9.]+:[0-9]+' "$work/head.log" | awk '{print $5}')
    [[ -n "$address" ]] && break
    sleep 0.1
  done
  if [[ -z "$address" ]]; then
    kill "$head_pid" 2>/dev/null
    cat "$work/head.log"
    return 2
  fi
  "$actorllm" node --join "$address" --host 127.0.0.1 --cpu-devices "$n" --node-id gpu-node --cluster-token "$token" \
    >"$work/node.log" 2>&1 &
  node_pid=$!
  for _ in $(seq 100); do
    "$actorllm" status --address "$address" --cluster-token "$token" 2>/dev/null | grep -q ': 1 node(s)' && break
    sleep 0.1
  done
  limited "$3" "$actorllm" check --address "$address" --cluster-token "$token"
  rc=$?
  kill "$node_pid" "$head_pid" 2>/dev/null
  wait "$node_pid" "$head_pid" 2>/dev/null
  return $rc
}

# ---- nccl --------------------------------------------------------------------------------------------------------
step_nccl() {
  local deadline=$((SECONDS + $1)) rc check_rc=0
  limited "$1" "$bin/test_cuda" '--test-case=nccl*' >"$work/nccl.log" 2>&1
  rc=$?
  cat "$work/nccl.log" >>"$out/tests.log"
  gpus=$(nvidia-smi -L 2>/dev/null | wc -l)
  cases=$(grep -h 'test cases:' "$work/nccl.log" | tr -s ' ')
  needs2=$(grep -c 'skipped: needs 2 GPUs' "$work/nccl.log")
  detail="$gpus GPU(s): $cases; $needs2 case(s) needing 2 GPUs skipped"
  # With 2 or more GPUs, `actorllm check` on a one-node cluster of this machine (one CPU slice per GPU: a worker
  # takes the GPU of its slice) measures Gloo, NCCL and the custom all-reduce; its tables go to tests.log.
  if ((gpus >= 2 && rc == 0)); then
    local_cluster_check "$bin/actorllm" "$((gpus > 8 ? 8 : gpus))" "$(left_of $deadline)" >"$work/check.txt" 2>&1
    check_rc=$?
    cat "$work/check.txt" >>"$out/tests.log"
    detail="$detail; actorllm check rc $check_rc: $(grep -E '^(All checks passed|CHECK FAILED)' "$work/check.txt")"
    grep -q 'NCCL: skipped' "$work/check.txt" && ((check_rc == 0)) && check_rc=1 && detail="$detail (NCCL skipped)"
  fi
  if [[ $rc -eq 0 && $check_rc -eq 0 ]] && ! grep -q 'skipped: no GPU' "$work/nccl.log"; then
    record nccl PASS "$detail"
  else
    record_failure nccl "$((rc == 124 || check_rc == 124 ? 124 : rc | check_rc))" "$1" "$detail (tests.log)"
  fi
}

# ---- 8b and bench: one bench_gpu run when both are asked (one load of the 8B dummy weights) ----------------------
bench_rc=""
run_bench_gpu() { # seconds
  # b64 and b256 at 128/128, and b64 at 1024/1024 (34 s on an H200): b256 at 1024/1024 took 133 s and is left out.
  local -a args=(--config "$root/configs/llama-3.1-8b" --json "$out/bench.json" --cases 64x128x128 256x128x128
    64x1024x1024)
  wants 8b && args+=(--parity)
  if ! wants bench || ((quick)); then
    args+=(--no-throughput --no-gemv)
  fi
  echo "== bench_gpu ${args[*]}" >>"$out/bench.log"
  limited "$1" "$bin/bench_gpu" "${args[@]}" 2>&1 | tee -a "$out/bench.log"
  bench_rc=${PIPESTATUS[0]}
}
step_8b() {
  if [[ -z "$bench_rc" ]]; then
    local l=$1
    wants bench && l=$((l + $(step_limit bench)))
    run_bench_gpu "$l"
  fi
  if [[ $bench_rc -ne 0 || ! -f "$out/bench.json" ]]; then
    record_failure 8b "$bench_rc" "$1" "bench_gpu (bench.log)"
    return
  fi
  verdict=$(python3 - "$out/bench.json" <<'PY'
import json, sys
b = json.load(open(sys.argv[1]))
ok = b["parity_top1_agree"] >= b["parity_rows"] - 1 and b["parity_max_rel_l2_error"] < 0.05
print(("PASS " if ok else "FAIL ") + f"top-1 {b['parity_top1_agree']}/{b['parity_rows']}, rel L2 {b['parity_max_rel_l2_error']:.2e}")
PY
)
  record 8b "${verdict%% *}" "${verdict#* }"
}
step_bench() {
  [[ -n "$bench_rc" ]] || run_bench_gpu "$1"
  if [[ $bench_rc -ne 0 || ! -f "$out/bench.json" ]]; then
    record_failure bench "$bench_rc" "$1" "bench_gpu (bench.log)"
    return
  fi
  verdict=$(python3 - "$out/bench.json" <<'PY'
import json, sys
b = json.load(open(sys.argv[1]))
f = b["batch1_fraction_of_roofline"]
t = {f"b{c['batch']} {c['input_len']}/{c['output_len']}": round(c["output_tokens_per_s"]) for c in b.get("throughput", [])}
print(("PASS " if f >= 0.8 else "FAIL ") + f"b1 {b['decode_batch1_tokens_per_s']:.0f} tok/s = {100 * f:.0f}% of roofline; {t}")
PY
)
  record bench "${verdict%% *}" "${verdict#* }"
  # Issue 15's bar for CUDA graphs: batch-1 decode at 8B shape >= 85% of the measured roofline.
  verdict=$(python3 - "$out/bench.json" <<'PY'
import json, sys
b = json.load(open(sys.argv[1]))
g = b.get("batch1_graphs_fraction_of_roofline")
if g is None:
    print("FAIL no graphs figure in bench.json")
else:
    e = b["batch1_fraction_of_roofline"]
    print(("PASS " if g >= 0.85 else "FAIL ") + f"b1 with graphs {b['decode_batch1_graphs_tokens_per_s']:.0f} tok/s = {100 * g:.0f}% of roofline (eager {100 * e:.0f}%; bar 85%)")
PY
)
  record graphs "${verdict%% *}" "${verdict#* }"
  # The quantized GEMV (bench_gpu's "gemv" rows, not measured by --quick): weight bytes read per second at 1 token
  # against the copy bandwidth; the bar is 90% on the two large 8B shapes (4096 -> 4096 is a 2-4 us kernel, which
  # launch gaps dominate).
  ((quick)) && return
  verdict=$(python3 - "$out/bench.json" <<'PY'
import json, sys
b = json.load(open(sys.argv[1]))
rows = [r for r in b.get("gemv", []) if r["tokens"] == 1]
if not rows:
    print("FAIL no gemv rows in bench.json")
else:
    bar = [r for r in rows if r["format"] != "bf16" and r["n_in"] * r["n_out"] > 4096 * 4096]
    ok = bar and min(r["fraction_of_copy_bandwidth"] for r in bar) >= 0.9
    fig = "; ".join(f"{r['format']} {r['n_in']}->{r['n_out']} {100 * r['fraction_of_copy_bandwidth']:.0f}%" for r in rows)
    print(("PASS " if ok else "FAIL ") + f"GEMV at 1 token, of copy bandwidth (bar 90% on the large shapes): {fig}")
PY
)
  record gemv "${verdict%% *}" "${verdict#* }"
  # The GEMV's size rule (kernels/cuda/gemv_math.hpp: one row, any weight) against the rule a sweep of single calls
  # favoured (cuBLAS above 4096 x 4096 elements) in the same batch-1 decode with graphs: FAIL when the default is more
  # than 2% slower.
  ACTORLLM_GEMV=elements=16777216 limited "$(step_limit bench)" "$bin/bench_gpu" --config "$root/configs/llama-3.1-8b" \
    --no-throughput --no-gemv --json "$work/bench-capped-rule.json" >>"$out/bench.log" 2>&1
  verdict=$(python3 - "$out/bench.json" "$work/bench-capped-rule.json" <<'PY'
import json, sys
try:
    new, old = (json.load(open(p))["decode_batch1_graphs_tokens_per_s"] for p in sys.argv[1:3])
except Exception as e:  # noqa: BLE001
    print(f"FAIL no figure for one rule: {e}")
else:
    print(("PASS " if new >= 0.98 * old else "FAIL ") +
          f"b1 with graphs: default rule {new:.1f} tok/s, GEMV up to 4096 x 4096 only {old:.1f} ({new / old:.3f}x)")
PY
)
  record gemv_rule "${verdict%% *}" "${verdict#* }"
}

# ---- profile -----------------------------------------------------------------------------------------------------
# ncu over one eager decode step at batch 1 and one at batch 64 (bench_gpu --profile: each step in a profiler
# region that starts with a marker kernel); clocks and caches as they are. The table goes to bench.log.
step_profile() {
  if ! command -v ncu >/dev/null; then
    record profile SKIP "no ncu on this machine"
    return
  fi
  limited "$1" ncu --profile-from-start off --clock-control none --cache-control none --print-units base --csv \
    --metrics gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum --log-file "$work/ncu.csv" \
    "$bin/bench_gpu" --config "$root/configs/llama-3.1-8b" --profile 1 64 >"$work/profile-run.log" 2>&1
  local rc=$?
  echo "== profile (ncu gpu__time_duration, DRAM bytes; decode steps at batch 1 and 64)" >>"$out/bench.log"
  python3 "$root/gpu_profile_table.py" "$work/ncu.csv" --labels b1,b64 --summary "$work/profile-summary.txt" \
    >>"$out/bench.log" 2>&1
  local table_rc=$?
  if ((rc == 0 && table_rc == 0)); then
    record profile PASS "$(cat "$work/profile-summary.txt") (tables in bench.log)"
  else
    tail -20 "$work/profile-run.log" >>"$out/tests.log"
    echo "== the first lines of ncu's CSV" >>"$out/tests.log"
    head -12 "$work/ncu.csv" >>"$out/tests.log" 2>&1
    record_failure profile "$rc" "$1" "ncu / table rc $table_rc: $(cat "$work/profile-summary.txt" 2>/dev/null)"
  fi
}

# ---- serve -------------------------------------------------------------------------------------------------------
# `actorllm serve` of the 8B shape with dummy weights and the bundle's Llama 3 tokenizer, loaded by `actorllm bench
# serve` (random 512-token prompts, 128 out) at concurrency 1, 16 and 64. Results in bench.log.
step_serve() {
  local deadline=$((SECONDS + $1)) port=18011 pid c rc=0 ready=0 rows=""
  "$bin/actorllm" serve "$root/configs/llama-3.1-8b" --load-format dummy --dtype bfloat16 --device cuda \
    --tokenizer "$root/tokenizers/llama3" --host 127.0.0.1 --port "$port" --max-model-len 4096 \
    >"$work/serve.log" 2>&1 &
  pid=$!
  while ((SECONDS < deadline)); do
    python3 -c "import urllib.request as u; u.urlopen('http://127.0.0.1:$port/health', timeout=2)" 2>/dev/null &&
      ready=1 && break
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.5
  done
  local start_s=$((SECONDS - step_started))
  if ((!ready)); then
    kill "$pid" 2>/dev/null
    wait "$pid" 2>/dev/null
    tail -30 "$work/serve.log" >>"$out/tests.log"
    if ((SECONDS >= deadline)); then record serve TIMEOUT "after $1 s: no /health 200"; else record serve FAIL "the server exited (tests.log)"; fi
    return
  fi
  for c in 1 16 64; do
    echo "== bench serve, concurrency $c" >>"$out/bench.log"
    limited "$(left_of $deadline)" "$bin/actorllm" bench serve --base-url "http://127.0.0.1:$port" \
      --tokenizer "$root/tokenizers/llama3" --random-input-len 512 --random-output-len 128 \
      --num-prompts $((c == 1 ? 8 : 2 * c)) --max-concurrency "$c" --percentile-metrics ttft,tpot \
      --metric-percentiles 50,99 --result-file "$work/serve-c$c.json" >>"$out/bench.log" 2>&1
    rc=$?
    ((rc != 0)) && break
    rows="$rows $(python3 - "$work/serve-c$c.json" "$c" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
def g(*keys):
    for k in keys:
        if k in r:
            return r[k]
    return float("nan")
print(f"[c{sys.argv[2]}: {g('output_throughput'):.0f} tok/s, TTFT {g('median_ttft_ms', 'p50_ttft_ms'):.1f}/"
      f"{g('p99_ttft_ms'):.1f} ms, TPOT {g('median_tpot_ms', 'p50_tpot_ms'):.2f}/{g('p99_tpot_ms'):.2f} ms]")
PY
)"
  done
  kill -INT "$pid" 2>/dev/null
  wait "$pid" 2>/dev/null
  grep -E 'GPU blocks|Ready' "$work/serve.log" >>"$out/bench.log"
  if ((rc == 0)); then
    record serve PASS "ready in ${start_s} s;$rows (median/P99)"
  else
    tail -30 "$work/serve.log" >>"$out/tests.log"
    record_failure serve "$rc" "$1" "bench serve after${rows:- no run}"
  fi
}

# ---- hf: transformers side by side -------------------------------------------------------------------------------
step_hf() {
  limited "$1" python3 "$root/gpu_check_hf.py" --config "$root/configs/llama-3.1-8b" --json "$out/hf.json" \
    --cases 64x128x128,256x128x128 2>&1 | tee -a "$out/bench.log"
  local rc=${PIPESTATUS[0]}
  if [[ -f "$out/hf.json" && -f "$out/bench.json" ]]; then
    verdict=$(python3 - "$out/bench.json" "$out/hf.json" <<'PY'
import json, sys
b, h = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
ours = {(c["batch"], c["input_len"], c["output_len"]): c["output_tokens_per_s"] for c in b.get("throughput", [])}
hf = {(c["batch"], c["input_len"], c["output_len"]): c.get("output_tokens_per_s") for c in h.get("cases", [])}
k = (64, 128, 128)
if k not in ours or not hf.get(k):
    print("FAIL no b64 128/128 figure on one side")
else:
    r = ours[k] / hf[k]
    print(("PASS " if r >= 2 else "FAIL ") + f"b64 128/128: actorllm {ours[k]:.0f} vs transformers {hf[k]:.0f} tok/s = {r:.2f}x")
PY
)
    record hf "${verdict%% *}" "${verdict#* }"
  else
    record_failure hf "$rc" "$1" "no hf.json or bench.json (bench.log)"
  fi
}

# ---- the run -----------------------------------------------------------------------------------------------------
: >"$out/tests.log"
: >"$out/bench.log"
for st in "${all_steps[@]}"; do
  wants "$st" || continue
  step_started=$SECONDS
  if [[ $st != probe ]] && ((!gpu_ok)); then
    # The probe decides; without it (a step list that leaves it out), ask gpu_probe now.
    if ! wants probe && "$bin/gpu_probe" >/dev/null 2>&1; then
      gpu_ok=1
    else
      record "$st" SKIP "no GPU"
      continue
    fi
  fi
  if ((SECONDS - started >= budget)); then
    record "$st" TIMEOUT "not started: the run's $budget s were spent"
    continue
  fi
  "step_$st" "$(step_limit "$st")"
done

# ---- summary -------------------------------------------------------------------------------------------------------
status=0
n_skip=0
{
  printf '\n%-10s %-7s %5s  %s\n' step result s detail
  for i in "${!names[@]}"; do
    printf '%-10s %-7s %5s  %s\n' "${names[$i]}" "${results[$i]}" "${seconds[$i]}" "${details[$i]}"
  done
  printf '%-10s %-7s %5s  %s\n' total "" "$((SECONDS - started))" "budget $budget s"
} | tee "$out/summary.txt"
for i in "${!names[@]}"; do
  case "${results[$i]}" in
  FAIL | TIMEOUT) status=1 ;;
  SKIP) n_skip=$((n_skip + 1)) ;;
  esac
done
python3 - "$out/summary.json" "$((SECONDS - started))" "$budget" "${names[@]}" -- "${results[@]}" -- "${seconds[@]}" <<'PY'
import json, sys
args = sys.argv[4:]
a = args.index("--")
b = args.index("--", a + 1)
names, results, secs = args[:a], args[a + 1:b], args[b + 1:]
json.dump({"steps": {n: {"result": r, "seconds": int(s)} for n, r, s in zip(names, results, secs)},
           "seconds": int(sys.argv[2]), "budget_seconds": int(sys.argv[3])}, open(sys.argv[1], "w"), indent=1)
PY
# No GPU: every step said so; the check did not pass, and says it was skipped (ctest's skip code).
if ((status == 0 && !gpu_ok && n_skip > 0)); then
  echo "skipped: no GPU"
  exit 77
fi
exit $status
