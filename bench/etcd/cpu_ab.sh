#!/usr/bin/env bash
# cpu_ab.sh: what a cycle of `dlock bench THREADS uncontended` on etcd://
# costs, for two dlock builds (A, B) on one private etcd, alternating,
# ROUNDS rounds: the client's CPU a cycle (the CPU of a 2 s and a 5 s run
# apart over their cycles apart, so that the bench's baselines cancel),
# the server's CPU an operation (the bench's own server_cpu_us_per_op, of
# each run) and cycles/s. CPU a cycle tells through a loaded machine's
# noise where cycles/s does not.
#   bench/etcd/cpu_ab.sh DLOCK_A DLOCK_B [ROUNDS] [THREADS]
set -euo pipefail
a=$1 b=$2 rounds=${3:-3} t=${4:-16}
. "$(dirname "$0")/etcd_start.sh"
etcd_start etcdcpu
u="etcd://127.0.0.1:$port"
# BIN SECS: "client_cpu_s cycles cycles_per_s server_us_per_op"
one() {
  local out
  out=$({ /usr/bin/time -f "TIME %U %S" "$1" -u "$u" bench -t "$t" \
    -d "${2}s" --json uncontended; } 2>&1)
  python3 - "$2" "$out" <<'PY'
import json, sys
secs, out = float(sys.argv[1]), sys.argv[2].splitlines()
t = [l for l in out if l.startswith("TIME")][0].split()
j = json.loads([l for l in out if l.startswith("{")][-1])
r = j.get("ops_per_sec", 0)
print(float(t[1]) + float(t[2]), r * secs, r, j.get("server_cpu_us_per_op", 0))
PY
}
for _ in $(seq "$rounds"); do
  for who in A B; do
    bin=$a; [ "$who" = B ] && bin=$b
    read -r c2 n2 r2 s2 < <(one "$bin" 2)
    read -r c5 n5 r5 s5 < <(one "$bin" 5)
    python3 -c "import sys; w,c2,n2,c5,n5=sys.argv[1],*map(float,sys.argv[2:6]); \
print('%s -t $t: client %.0f us CPU/cycle, server $s2/$s5 us/op, $r2/$r5 cycles/s' \
% (w, (c5 - c2) * 1e6 / max(1, n5 - n2)))" "$who" "$c2" "$n2" "$c5" "$n5"
  done
done
