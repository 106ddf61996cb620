# shellcheck shell=bash
# Sourced by the tests/scripts shell tests: `check DESCRIPTION COMMAND...` prints ok or FAILED and records a failure
# in $fail, which the test exits with.
# shellcheck disable=SC2034  # read by the test that sources this
fail=0
check() {
  local what=$1
  shift
  if "$@"; then echo "ok: $what"; else echo "FAILED: $what"; fail=1; fi
}
