#!/usr/bin/env bash
# compare.sh: dlock through Redis Sentinel beside dlock on the same master
# named directly, in one run, alternating: 1 thread (p50 against two PINGs
# and against the cycle's two scripts in series) and 64 threads (cycles/s
# against the master's ceiling). A private master and one sentinel
# watching it (quorum 1), on loopback. Prints one JSON line per
# measurement, then each ratio's range over the rounds.
#   bench/sentinel/compare.sh [SECS] [ROUNDS]     (defaults 3 3)
# Needs a built build/dlock (DLOCK= to change), redis-server and
# redis-sentinel.
set -u
cd "$(dirname "$0")/../.."
SECS=${1:-3}
ROUNDS=${2:-3}
DLOCK=${DLOCK:-build/dlock}
set -- # redis-tmp.sh passes its arguments to redis-server
. scripts/redis-tmp.sh
SPORT=$(python3 -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])')
cat >"$TMP/sentinel.conf" <<EOF
port $SPORT
bind 127.0.0.1
dir $TMP
sentinel monitor bench 127.0.0.1 $PORT 1
EOF
redis-sentinel "$TMP/sentinel.conf" --logfile "$TMP/sentinel.log" \
  --daemonize no &
SENTINEL=$!
trap 'kill -9 "$SENTINEL" 2>/dev/null; wait "$SENTINEL" 2>/dev/null; redis_tmp_cleanup' EXIT
for _ in $(seq 250); do
  redis-cli -p "$SPORT" sentinel get-master-addr-by-name bench 2>/dev/null |
    grep -q "$PORT" && break
  sleep 0.02
done
SURL=redis-sentinel://127.0.0.1:$SPORT/bench
OUT=$TMP/results.jsonl
for _ in $(seq "$ROUNDS"); do
  for via in sentinel direct; do
    url=$URL
    [ "$via" = sentinel ] && url=$SURL
    for t in 1 64; do
      "$DLOCK" -u "$url" bench --json -d "${SECS}s" -t "$t" uncontended |
        sed "s/^{/{\"via\":\"$via\",/" | tee -a "$OUT"
    done
  done
done
python3 - "$OUT" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith('{')]
def rng(v, f='%.2f'):
    v = sorted(v)
    return 'none' if not v else (f % v[0]) if len(v) == 1 else (f + ' to ' + f) % (v[0], v[-1])
print()
for via in ('sentinel', 'direct'):
    one = [r for r in rows if r['via'] == via and r['threads'] == 1]
    t64 = [r for r in rows if r['via'] == via and r['threads'] == 64]
    print(f"{via:>8}, 1 thread: p50 {rng([r['p50_us'] for r in one], '%.0f')} us, "
          f"{rng([r['p50_us'] / (2 * r['baseline_rtt_p50_us']) for r in one])} x two PINGs, "
          f"{rng([r['p50_over_series'] for r in one if r.get('p50_over_series')])} x the scripts in series")
    print(f"{via:>8}, 64 threads: {rng([r['ops_per_sec'] for r in t64], '%.0f')} cycles/s, "
          f"{rng([r['ops_per_sec'] / r['ceiling_ops_per_sec'] for r in t64])} x the master's ceiling")
PY
