#!/usr/bin/env bash
# limits_ab.sh: `dlock bench uncontended` on etcd:// (1 and 16 threads),
# whose JSON carries the server's limits measured in the same run (a
# write txn's round trip, the lock's two txns in series and from 16
# threads, the server's CPU: src/etcd/probe.h), beside etcd's own Go
# client (etcdpeer bench) on one private single-member etcd, alternating
# (the order turns each round), ROUNDS rounds of SECS seconds; then the
# medians and each figure's ratio to its limit (docs/PERFORMANCE.md).
#   bench/etcd/limits_ab.sh DLOCK ETCDPEER [ROUNDS] [SECS]
set -euo pipefail
d=$1 peer=$2 rounds=${3:-3} secs=${4:-3}
. "$(dirname "$0")/etcd_start.sh"
etcd_start etcdlim
for r in $(seq "$rounds"); do
  for t in 1 16; do
    order="d g"; [ $((r % 2)) = 0 ] && order="g d"
    for who in $order; do
      c0=$(cpu)
      if [ "$who" = d ]; then
        out=$("$d" -u "etcd://127.0.0.1:$port" bench -t "$t" -d "${secs}s" --json uncontended 2>/dev/null | tail -1)
      else
        out=$("$peer" bench "127.0.0.1:$port" uncontended "$t" "$secs" | tail -1)
      fi
      echo "$t $who $(echo "$(cpu) - $c0" | bc) $out" >>"$dir/rows"
    done
  done
done
python3 - "$dir/rows" "$secs" <<'PY'
import json, statistics as st, sys
rows = [l.split(' ', 3) for l in open(sys.argv[1])]
secs = float(sys.argv[2])
for t in ('1', '16'):
    D = [json.loads(r[3]) for r in rows if r[0] == t and r[1] == 'd']
    G = [(json.loads(r[3]), float(r[2])) for r in rows if r[0] == t and r[1] == 'g']
    def m(xs):
        return '%.2f (%.2f to %.2f)' % (st.median(xs), min(xs), max(xs)) if xs else '-'
    go = [g['cycles_per_sec'] for g, _ in G]
    print('%s thread(s): dlock %s cycles/s, Go %s' % (t, m([x['ops_per_sec'] for x in D]), m(go)))
    print('  dlock / Go (per round) %s' % m([x['ops_per_sec'] / g for x, g in zip(D, go)]))
    print('  write txn p50 %s us; lock p50 / 2 writes %s' % (m([x['write_rtt_p50_us'] for x in D]), m([x['p50_over_2_write_rtt'] for x in D])))
    print('  series %s cycles/s: dlock / it %s, Go / it %s' % (m([x['series_cycles_per_sec'] for x in D]), m([x['ops_over_series'] for x in D]), m([g / x['series_cycles_per_sec'] for x, g in zip(D, go)])))
    print('  ceiling (%d threads) %s cycles/s: dlock / it %s, Go / it %s' % (D[0]['ceiling_threads'], m([x['ceiling_cycles_per_sec'] for x in D]), m([x['ops_over_ceiling'] for x in D]), m([g / x['ceiling_cycles_per_sec'] for x, g in zip(D, go)])))
    print('  server CPU us: dlock %s an op, the ceiling %s a cycle, Go %s a cycle' % (m([x['server_cpu_us_per_op'] for x in D]), m([x['server_cpu_us_per_cycle'] for x in D]), m([c * 1e6 / (g['cycles_per_sec'] * secs) for g, c in G])))
PY
