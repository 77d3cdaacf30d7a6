#!/usr/bin/env bash
# grpc_vs_json.sh: the spike's measurement (docs/PERFORMANCE.md, etcd): a
# lock cycle over etcd's gRPC API carried by libcurl (HTTP/2, one
# connection, protobuf-c; grpc_probe grpc) beside the same cycle over the
# JSON gateway as src/etcd sends it (HTTP/1.1, json-c; grpc_probe json),
# etcd's own Go client (etcdpeer bench uncontended) and, given its
# cost_cycles, dlock itself; on one private single-member etcd, in one
# run, alternating, ROUNDS rounds, at 1 and at 16 cycles in flight. Per
# row: cycles/s; the server's CPU (utime + stime from /proc) per cycle and
# per request (its request counts from /metrics); the client's CPU per
# cycle (/usr/bin/time, the whole process). A cycle is dlock's two txns
# (acquire, fenced release), Go's one txn and one delete; grpcdel is the
# gRPC row with Go's release (a plain delete), to tell the transport's cost
# from the fenced release's; cork is the gRPC row with the socket corked
# between curl_multi_perform calls (GW_CORK=1, grpc_wire.c), so that a
# request's frames leave in one segment.
# First runs `grpc_probe check` (every call and both streams, checked;
# the script fails when a check does): ROUNDS 0 runs only that (ctest
# test_etcd_grpc_probe).
#   bench/etcd/grpc_vs_json.sh GRPC_PROBE [ETCDPEER|-] [ROUNDS] [COST_CYCLES]
# GRPC_PROBE: the build's tests/grpc_probe (built when protobuf-c is found);
# ETCDPEER: a built etcdpeer (tests/test_etcd_interop.sh shows how), - for
# none.
set -euo pipefail
probe=$1 peer=${2:--} rounds=${3:-3} cycles=${4:-}
. "$(dirname "$0")/etcd_start.sh"
etcd_start etcdgrpc
url=http://127.0.0.1:$port
"$probe" check "$url"
# Requests served: "TXN ALL" (every unary KV and Lease call).
reqs() { curl -s "$url/metrics" | awk '/^grpc_server_handled_total/ && /grpc_type="unary"/ {
  a += $2; if ($0 ~ /grpc_method="Txn"/) t += $2 } END {print t + 0, a + 0}'; }
# NAME T TXNS_PER_CYCLE COMMAND...: one row.
row() {
  local name=$1 t=$2 per=$3; shift 3
  local c0 r0 s0 r1 c1 ms
  c0=$(cpu) r0=$(reqs) s0=$(date +%s%N)
  /usr/bin/time -f '%U %S' -o "$dir/time" "$@" >/dev/null
  ms=$(( ($(date +%s%N) - s0) / 1000000 )) c1=$(cpu) r1=$(reqs)
  python3 - "$name" "$t" "$per" "$c0" "$c1" "$ms" $r0 $r1 $(cat "$dir/time") <<'EOF'
import sys
name, t, per, c0, c1, ms, t0, a0, t1, a1, u, s = sys.argv[1:]
txn, req = float(t1) - float(t0), float(a1) - float(a0)
n = txn / float(per)
srv, cli = (float(c1) - float(c0)) * 1e6, (float(u) + float(s)) * 1e6
print('%-7s T=%-2s %6.0f cycles/s  server %5.0f us CPU/cycle, %4.0f us/request  '
      'client %5.0f us CPU/cycle  (%.1f requests/cycle)'
      % (name, t, n * 1000 / int(ms), srv / n, srv / req, cli / n, req / n))
EOF
}
for _ in $(seq "$rounds"); do
  for t in 1 16; do
    n=$(( t == 1 ? 600 : 60 ))
    row grpc "$t" 2 "$probe" bench grpc "$url" "$t" "$n"
    row cork "$t" 2 env GW_CORK=1 "$probe" bench grpc "$url" "$t" "$n"
    row grpcdel "$t" 1 "$probe" bench grpcdel "$url" "$t" "$n"
    row json "$t" 2 "$probe" bench json "$url" "$t" "$n"
    [ "$peer" = - ] || row go "$t" 1 "$peer" bench "127.0.0.1:$port" uncontended "$t" 2
    if [ -n "$cycles" ]; then
      row dlock "$t" 2 bash -c 'for i in $(seq '"$t"'); do
        "$0" "etcd://127.0.0.1:'"$port"'" blocking '"$n"' cpu$i & done; wait' "$cycles"
    fi
  done
done
