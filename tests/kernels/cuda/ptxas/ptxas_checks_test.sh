#!/usr/bin/env bash
# The build's ptxas checks refuse local memory: with the flags every CUDA target compiles with, the control kernel of
# local_memory_kernels.cu compiles, the one with a run-time indexed array fails naming its stack frame, and the one
# that runs out of registers fails naming its spills.
# Usage: ptxas_checks_test.sh NVCC CUDA_ARCH FLAG...
set -u
nvcc=$1 arch=$2
shift 2
src=$(dirname "$0")/local_memory_kernels.cu
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
fail=0
compile() { "$nvcc" -arch="sm_$arch" -O3 -DCASE="$1" "${@:2}" -c "$src" -o "$out/case$1.o" >"$out/log$1" 2>&1; }
if ! compile 0 "$@"; then
  echo "FAIL: the control kernel does not compile:"; cat "$out/log0"; fail=1
fi
for c in 1 2; do
  want="Local memory used"
  [ "$c" = 2 ] && want="Registers are spilled"
  if compile "$c" "$@"; then
    echo "FAIL: case $c compiled, the checks let its local memory through"; fail=1
  elif ! grep -q "$want" "$out/log$c"; then
    echo "FAIL: case $c failed without '$want':"; cat "$out/log$c"; fail=1
  else
    echo "ok: case $c refused: $(grep -m1 "$want" "$out/log$c")"
  fi
done
exit $fail
