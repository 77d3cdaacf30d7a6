#!/usr/bin/env bash
# valgrind-test.sh TEST [ARGS]: runs one test binary under valgrind's
# memcheck for scripts/test.sh valgrind, and prints its output whole when
# it ends (two run at a time). Exits 1 if the test or valgrind failed.
set -uo pipefail
t="$*"
# The conformance suite's times and bounds scaled by valgrind's slowdown.
[ "$(basename "$1")" = conformance ] && export DLOCK_TEST_SLOWDOWN=20
out=$(mktemp)
start=$(date +%s)
# th_run forks each test (no exec), and valgrind follows a fork without
# --trace-children: it checks each test's process for leaks at its exit,
# and its exit status 3 fails that test. =no keeps the redis-server and
# openssl the tests exec out of valgrind. Under valgrind a test may take
# longer than the runner's default 120 s.
# tests/valgrind.supp: leaks inside libraries we call (as lsan.supp).
DLOCK_TEST_TIMEOUT_S=600 DLOCK_UNDER_VALGRIND=1 \
  valgrind -q --error-exitcode=3 --leak-check=full \
  --suppressions="$(dirname "$0")/../tests/valgrind.supp" \
  --errors-for-leak-kinds=definite --trace-children=no "$@" >"$out" 2>&1
rc=$?
{
  flock 9
  echo "== valgrind $t: exit $rc after $(($(date +%s) - start)) s"
  cat "$out"
} 9>>"${TMPDIR:-/tmp}/dlock-valgrind.lock"
rm -f "$out"
# 77: the test skipped itself (ctest's SKIP_RETURN_CODE, e.g. test_partition
# where it may not make a network namespace).
[ "$rc" -eq 0 ] || [ "$rc" -eq 77 ] || exit 1
