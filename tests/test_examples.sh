#!/usr/bin/env bash
# test_examples.sh: the event-loop examples (examples/async_*.c) against a
# private redis-server: each exits 0 with its summary, given the URL as its
# argument or in DLOCK_URL; and, the control, exits 1 (soon) when there is
# no server. With DLOCK_EXAMPLES_WRAP set (scripts/test.sh valgrind: e.g.
# "valgrind -q --error-exitcode=3 --leak-check=full") each runs under it.
# Usage: test_examples.sh PATH/TO/EXAMPLE...
set -u
EXAMPLES=()
for e in "$@"; do EXAMPLES+=("$(realpath "$e")"); done
set --  # redis-tmp.sh passes its arguments to redis-server
. "$(dirname "$0")/../scripts/redis-tmp.sh"
read -r -a WRAP <<< "${DLOCK_EXAMPLES_WRAP:-}"
passed=0 failed=0
result() { # result NAME OK DETAIL
  if [ "$2" = 1 ]; then echo "ok   $1"; passed=$((passed+1))
  else echo "FAIL $1: $3"; failed=$((failed+1)); fi
}
for ex in "${EXAMPLES[@]}"; do
  name=$(basename "$ex")
  # The URL as the argument (TCP), then from DLOCK_URL (the unix socket).
  out=$("${WRAP[@]}" "$ex" "$URL" 2>&1); rc=$?
  ok=0; [ "$rc" = 0 ] && grep -q ': 100 locks, 110 acquired, 110 released, 10 contended .*: ok$' <<< "$out" && ok=1
  result "$name argv" "$ok" "exit $rc: $out"
  out=$(DLOCK_URL="unix://$SOCK" "${WRAP[@]}" "$ex" 2>&1); rc=$?
  ok=0; [ "$rc" = 0 ] && grep -q ': ok$' <<< "$out" && ok=1
  result "$name env" "$ok" "exit $rc: $out"
  # Nothing is left behind: every lock was released.
  left=$(redis-cli -s "$SOCK" --scan --pattern 'dlock-example:*' | wc -l)
  result "$name released all" "$([ "$left" = 0 ] && echo 1)" "$left keys left"
  # The control: no server there. It must fail, not hang or exit 0.
  dead=$(python3 -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])')
  t0=$(date +%s)
  out=$(timeout 60 "${WRAP[@]}" "$ex" "redis://127.0.0.1:$dead" 2>&1); rc=$?
  secs=$(( $(date +%s) - t0 ))
  ok=0; [ "$rc" = 1 ] && ok=1
  result "$name no server fails ($secs s)" "$ok" "exit $rc: $out"
done
echo "$passed passed, $failed failed"
[ "$failed" = 0 ] && [ "$passed" -gt 0 ]
