#!/usr/bin/env bash
# clang-format over the project's C++ sources. `--check` fails (listing the files) instead of rewriting them.
set -euo pipefail
cd "$(dirname "$0")/.."
mapfile -t files < <(git ls-files -co --exclude-standard -- '*.hpp' '*.cpp' '*.cu' '*.cuh' | grep -v '^build')
if [[ "${1:-}" == "--check" ]]; then
  bad=()
  for f in "${files[@]}"; do
    [[ -f "$f" ]] || continue
    if ! clang-format --dry-run --Werror "$f" >/dev/null 2>&1; then bad+=("$f"); fi
  done
  if ((${#bad[@]})); then
    echo "format check failed; run scripts/format.sh on:"; printf '  %s\n' "${bad[@]}"; exit 1
  fi
  echo "format check: ${#files[@]} files clean"
else
  clang-format -i "${files[@]}"
fi
