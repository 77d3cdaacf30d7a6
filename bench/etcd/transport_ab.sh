#!/usr/bin/env bash
# transport_ab.sh: `dlock bench` on etcd:// with two dlock builds (A, B:
# e.g. main's, over the JSON gateway, and this tree's, over gRPC) beside
# etcd's own Go client (etcdpeer bench), on one private single-member
# etcd, in one run, alternating (the order turns each round), ROUNDS
# rounds, in four scenarios: 1 thread uncontended, 16 threads
# uncontended, dlock's event loop with 64 operations in flight
# uncontended (Go: its 16 threads again, as there is no event-loop Go
# client), 4 processes contending with 1 ms holds (Go: 4 threads).
# Per row: cycles/s (the bench's own figure) and the server's CPU
# (utime + stime from /proc) over the cycles the command ran
# (cycles/s x duration: the bench's baselines are in it).
#   bench/etcd/transport_ab.sh DLOCK_A DLOCK_B ETCDPEER [ROUNDS] [SECS]
set -euo pipefail
a=$1 b=$2 peer=$3 rounds=${4:-3} secs=${5:-3}
. "$(dirname "$0")/etcd_start.sh"
etcd_start etcdab
# NAME SCENARIO COMMAND...: one row from the command's JSON line.
row() {
  local name=$1 sc=$2; shift 2
  local c0 c1 out
  c0=$(cpu)
  out=$("$@" 2>/dev/null | tail -1)
  c1=$(cpu)
  python3 - "$name" "$sc" "$c0" "$c1" "$secs" "$out" <<'PY'
import json, sys
name, sc, c0, c1, secs, out = sys.argv[1:]
j = json.loads(out)
r = j.get('ops_per_sec', j.get('cycles_per_sec', 0))
n = r * float(secs)
print('%-4s %-4s %6.0f cycles/s  server %5.0f us CPU/cycle' %
      (sc, name, r, (float(c1) - float(c0)) * 1e6 / n if n else 0))
PY
}
u="etcd://127.0.0.1:$port"
run() { # WHO SCENARIO
  local who=$1 sc=$2 bin
  if [ "$who" = go ]; then
    case $sc in
      u1) row go u1 "$peer" bench "127.0.0.1:$port" uncontended 1 "$secs" ;;
      u16|a64) row go "$sc" "$peer" bench "127.0.0.1:$port" uncontended 16 "$secs" ;;
      c4) row go c4 "$peer" bench "127.0.0.1:$port" contended 4 "$secs" 1 ;;
    esac
    return
  fi
  bin=$a; [ "$who" = B ] && bin=$b
  case $sc in
    u1) row "$who" u1 "$bin" -u "$u" bench -t 1 -d "${secs}s" --json uncontended ;;
    u16) row "$who" u16 "$bin" -u "$u" bench -t 16 -d "${secs}s" --json uncontended ;;
    a64) row "$who" a64 "$bin" -u "$u" bench --async --inflight 64 -d "${secs}s" --json uncontended ;;
    c4) row "$who" c4 "$bin" -u "$u" bench -p 4 -d "${secs}s" --hold 1ms --json contended ;;
  esac
}
for r in $(seq "$rounds"); do
  for sc in u1 u16 a64 c4; do
    case $(( r % 3 )) in
      1) order="go A B" ;; 2) order="A B go" ;; *) order="B go A" ;;
    esac
    for who in $order; do run "$who" "$sc"; done
  done
done
