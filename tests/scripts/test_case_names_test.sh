#!/usr/bin/env bash
# ctest registers each doctest case by name, and CMake splits a name at ';' (a list separator): such a case was
# registered under the part before the ';', which matches no case, so it ran nothing and passed. Fails, naming
# them, when a TEST_CASE name holds a ';'. Argument: the source root.
set -euo pipefail
root=${1:?usage: test_case_names_test.sh SOURCE_ROOT}
# A name may be split over several string literals and lines (TEST_CASE(\n "..." "...")): the literals are read
# together (perl over each whole file).
bad=$(find "$root/tests" -name '*.cpp' -print0 |
  xargs -0 perl -0777 -ne 'while (/TEST_CASE\(\s*((?:"(?:[^"\\]|\\.)*"\s*)+)/g) { my $n = $1; if ($n =~ /;/) { $n =~ s/\s+/ /g; print "$ARGV: $n\n" } }' ||
  true)
if [[ -n "$bad" ]]; then
  echo "test case names holding ';' (ctest would run nothing for them):"
  echo "$bad"
  exit 1
fi
echo "no test case name holds a ';'"
