#!/usr/bin/env bash
# The one command for a GPU machine (x86-64 with an H100 or H200, nvcc, PyTorch and transformers, no network, none
# of our Debian libraries). Unpacks the bundle scripts/gpu_bundle.sh built on a development machine, finds the CUDA
# libraries there, and runs in about 10 minutes:
#   0 probe      the GPU, driver and libraries
#   1 sanitize   compute-sanitizer memcheck over the GPU tests at small shapes
#   2 parity     every backend op on CUDA against float64 references, and the kernel tests
#   2b sampling  the GPU sampler against cpu::sample: greedy identical, seeded draws and random streams identical,
#                logprobs within tolerance, chi-square over 1e5 seeded draws (test_cuda's "cuda sample:" cases)
#   allreduce    the custom all-reduce across two processes (CUDA IPC; one GPU shared, or two GPUs): bit-equal to
#                the rank-order host sum, both shots, f32 and bf16, odd sizes
#   3 golden     stories260K greedy ids on CUDA (f32) equal the golden file
#   4 layouts    tp 2, pp 2 and tp 2 x pp 2 sharing the one GPU, in-process and multi-process: the same ids
#   4b nccl      the NCCL communicator's GPU tests (test_cuda "nccl*"). On one GPU: a one-rank communicator's
#                all-reduce/all-gather, two ranks on one GPU refused without a hang, the init timeout; the cases
#                that need 2 GPUs (all-reduce/all-gather/all-to-all/send-recv vs host, abort and watchdog timeout
#                unblocking a rank) say "skipped: needs 2 GPUs" there and run where there are 2 or more, with
#                `actorllm check` over a one-node cluster of this machine (Gloo, NCCL, custom all-reduce tables)
#   5 8B parity  CUDA bf16 against the CPU on identical dummy weights at Llama-3.1-8B shape: top-1 agreement
#   6 bench      copy bandwidth, batch-1 decode vs the roofline (eager, and with CUDA graphs: bar 85%), engine
#                output tokens/s at b64/b256
#   7 hf         transformers `generate` on the same shapes, same run
# and prints one summary table last. OUTDIR gets at most 7 files (what the device tool brings back): env.json,
# tests.log, bench.log, bench.json, hf.json, summary.txt, summary.json. Exit 0 only when every check
# passes. It never changes clocks, modes or MIG and never resets the GPU.
#
#   bash scripts/gpu_check.sh OUTDIR [STEP ...]      # steps by name (probe sanitize parity sampling allreduce golden
#                                                   # layouts nccl 8b bench hf); default: all
set -uo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
out=${1:-${OUT:-/tmp/gpu-check}}
shift || true
steps=("$@")
((${#steps[@]})) || steps=(probe sanitize parity sampling allreduce golden layouts nccl 8b bench hf)
mkdir -p "$out"
bundle=${ACTORLLM_GPU_BUNDLE:-$here/.gpu-bundle/actorllm-gpu.tar.xz}
[[ -f "$bundle" ]] || {
  echo "gpu_check: no bundle at $bundle (build it on a development machine: bash scripts/gpu_bundle.sh)" >&2
  exit 2
}
work=$(mktemp -d /tmp/actorllm-gpu.XXXXXX)
trap 'rm -rf "$work"' EXIT
tar -C "$work" -xJf "$bundle"
root=$work/actorllm-gpu
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
declare -a names=() results=() details=()
record() { # name PASS|FAIL|SKIP detail
  names+=("$1")
  results+=("$2")
  details+=("$3")
  echo "== $1: $2 $3"
}
wants() {
  local s
  for s in "${steps[@]}"; do [[ "$s" == "$1" ]] && return 0; done
  return 1
}

# ---- 0 probe -----------------------------------------------------------------------------------------------------
if wants probe; then
  echo "== probe"
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm,clocks.mem --format=csv |
    tee "$work/nvidia-smi.txt"
  missing=$(for b in "$bin"/*; do ldd "$b" | grep 'not found'; done | sort -u)
  "$bin/gpu_probe" >"$work/probe.txt" 2>&1
  probe_rc=$?
  python3 - "$out/env.json" "$cublas" "$cublaslt" "$root" "$nccl" <<'PY'
import json, os, platform, subprocess, sys
env = {"uname": platform.uname()._asdict(), "glibc": platform.libc_ver()[1], "cublas": sys.argv[2],
       "cublasLt": sys.argv[3], "nccl": sys.argv[5],
       "bundle_commit": open(os.path.join(sys.argv[4], "COMMIT")).read().strip()}
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
  if [[ $probe_rc -ne 0 || -n "$missing" || -z "$cublas" || -z "$nccl" ]]; then
    record probe FAIL "gpu_probe rc $probe_rc; unresolved: ${missing:-none}; cublas: ${cublas:-not found}; nccl: ${nccl:-not found}"
  else
    record probe PASS "$(head -1 "$work/probe.txt"); cublas $(basename "$cublas"); nccl $(basename "$nccl")"
  fi
fi

# ---- 1 sanitize --------------------------------------------------------------------------------------------------
if wants sanitize; then
  if command -v compute-sanitizer >/dev/null; then
    # The custom all-reduce's two-process cases run in their own step: whether memcheck follows CUDA IPC across
    # processes with spinning barriers fast enough (they trap after 10 s) is unverified. NCCL's cases stay out too:
    # its own kernels and proxy threads are not ours to sanitize, and its timeouts would stretch under memcheck (the
    # nccl step runs them).
    compute-sanitizer --tool memcheck --error-exitcode 99 "$bin/test_cuda" "--test-case-exclude=$car_cases,nccl*" \
      >"$out/tests.log" 2>&1
    rc1=$?
    compute-sanitizer --tool memcheck --error-exitcode 99 "$bin/test_kernels" '--test-case=*on cuda*' \
      >>"$out/tests.log" 2>&1
    rc2=$?
    if [[ $rc1 -eq 0 && $rc2 -eq 0 ]]; then
      record sanitize PASS "memcheck clean over test_cuda and the backend parity cases"
    else
      record sanitize FAIL "memcheck rc $rc1 / $rc2 (tests.log)"
    fi
  else
    record sanitize SKIP "no compute-sanitizer on this machine"
  fi
fi

# ---- 2 parity ----------------------------------------------------------------------------------------------------
if wants parity; then
  {
    "$bin/test_kernels" '--test-case=*on cuda*'
    rc1=$?
    "$bin/test_cuda" "--test-case-exclude=cuda sample:*,$car_cases,nccl*"
    rc2=$?
  } >"$work/parity.log" 2>&1
  cat "$work/parity.log" >>"$out/tests.log"
  cases=$(grep -h 'test cases:' "$work/parity.log" | tr '\n' ' ')
  if [[ $rc1 -eq 0 && $rc2 -eq 0 ]] && ! grep -q 'skipped: no GPU' "$work/parity.log"; then
    record parity PASS "$cases"
  else
    record parity FAIL "rc $rc1 / $rc2: $cases"
  fi
fi

# ---- 2b sampling ---------------------------------------------------------------------------------------------------
if wants sampling; then
  "$bin/test_cuda" '--test-case=cuda sample:*' >"$work/sampling.log" 2>&1
  rc=$?
  cat "$work/sampling.log" >>"$out/tests.log"
  cases=$(grep -h 'test cases:' "$work/sampling.log" | tr '\n' ' ')
  chi=$(grep -ho 'chi-square [0-9.e+-]* (threshold [0-9.e+-]*)' "$work/sampling.log" | tr '\n' ';')
  if [[ $rc -eq 0 ]] && grep -q 'test cases: *[1-9][0-9]* | *[1-9]' "$work/sampling.log" &&
    ! grep -q 'skipped: no GPU' "$work/sampling.log"; then
    record sampling PASS "$cases $chi"
  else
    record sampling FAIL "rc $rc: $cases (tests.log)"
  fi
fi

# ---- custom all-reduce ---------------------------------------------------------------------------------------------
# test_cuda starts itself twice as worker processes that meet through a directory and map each other's buffers.
if wants allreduce; then
  timeout 420 "$bin/test_cuda" "--test-case=$car_cases" >"$work/allreduce.log" 2>&1
  rc=$?
  cat "$work/allreduce.log" >>"$out/tests.log"
  cases=$(grep -h 'test cases:' "$work/allreduce.log" | tr '\n' ' ')
  if [[ $rc -eq 0 ]] && ! grep -q 'skipped: no GPU' "$work/allreduce.log" &&
    grep -q 'test cases: *[1-9]' "$work/allreduce.log"; then
    record allreduce PASS "$cases"
  else
    record allreduce FAIL "rc $rc: $cases (tests.log)"
  fi
fi

# ---- 3 golden and 4 layouts ---------------------------------------------------------------------------------------
stories=$root/models/stories260K
golden_ids() { # extra args -> prints the ids as JSON, or nothing
  timeout 300 "$bin/actorllm" generate --model "$stories" --prompt-ids 1 --max-tokens 256 --temperature 0 \
    --ignore-eos --output json "$@" 2>>"$out/tests.log" | tail -1
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
if wants golden; then
  # By default batch-1 decode steps replay a CUDA graph (generate runs max_num_seqs 1); --enforce-eager runs them
  # eagerly. Both must give the golden ids.
  ids=$(golden_ids --device cuda --dtype float32)
  eager_ids=$(golden_ids --device cuda --dtype float32 --enforce-eager)
  if [[ -n "$ids" ]] && why=$(compare_golden "$ids") && [[ -n "$eager_ids" ]] && why=$(compare_golden "$eager_ids"); then
    record golden PASS "stories260K CUDA f32: 256 greedy ids equal the golden, with CUDA graphs and with --enforce-eager"
  else
    record golden FAIL "stories260K CUDA f32: ${why:-no output (tests.log)}"
  fi
fi
if wants layouts; then
  fails=""
  # Shards sharing the one GPU run in-process (uni; the mp executor, like vLLM, wants a GPU per worker): tp 2, pp 2
  # and 2 x 2. The mp executor's worker path on the GPU: one worker process.
  gpus=$(nvidia-smi -L 2>/dev/null | wc -l)
  runs=("-tp 2 --distributed-executor-backend uni" "-pp 2 --distributed-executor-backend uni"
    "-tp 2 -pp 2 --distributed-executor-backend uni" "--distributed-executor-backend mp")
  ((gpus >= 2)) && runs+=("-tp 2 --distributed-executor-backend mp")
  ((gpus >= 4)) && runs+=("-tp 2 -pp 2 --distributed-executor-backend mp")
  for run in "${runs[@]}"; do
    # shellcheck disable=SC2086
    ids=$(golden_ids --device cuda --dtype float32 $run)
    if [[ -z "$ids" ]] || ! why=$(compare_golden "$ids"); then
      fails="$fails [$run: ${why:-no output}]"
    fi
  done
  if [[ -z "$fails" ]]; then
    record layouts PASS "${#runs[@]} layouts on $gpus GPU(s): golden ids"
  else
    record layouts FAIL "$fails"
  fi
fi

# `actorllm check` over a one-node cluster of this machine with N CPU slices (a head and one agent on loopback,
# stopped again): prints the check's tables, returns its status (2 when the cluster did not come up).
local_cluster_check() { # actorllm N
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
  timeout 300 "$actorllm" check --address "$address" --cluster-token "$token"
  rc=$?
  kill "$node_pid" "$head_pid" 2>/dev/null
  wait "$node_pid" "$head_pid" 2>/dev/null
  return $rc
}

# ---- 4b nccl -------------------------------------------------------------------------------------------------------
if wants nccl; then
  timeout 300 "$bin/test_cuda" '--test-case=nccl*' >"$work/nccl.log" 2>&1
  rc=$?
  cat "$work/nccl.log" >>"$out/tests.log"
  gpus=$(nvidia-smi -L 2>/dev/null | wc -l)
  cases=$(grep -h 'test cases:' "$work/nccl.log" | tr -s ' ')
  needs2=$(grep -c 'skipped: needs 2 GPUs' "$work/nccl.log")
  detail="$gpus GPU(s): $cases; $needs2 case(s) needing 2 GPUs skipped"
  # With 2 or more GPUs, `actorllm check` on a one-node cluster of this machine (one CPU slice per GPU: a worker
  # takes the GPU of its slice) measures Gloo, NCCL and the custom all-reduce; its tables go to tests.log.
  check_rc=0
  if ((gpus >= 2)); then
    local_cluster_check "$bin/actorllm" "$((gpus > 8 ? 8 : gpus))" >"$work/check.txt" 2>&1
    check_rc=$?
    cat "$work/check.txt" >>"$out/tests.log"
    detail="$detail; actorllm check rc $check_rc: $(grep -E '^(All checks passed|CHECK FAILED)' "$work/check.txt")"
    grep -q 'NCCL: skipped' "$work/check.txt" && check_rc=1 && detail="$detail (NCCL skipped)"
  fi
  if [[ $rc -eq 0 && $check_rc -eq 0 ]] && ! grep -q 'skipped: no GPU' "$work/nccl.log"; then
    record nccl PASS "$detail"
  else
    record nccl FAIL "rc $rc on $detail (tests.log)"
  fi
fi

# ---- 5 8B parity and 6 bench --------------------------------------------------------------------------------------
if wants 8b || wants bench; then
  args=(--config "$root/configs/llama-3.1-8b" --json "$out/bench.json")
  wants 8b && args+=(--parity)
  wants bench || args+=(--no-throughput)
  timeout 480 "$bin/bench_gpu" "${args[@]}" 2>&1 | tee "$out/bench.log"
  rc=${PIPESTATUS[0]}
  if [[ $rc -ne 0 || ! -f "$out/bench.json" ]]; then
    wants 8b && record 8b FAIL "bench_gpu rc $rc (bench.log)"
    wants bench && record bench FAIL "bench_gpu rc $rc (bench.log)"
  else
    if wants 8b; then
      verdict=$(python3 - "$out/bench.json" <<'PY'
import json, sys
b = json.load(open(sys.argv[1]))
ok = b["parity_top1_agree"] >= b["parity_rows"] - 1 and b["parity_max_rel_l2_error"] < 0.05
print(("PASS " if ok else "FAIL ") + f"top-1 {b['parity_top1_agree']}/{b['parity_rows']}, rel L2 {b['parity_max_rel_l2_error']:.2e}")
PY
)
      record 8b "${verdict%% *}" "${verdict#* }"
    fi
    if wants bench; then
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
    fi
  fi
fi

# ---- 7 transformers side by side ----------------------------------------------------------------------------------
if wants hf; then
  timeout 420 python3 "$root/gpu_check_hf.py" --config "$root/configs/llama-3.1-8b" --json "$out/hf.json" 2>&1 |
    tee -a "$out/bench.log"
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
    record hf FAIL "no hf.json or bench.json (bench.log)"
  fi
fi

# ---- summary -------------------------------------------------------------------------------------------------------
status=0
{
  printf '\n%-10s %-5s %s\n' step result detail
  for i in "${!names[@]}"; do
    printf '%-10s %-5s %s\n' "${names[$i]}" "${results[$i]}" "${details[$i]}"
    [[ "${results[$i]}" == FAIL ]] && status=1
  done
} | tee "$out/summary.txt"
for i in "${!names[@]}"; do [[ "${results[$i]}" == FAIL ]] && status=1; done
python3 - "$out/summary.json" "${names[@]}" -- "${results[@]}" <<'PY'
import json, sys
args = sys.argv[2:]
cut = args.index("--")
json.dump(dict(zip(args[:cut], args[cut + 1:])), open(sys.argv[1], "w"), indent=1)
PY
exit $status
