#!/usr/bin/env bash
# calls_ab.sh: what a cycle of 16-thread uncontended locking costs the
# server, for etcd's Go client (etcdpeer bench) and each dlock build given,
# alternating on one private etcd, ROUNDS rounds: the gRPC calls the server
# started, by method (etcd's own grpc_server_started_total), and the
# server's CPU (from /proc), each over the difference of a 2 s and a 5 s
# run, so that dlock bench's baselines cancel; and each run's cycles/s.
#   bench/etcd/calls_ab.sh ETCDPEER ROUNDS DLOCK...
set -euo pipefail
peer=$1 rounds=$2
shift 2
. "$(dirname "$0")/etcd_start.sh"
etcd_start etcdcalls
u="etcd://127.0.0.1:$port"
started() { # the server's started calls, one "name count" a method
  curl -s "http://127.0.0.1:$port/metrics" |
    awk '/^grpc_server_started_total/ { printf "%s;", $0 }'
}
one() { # WHO SECS: "JSON|calls before|calls after|cpu before|cpu after"
  local a c0 out
  a=$(started)
  c0=$(cpu)
  if [ "$1" = go ]; then
    out=$("$peer" bench "127.0.0.1:$port" uncontended 16 "$2" 2>/dev/null | tail -1)
  else
    out=$("$1" -u "$u" bench -t 16 -d "$2s" --json uncontended 2>/dev/null | tail -1)
  fi
  echo "$out|$a|$(started)|$c0|$(cpu)"
}
for _ in $(seq "$rounds"); do
  for who in go "$@"; do
    x2=$(one "$who" 2)
    x5=$(one "$who" 5)
    python3 - "$who" "$x2" "$x5" <<'PY'
import json, re, sys
who, x2, x5 = sys.argv[1:]
def calls(t):
    d = {}
    for line in t.split(';'):
        m = re.search(r'grpc_method="(\w+)".*\}\s+(\S+)', line)
        if m:
            d[m.group(1)] = d.get(m.group(1), 0) + float(m.group(2))
    return d
def run(x, secs):
    out, a, b, c0, c1 = x.split('|')
    j = json.loads(out)
    r = j.get('ops_per_sec', j.get('cycles_per_sec', 0))
    A, B = calls(a), calls(b)
    return r, r * secs, {k: B[k] - A.get(k, 0) for k in B}, float(c1) - float(c0)
r2, n2, m2, c2 = run(x2, 2)
r5, n5, m5, c5 = run(x5, 5)
d = max(1, n5 - n2)
per = {k: (m5.get(k, 0) - m2.get(k, 0)) / d for k in set(m2) | set(m5)}
print('%-16s %5.0f / %5.0f cycles/s  server %4.0f us CPU/cycle  calls/cycle: %s'
      % (who[-16:], r2, r5, (c5 - c2) * 1e6 / d,
         ' '.join('%s %.3f' % (k, v) for k, v in sorted(per.items())
                  if abs(v) > 0.0005)))
PY
  done
done
