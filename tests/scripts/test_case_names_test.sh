#!/usr/bin/env bash
# ctest registers each doctest case by name, and CMake splits a name at ';' (a list separator): such a case was
# registered under the part before the ';', which matches no case, so it ran nothing and passed. Fails, naming
# them, when a TEST_CASE name holds a ';'. Argument: the source root.
set -euo pipefail
root=${1:?usage: test_case_names_test.sh SOURCE_ROOT}
bad=$(grep -rn --include='*.cpp' 'TEST_CASE("[^"]*;' "$root/tests" || true)
if [[ -n "$bad" ]]; then
  echo "test case names holding ';' (ctest would run nothing for them):"
  echo "$bad"
  exit 1
fi
echo "no test case name holds a ';'"
