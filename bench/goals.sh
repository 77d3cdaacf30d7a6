#!/usr/bin/env bash
# goals.sh: the single-server lock against its limits, each figure a ratio
# measured in the same run as its limit, against one private redis-server
# (docs/PERFORMANCE.md, "Current figures"). ROUNDS rounds, each of every
# row; the summary gives each ratio's range over the rounds.
#   bench/goals.sh [ROUNDS]        (default 3; SECS=3 seconds a row)
set -u
cd "$(dirname "$0")/.."
ROUNDS=${1:-3}
SECS=${SECS:-3}
DLOCK=${DLOCK:-build/dlock}
set -- # redis-tmp.sh passes its arguments to redis-server
. scripts/redis-tmp.sh
OUT=$TMP/goals.jsonl
dl() { "$DLOCK" -u "$URL" bench --json "$@" | sed "s/^{/{\"row\":\"$ROW\",/" >>"$OUT"; }
for _ in $(seq "$ROUNDS"); do
  ROW=one dl -d "${SECS}s" -t 1 uncontended
  ROW=t64 dl -d "${SECS}s" -t 64 uncontended
  ROW=a64 dl -d "${SECS}s" --async --inflight 64 uncontended
  ROW=a1024 dl -d "${SECS}s" --async --inflight 1024 uncontended
  ROW=cont dl -d "${SECS}s" -p 8 --hold 1ms contended
done
ROW=wd dl -k 100000 --lease 2s --periods 3 watchdog

python3 - "$OUT" <<'PY'
import json, statistics, sys
rows = {}
for line in open(sys.argv[1]):
    d = json.loads(line)
    rows.setdefault(d['row'], []).append(d)
def rng(vals, fmt='%.2f'):
    # The range over the rounds, and its median when there are three or
    # more (the shared machine's noise moves single rounds).
    vals = sorted(vals)
    if len(vals) == 1:
        return fmt % vals[0]
    r = (fmt + ' to ' + fmt) % (vals[0], vals[-1])
    if len(vals) >= 3:
        r += (' (median ' + fmt + ')') % statistics.median(vals)
    return r
print('| row | figure | goal |')
print('|---|---|---|')
one = rows.get('one', [])
print('| 1 thread | p50 %s x two PING round trips (p50 %s us, PING %s us) | <= 1.15 |' % (
    rng([d['p50_us'] / (2 * d['baseline_rtt_p50_us']) for d in one]),
    rng([d['p50_us'] for d in one], '%.0f'), rng([d['baseline_rtt_p50_us'] for d in one], '%.0f')))
# The floor of one thread's cycle: its two round trips plus what the server
# spends executing the cycle (the ceiling's server CPU per cycle, measured
# in the same run): no client can go below it.
fl = [d for d in one if d.get('ceiling_server_cpu_us_per_cycle')]
if fl:
    print('| 1 thread, against its floor | p50 %s x (two PINGs + the server\'s CPU per cycle, %s us) | |' % (
        rng([d['p50_us'] / (2 * d['baseline_rtt_p50_us'] + d['ceiling_server_cpu_us_per_cycle']) for d in fl]),
        rng([d['ceiling_server_cpu_us_per_cycle'] for d in fl], '%.1f')))
# The floor measured: the cycle's own two scripts in series on a plain
# connection (series_p50_us), the same run.
se = [d for d in one if d.get('series_p50_us')]
if se:
    print('| 1 thread, against its steps in series | p50 %s x the two scripts one after the other (%s us) | |' % (
        rng([d['p50_over_series'] for d in se]), rng([d['series_p50_us'] for d in se], '%.0f')))
t64 = rows.get('t64', [])
print('| 64 threads | %s x the ceiling (%s cycles/s) | |' % (
    rng([d['ops_per_sec'] / d['ceiling_ops_per_sec'] for d in t64]),
    rng([d['ops_per_sec'] for d in t64], '%.0f')))
allr = [d for r in rows.values() for d in r if d.get('redisson_ceiling_ops_per_sec')]
print('| the ceiling | %s x Redisson\'s cycle pipelined the same way (server CPU per cycle %s us, Redisson\'s %s us) | >= 1.0 |' % (
    rng([d['ceiling_over_redisson'] for d in allr]),
    rng([d['ceiling_server_cpu_us_per_cycle'] for d in allr]),
    rng([d['redisson_server_cpu_us_per_cycle'] for d in allr])))
for key, n in (('a64', 64), ('a1024', 1024)):
    a = rows.get(key, [])
    print('| event loop, %d in flight | %s x the ceiling | >= 0.9 |' % (
        n, rng([d['ops_per_sec'] / d['ceiling_ops_per_sec'] for d in a])))
c = rows.get('cont', [])
print('| 8 processes x 1 ms holds | utilisation %s; wait p99 %s ms (2 x N x hold = 16 ms) | >= 0.9 |' % (
    rng([d['utilisation'] for d in c], '%.3f'), rng([d['wait_p99_us'] / 1000 for d in c], '%.1f')))
cl = [d for d in c if d.get('utilisation_limit')]
if cl:
    print('| 8 processes, against the hand-off\'s floor | utilisation %s x its limit %s (floor p50 %s us) | |' % (
        rng([d['utilisation_over_limit'] for d in cl]), rng([d['utilisation_limit'] for d in cl], '%.3f'),
        rng([d['handoff_floor_p50_us'] for d in cl], '%.0f')))
for d in rows.get('wd', []):
    rt = d['renewal_round_trips_per_period']
    print('| watchdog, %d locks | %d lost, %.0f bytes each, %s renewals per round trip | 0 lost, <= 256 bytes |' % (
        d['locks'], d['lost'], d['bytes_per_lock'],
        '%.1f' % (d['locks'] / rt) if rt else 'no renewal round (errors %d)' % d['errors']))
PY
