#!/usr/bin/env bash
# compare.sh: dlock beside its peers, in one run, against one private
# redis-server. Prints one JSON line per measurement (dlock bench --json and
# the peers' lockbench.js), then a summary table.
#   bench/compare.sh [SECS]          (default 5)
#   PIN=1 bench/compare.sh [SECS]    server on CPU 1, every client on CPU 0
#   NICE=-10 bench/compare.sh [SECS] the server at nice -10, above its clients
# Needs: a built build/dlock; node and npm for the peers (skipped without);
# taskset (util-linux) for PIN=1; root (renice) for a negative NICE.
set -u
cd "$(dirname "$0")/.."
SECS=${1:-5}
DLOCK=${DLOCK:-build/dlock}
PEERS=${PEERS:-../shared/peers/node}
set --  # redis-tmp.sh passes its arguments to redis-server
. scripts/redis-tmp.sh
OUT=$TMP/results.jsonl
# PIN=1: a core for the server and a core for the clients, dlock's and the
# peers' alike, so that no client thread is woken on the server's core.
ON=()
if [ "${PIN:-0}" = 1 ]; then
  taskset -pc 1 "$SERVER" >/dev/null
  ON=(taskset -c 0)
fi
# NICE=N: the server shares the cores, but a client thread woken on its core
# no longer preempts it as an equal (as on a host whose main service it is).
if [ -n "${NICE:-}" ]; then
  renice -n "$NICE" -p "$SERVER" >/dev/null || exit 1
fi

dl() { "${ON[@]}" "$DLOCK" -u "$URL" bench --json -d "${SECS}s" "$@" | tee -a "$OUT"; }
peer() {
  [ -d "$TMP/peer/node_modules" ] || return 0
  local line
  line=$(cd "$TMP/peer" && env PORT="$PORT" SECS="$SECS" "$@" "${ON[@]}" node lockbench.js) || return 0
  echo "$line" | tee -a "$OUT"
}

if command -v node >/dev/null && [ -d "$PEERS" ]; then
  cp -r "$PEERS" "$TMP/peer"
  (cd "$TMP/peer" && npm install --no-audit --no-fund --silent >/dev/null 2>&1) \
    || echo "npm install failed: peers skipped" >&2
fi

dl uncontended
peer LIB=redlock MODE=uncontended WORKERS=1
peer LIB=semaphore MODE=uncontended WORKERS=1
dl -t 64 uncontended
dl -t 64 -c 4 uncontended
peer LIB=redlock MODE=uncontended WORKERS=64
peer LIB=semaphore MODE=uncontended WORKERS=64
dl -p 8 -t 1 --hold 1ms contended
dl -p 8 -t 4 --hold 1ms contended
peer LIB=redlock MODE=contended PROCS=8 HOLD_MS=1
peer LIB=semaphore MODE=contended PROCS=8 HOLD_MS=1
"${ON[@]}" "$DLOCK" -u "$URL" bench --json -k 100000 --lease 2s --periods 3 watchdog | tee -a "$OUT"

python3 - "$OUT" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith('{')]
print()
print(f"{'who':<34}{'cycles/s':>10}{'p50 us':>10}{'p99 us':>11}{'max us':>12}{'srv us/op':>10}{'util':>7}")
for r in rows:
    if 'lib' in r:
        who = f"{r['lib']} {r['mode']} {r['procs']}p x {r['workers']}w"
        cps, cpu, util = r['cycles_per_sec'], r['server_cpu_us_per_cycle'], r.get('utilisation')
    else:
        who = f"dlock {r['scenario']} {r['processes']}p x {r['threads']}t"
        if r.get('starvation_ms', 20) != 20:
            who += f" starv {r['starvation_ms']}ms"
        cps, cpu, util = r['ops_per_sec'], r['server_cpu_us_per_op'], r.get('utilisation')
        if r['scenario'] == 'watchdog':
            print(f"{'dlock watchdog':<34}{r['locks']:>10} locks, lost {r['lost']}, "
                  f"{r['renewal_round_trips_per_period']:.0f} round trips/period, "
                  f"{r['bytes_per_lock']:.0f} B/lock, client CPU {100*r['client_cpu_share']:.1f}%")
            continue
    u = f"{util:.3f}" if util is not None else ""
    print(f"{who:<34}{cps:>10.0f}{r['p50_us']:>10.0f}{r['p99_us']:>11.0f}{r['max_us']:>12.0f}{cpu:>10.2f}{u:>7}")
    if 'baseline_rtt_p50_us' in r:
        print(f"{'':<34}PING p50 {r['baseline_rtt_p50_us']:.0f} us, ceiling {r['ceiling_ops_per_sec']:.0f}/s")
PY
