#!/usr/bin/env bash
# client_ab.sh: what the client itself spends a lock cycle on etcd://, 16
# at once: dlock's 16 threads (`dlock bench -t 16`), dlock's event loop
# with 16 in flight (`--async --inflight 16`) and etcd's own Go client's
# 16 goroutines (etcdpeer bench), on one private single-member etcd,
# ROUNDS rounds in turn. perf stat counts each client's CPU (task-clock)
# and its context switches; each is run for SECS seconds and for 1 s,
# and the difference is divided by the difference in cycles (dlock's
# bench measures its limits before the cycles: this leaves them out).
#   bench/etcd/client_ab.sh DLOCK ETCDPEER [ROUNDS] [SECS]
set -euo pipefail
d=$1 peer=$2 rounds=${3:-2} secs=${4:-6}
. "$(dirname "$0")/etcd_start.sh"
etcd_start etcdcli
# TAG SECONDS COMMAND...: perf stat's counts and the command's JSON line.
one() {
  local tag=$1 s=$2; shift 2
  perf stat -e context-switches,task-clock -x, -o "$dir/$tag.$s.stat" "$@" \
    >"$dir/$tag.$s.out" 2>/dev/null
}
for r in $(seq "$rounds"); do
  for s in "$secs" 1; do
    one go "$s" "$peer" bench "127.0.0.1:$port" uncontended 16 "$s"
    one threads "$s" "$d" -u "etcd://127.0.0.1:$port" bench -t 16 -d "${s}s" --json uncontended
    one loop "$s" "$d" -u "etcd://127.0.0.1:$port" bench --async --inflight 16 -d "${s}s" --json uncontended
  done
  python3 - "$dir" "$secs" "$r" <<'PY'
import json, sys
dir, secs, r = sys.argv[1], float(sys.argv[2]), sys.argv[3]
def stat(f):
    d = {}
    for l in open(f):
        p = l.strip().split(',')
        if len(p) > 3 and p[2] in ('context-switches', 'task-clock'):
            d[p[2]] = float(p[0])
    return d
def rate(f):
    j = json.loads(open(f).read().strip().splitlines()[-1])
    return j.get('ops_per_sec', j.get('cycles_per_sec'))
out = []
for tag, name in (('go', 'Go 16 goroutines'), ('threads', 'dlock 16 threads'), ('loop', 'dlock event loop, 16 in flight')):
    sl, s1 = stat('%s/%s.%g.stat' % (dir, tag, secs)), stat('%s/%s.1.stat' % (dir, tag))
    rl, r1 = rate('%s/%s.%g.out' % (dir, tag, secs)), rate('%s/%s.1.out' % (dir, tag))
    n = rl * secs - r1
    out.append('%s: %.0f cycles/s, %.0f us of CPU and %.1f context switches a cycle' % (
        name, rl, (sl['task-clock'] - s1['task-clock']) * 1000 / n,
        (sl['context-switches'] - s1['context-switches']) / n))
print('round %s: %s' % (r, '; '.join(out)))
PY
done
