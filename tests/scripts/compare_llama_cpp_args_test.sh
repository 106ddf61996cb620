#!/usr/bin/env bash
# bench/compare_llama_cpp.sh's argument handling, without llama.cpp: each missing or invalid path or value is refused
# (exit 2) with a message naming it, before anything is prepared or run.
#   compare_llama_cpp_args_test.sh SOURCE_DIR
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
refuses "an unknown argument" "unknown argument '--gpu'" --gpu
refuses "a flag without its value" "--rounds needs a value" --llama-cpp "$tmp/empty-build" --rounds

exit "$fail"
