#!/usr/bin/env bash
# test.sh: installs what is missing, builds with -Werror and runs the whole
# test suite against redis-server processes the tests start themselves.
#   scripts/test.sh            normal build
#   scripts/test.sh asan       AddressSanitizer + UndefinedBehaviorSanitizer
#   scripts/test.sh tsan       ThreadSanitizer
#   scripts/test.sh valgrind   memcheck over every test binary
#   scripts/test.sh fuzz       a short libFuzzer run (parsers, server replies)
#   scripts/test.sh all        normal, valgrind, fuzz, asan and tsan in turn
set -euo pipefail
cd "$(dirname "$0")/.."
mode=${1:-normal}
case "$mode" in valgrind|fuzz) export DLOCK_WITH_TOOLS=1 ;; esac
scripts/install-deps.sh
jobs=$(nproc)

build() { # build NAME CMAKE_ARGS...
  local name=$1; shift
  echo "== $name build"
  cmake -S . -B "build-$name" -DDLOCK_WERROR=ON -DDLOCK_BUILD_TESTS=ON "$@" \
    >/dev/null
  cmake --build "build-$name" -j"$jobs" >/dev/null
}

# The tests labelled "failover" (test_sentinel: real Sentinel failovers,
# a few seconds each, timed) and "once" (the conformance suite's unix,
# rediss and sentinel rows: the redis row's code behind another transport
# or resolver, 40 s each under TSan; the checks of the tree) run once, in
# the normal build; the sanitizer and valgrind runs leave them out
# (ctest_skip), for CI's time. Those labelled "no_tsan" (the peer interop
# tests, the fault-injection suite, the benchmark's test) run in the
# normal and ASan builds (tests/CMakeLists.txt says why).
ctest_skip=()
# Two tests at once, on CI's two cores. (Three would fill them better,
# 1.4 of 2 busy, but bounds that are not scaled failed with three at
# once: a three-member etcd's election outlasted a 2 s release, and a
# wake-up under ASan took 347 ms of 300.)
run() { # run NAME CMAKE_ARGS...: build, then the whole suite
  build "$@"
  echo "== $1 tests"
  (cd "build-$1" && ctest --output-on-failure -j2 "${ctest_skip[@]}")
}

case "$mode" in
  normal) run normal -DCMAKE_BUILD_TYPE=RelWithDebInfo ;;
  # DLOCK_TEST_SLOWDOWN scales the conformance suite's times and bounds
  # (tests/conformance/conformance.h) by the sanitizers' slowdown.
  asan) ctest_skip=(-LE "failover|once")
        ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
        LSAN_OPTIONS="suppressions=$PWD/tests/lsan.supp" \
        DLOCK_TEST_SLOWDOWN=2 \
          run asan -DCMAKE_BUILD_TYPE=Debug -DDLOCK_SANITIZE=address,undefined ;;
  tsan) ctest_skip=(-LE "failover|once|no_tsan")
        TSAN_OPTIONS="halt_on_error=1 suppressions=$PWD/tests/tsan.supp" \
        DLOCK_TEST_SLOWDOWN=4 \
          run tsan -DCMAKE_BUILD_TYPE=Debug -DDLOCK_SANITIZE=thread ;;
  valgrind)
    build normal -DCMAKE_BUILD_TYPE=RelWithDebInfo
    # Not test_safety nor test_fenced_rmw: their faults are timed,
    # valgrind's slowdown would change what they test (docs/SAFETY.md);
    # test_fenced_rmw also takes its URL kind as an argument (ctest's
    # fenced_rmw_* rows, label failover: the normal build only).
    # Two tests at a time (each process is single-threaded under
    # valgrind; most of a test's time is waiting on servers and leases,
    # which valgrind's slowdown does not shorten), the slowest first;
    # each test's output printed whole when it ends. A failure fails the
    # run after the rest have run.
    tests=()
    for t in test_etcd_interop test_cli test_bench test_zk test_etcd \
             test_etcd_conn test_etcd_async \
             test_zk_interop test_cluster test_observe test_deadlock \
             test_redlock test_lock; do
      [ -x "build-normal/tests/$t" ] && tests+=("build-normal/tests/$t")
    done
    for t in build-normal/tests/test_*; do
      case " ${tests[*]} " in *" $t "*) continue ;; esac
      [ "$(basename "$t")" = test_safety ] && continue
      [ "$(basename "$t")" = test_fenced_rmw ] && continue
      [ "$(basename "$t")" = test_sentinel ] && continue # run once: normal
      tests+=("$t")
    done
    # And the conformance suite on one URL kind (valgrind-test.sh scales
    # its times: valgrind's slowdown is not what it tests). The other
    # kinds run in the normal, ASan and TSan builds; under valgrind each
    # takes 1.5 to 2 minutes, and their backends' code is run here by
    # test_redlock, test_zk, test_etcd and the rest (CI's time budget).
    { echo "build-normal/tests/conformance redis"
      printf '%s\n' "${tests[@]}"; } | xargs -P2 -L1 scripts/valgrind-test.sh
    # The event-loop examples (those built), each run under valgrind by
    # test_examples.sh against its own server.
    examples=()
    for e in build-normal/dlock-example-uv build-normal/dlock-example-event; do
      [ -x "$e" ] && examples+=("$e")
    done
    if [ ${#examples[@]} -gt 0 ]; then
      echo "== valgrind ${examples[*]}"
      DLOCK_EXAMPLES_WRAP="valgrind -q --error-exitcode=3 --leak-check=full \
--errors-for-leak-kinds=definite" tests/test_examples.sh "${examples[@]}"
    fi ;;
  fuzz) echo "== fuzz"; scripts/fuzz.sh 20 ;;
  all) "$0" normal && "$0" valgrind && "$0" fuzz && "$0" asan && "$0" tsan ;;
  *) echo "usage: $0 [normal|asan|tsan|valgrind|fuzz|all]" >&2; exit 64 ;;
esac
