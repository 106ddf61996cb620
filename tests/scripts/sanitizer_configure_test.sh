#!/usr/bin/env bash
# The sanitizer build of scripts/test.sh (no benchmarks, no CUDA) configures and generates: configured by
# scripts/configure_sanitizer_build.sh in a temporary directory. A test registration that needs a target this build
# leaves out (a benchmark's $<TARGET_FILE:...>) fails here, naming CMake's error, in the ordinary test run.
#   sanitizer_configure_test.sh SOURCE_ROOT
set -uo pipefail
root=${1:?usage: sanitizer_configure_test.sh SOURCE_ROOT}
tmp=$(mktemp -d /tmp/actorllm-asan-configure.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
# shellcheck source=tests/scripts/check_helpers.sh
source "$(dirname "$0")/check_helpers.sh"

bash "$root/scripts/configure_sanitizer_build.sh" "$tmp/build" >"$tmp/out" 2>&1
rc=$?
check "the sanitizer build configures (exit $rc)" test "$rc" -eq 0
check "and generates its build files" test -f "$tmp/build/build.ninja"
check "with no benchmark target" bash -c "test -f '$tmp/build/build.ninja' && ! grep -q 'bench_kernels' '$tmp/build/build.ninja'"
if ((fail)); then
  echo "--- cmake's errors:"
  grep -A8 'CMake Error' "$tmp/out" | head -40
fi
exit "$fail"
