#!/usr/bin/env bash
# compare.sh: dlock on a 3-master Redis Cluster beside dlock on one Redis
# server, in one run, alternating: uncontended with T threads (locks spread
# over the slots: each thread its own name) and P processes. Each round
# also measures the servers' own ceilings: one master's (the lock's
# acquire+release scripts pipelined on one connection) and every master's
# at once (a thread per master): what the servers can execute together on
# this machine, without the client library's cost. Prints one JSON line
# per measurement, then the ratios issue 19 sets (cluster >= 2.4 x one
# master).
#   bench/cluster/compare.sh [SECS] [ROUNDS] [THREADS] [PROCS]
#   (defaults 5 3 64 1)
# Needs a built build/dlock (DLOCK= to change) and redis-server.
set -u
cd "$(dirname "$0")/../.."
SECS=${1:-5}
ROUNDS=${2:-3}
THREADS=${3:-64}
PROCS=${4:-1}
DLOCK=${DLOCK:-build/dlock}
TMP=$(mktemp -d /tmp/dlock-clbench-XXXXXX)
PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do kill -9 "$p" 2>/dev/null; wait "$p" 2>/dev/null; done
  rm -rf "$TMP"
}
trap cleanup EXIT
free_port() { # a port whose cluster bus port (+10000) is free too
  python3 - <<'PY'
import socket
while True:
    s = socket.socket(); s.bind(("127.0.0.1", 0)); p = s.getsockname()[1]
    if p + 10000 > 65535: s.close(); continue
    t = socket.socket()
    try: t.bind(("127.0.0.1", p + 10000))
    except OSError: s.close(); continue
    t.close(); s.close(); print(p); break
PY
}
start() { # start DIR PORT ARGS...: a redis-server, waited for
  local dir=$1 port=$2; shift 2
  mkdir -p "$dir"
  redis-server --port "$port" --bind 127.0.0.1 --dir "$dir" --save '' \
    --appendonly no --logfile "$dir/log" "$@" &
  PIDS+=($!)
  for _ in $(seq 200); do
    redis-cli -p "$port" ping >/dev/null 2>&1 && return 0
    sleep 0.02
  done
  echo "redis-server on $port did not start" >&2; exit 1
}
single=$(free_port)
start "$TMP/single" "$single"
ports=()
for i in 0 1 2; do
  p=$(free_port)
  ports+=("$p")
  start "$TMP/n$i" "$p" --cluster-enabled yes --cluster-config-file nodes.conf \
    --cluster-node-timeout 2000
done
redis-cli -p "${ports[0]}" cluster addslotsrange 0 5460 >/dev/null
redis-cli -p "${ports[1]}" cluster addslotsrange 5461 10922 >/dev/null
redis-cli -p "${ports[2]}" cluster addslotsrange 10923 16383 >/dev/null
redis-cli -p "${ports[0]}" cluster meet 127.0.0.1 "${ports[1]}" >/dev/null
redis-cli -p "${ports[0]}" cluster meet 127.0.0.1 "${ports[2]}" >/dev/null
for _ in $(seq 200); do
  ok=1
  for p in "${ports[@]}"; do
    redis-cli -p "$p" cluster info | grep -q cluster_state:ok || ok=0
  done
  [ $ok = 1 ] && break
  sleep 0.05
done
[ $ok = 1 ] || { echo "the cluster did not form" >&2; exit 1; }
cluster="redis-cluster://127.0.0.1:${ports[0]},127.0.0.1:${ports[1]},127.0.0.1:${ports[2]}"
OUT=$TMP/results.jsonl
for r in $(seq "$ROUNDS"); do
  for target in single cluster; do
    url=redis://127.0.0.1:$single
    [ $target = cluster ] && url=$cluster
    line=$("$DLOCK" -u "$url" bench --json -t "$THREADS" -p "$PROCS" \
      -d "${SECS}s" uncontended) || { echo "bench failed on $url" >&2; exit 1; }
    line=${line%\}},\"target\":\"$target\",\"round\":$r\}
    echo "$line" | tee -a "$OUT"
  done
done
python3 - "$OUT" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
rounds = sorted({r["round"] for r in rows})
print("\nround  single ops/s  cluster ops/s  ratio | one master's ceiling  all masters' ceiling  ratio | cluster ops / all masters' ceiling")
for n in rounds:
    s = next(r for r in rows if r["round"] == n and r["target"] == "single")
    c = next(r for r in rows if r["round"] == n and r["target"] == "cluster")
    cc = c.get("cluster_ceiling_ops_per_sec", 0)
    print(f"{n:5d}  {s['ops_per_sec']:12.0f}  {c['ops_per_sec']:13.0f}  {c['ops_per_sec']/s['ops_per_sec']:5.2f} |"
          f" {s['ceiling_ops_per_sec']:20.0f}  {cc:20.0f}  {cc/s['ceiling_ops_per_sec'] if s['ceiling_ops_per_sec'] else 0:5.2f} |"
          f" {c['ops_per_sec']/cc if cc else 0:.2f}")
PY
