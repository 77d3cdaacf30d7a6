#!/usr/bin/env bash
# compare.sh: dlock on redlock:// beside npm redlock over the same 3 and 5
# private redis-servers, in one run. Prints one JSON line per measurement,
# then a table with the ratios the Redlock issue sets:
#  - 1 thread: a lock+unlock cycle against 2 round trips of the slowest
#    server (PING p50), against 2 round trips of a PING sent to every
#    server at once (what a fan-out costs on this machine: with more
#    servers than cores, they cannot all answer at once), and against the
#    cycle's own steps in series, each to every server until a quorum
#    answered (series_p50_us: acquire, the token's write-back with
#    fencing, release); cycles/s against npm redlock's;
#  - 64 threads: cycles/s against npm redlock's with 64 workers;
#  - contended (8 processes, hold 1 ms): the lock's utilisation.
#   bench/redlock/compare.sh [SECS]     (default 5)
# Needs a built build/dlock (DLOCK= to change); node and npm for the peer
# (skipped without).
set -u
cd "$(dirname "$0")/../.."
SECS=${1:-5}
DLOCK=${DLOCK:-build/dlock}
TMP=$(mktemp -d /tmp/dlock-rlbench-XXXXXX)
PIDS=()
cleanup() {
  local p
  for p in "${PIDS[@]}"; do kill -9 "$p" 2>/dev/null; wait "$p" 2>/dev/null; done
  rm -rf "$TMP"
}
trap cleanup EXIT
free_port() { python3 -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])'; }
PORTS=()
for i in 1 2 3 4 5; do
  p=$(free_port)
  mkdir -p "$TMP/s$i"
  redis-server --port "$p" --bind 127.0.0.1 --dir "$TMP/s$i" --save '' \
    --appendonly no --logfile "$TMP/s$i/redis.log" --daemonize no &
  PIDS+=($!)
  PORTS+=("$p")
done
for p in "${PORTS[@]}"; do
  for _ in $(seq 250); do
    redis-cli -p "$p" ping 2>/dev/null | grep -q PONG && break
    sleep 0.02
  done
done

PEER=0
if command -v node >/dev/null; then
  cp bench/redlock/peer.js bench/redlock/package.json "$TMP/"
  if (cd "$TMP" && npm install --no-audit --no-fund --silent >/dev/null 2>&1); then
    PEER=1
  else
    echo "npm install failed: the peer is skipped" >&2
  fi
fi

OUT=$TMP/results.jsonl
for n in 3 5; do
  url=redlock://$(printf '127.0.0.1:%s,' "${PORTS[@]:0:n}")
  url=${url%,}
  ports=$(IFS=,; echo "${PORTS[*]:0:n}")
  for t in 1 64; do
    "$DLOCK" -u "$url" bench --json -d "${SECS}s" -t "$t" uncontended |
      sed "s/^{/{\"servers\":$n,/" | tee -a "$OUT"
    [ "$PEER" = 1 ] && (cd "$TMP" && PORTS=$ports WORKERS=$t SECS=$SECS node peer.js) |
      tee -a "$OUT"
  done
  "$DLOCK" -u "$url?fencing=off" bench --json -d "${SECS}s" uncontended |
    sed "s/^{/{\"servers\":$n,\"fencing\":\"off\",/" | tee -a "$OUT"
  "$DLOCK" -u "$url" bench --json -d "${SECS}s" -p 8 -t 1 --hold 1ms contended |
    sed "s/^{/{\"servers\":$n,/" | tee -a "$OUT"
done

python3 - "$OUT" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith('{')]
def find(**kw):
    for r in rows:
        if all(r.get(k) == v for k, v in kw.items()):
            return r
print()
print(f"{'who':<44}{'cycles/s':>10}{'p50 us':>9}{'p99 us':>9}  ratio")
for n in (3, 5):
    for r in rows:
        if r.get('servers') != n:
            continue
        if r.get('lib'):
            who = f"npm redlock, {n} servers, {r['workers']} workers"
            print(f"{who:<44}{r['cycles_per_sec']:>10}{r['p50_us']:>9.0f}{r['p99_us']:>9.0f}")
            continue
        sc, t = r['scenario'], r['threads']
        who = f"dlock {sc}, {n} servers, {r['processes']}p x {t}t"
        if r.get('fencing') == 'off':
            who += ', fencing off'
        ratio = ''
        if sc == 'uncontended' and t == 1:
            f = r.get('baseline_fanout_rtt_p50_us', 0)
            ratio = (f"p50 = {r['p50_us'] / (2 * r['baseline_rtt_p50_us']):.2f} x 2 RTT "
                     f"({r['baseline_rtt_p50_us']:.0f} us), "
                     f"{r['p50_us'] / (2 * f):.2f} x 2 fan-out RTT ({f:.0f} us)")
            if r.get('series_p50_us'):
                ratio += (f", {r['p50_over_series']:.2f} x its steps in series "
                          f"({r['series_p50_us']:.0f} us)")
        if sc == 'uncontended' and r.get('fencing') != 'off':
            p = find(lib='npm-redlock', servers=n, workers=t)
            if p:
                ratio += f"{'; ' if ratio else ''}{r['ops_per_sec'] / p['cycles_per_sec']:.2f} x npm redlock"
        if sc == 'contended':
            ratio = f"utilisation {r.get('utilisation', 0):.3f}"
        print(f"{who:<44}{r['ops_per_sec']:>10}{r['p50_us']:>9.0f}{r['p99_us']:>9.0f}  {ratio}")
PY
