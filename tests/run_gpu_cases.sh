#!/usr/bin/env bash
# Runs the GPU cases of a doctest binary: `run_gpu_cases.sh PROBE BINARY [doctest args]`. Without a GPU it prints
# "skipped: no GPU (reason)" and exits 77 (ctest's SKIP_RETURN_CODE for these entries: reported as Skipped, never as
# passed); with one it runs the binary's cases, the GPU ones included, and returns its status.
set -uo pipefail
probe=$1
binary=$2
shift 2
"$probe" || exit $?
exec "$binary" "$@"
