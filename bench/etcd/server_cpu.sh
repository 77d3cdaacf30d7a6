#!/usr/bin/env bash
# server_cpu.sh: what a lock cycle costs the etcd server, dlock (etcd's JSON
# gateway, libcurl) beside etcd's own Go client (clientv3/concurrency over
# gRPC, tests/interop/etcd/etcdpeer.go), on one private single-member etcd,
# in one run, alternating, ROUNDS rounds: the server's CPU (utime + stime
# from /proc) over the cycles it served (from its Txn count in /metrics: a
# dlock cycle is two txns, acquire and fenced release; a Go cycle one txn
# and one DeleteRange, Mutex.Unlock),
# with T clients in flight (dlock: T processes of tests/cost/cycles, each
# N cycles, so that no bench baseline adds requests; Go: etcdpeer bench
# uncontended T 3).
#   bench/etcd/server_cpu.sh BUILD_DIR ETCDPEER [T] [ROUNDS] [N]
# BUILD_DIR has tests/cost_cycles; ETCDPEER is a built etcdpeer
# (tests/test_etcd_interop.sh shows how: go build in GOPATH mode).
set -euo pipefail
build=$1 peer=$2 t=${3:-16} rounds=${4:-3} n=${5:-250}
. "$(dirname "$0")/etcd_start.sh"
etcd_start etcdcpu
txns() { curl -s "http://127.0.0.1:$port/metrics" |
  awk '/^grpc_server_handled_total.*grpc_method="Txn"/ {s += $2} END {print s + 0}'; }
row() { # NAME CPU0 CPU1 TXN0 TXN1 MS TXNS_PER_CYCLE
  python3 -c "import sys; n=($5-$4)/$7; print('%-5s T=%s cycles %d in %d ms, %.0f cycles/s, server %.0f us of CPU a cycle' % ('$1', '$t', n, $6, n*1000/$6, ($3-$2)*1e6/n))"
}
for _ in $(seq "$rounds"); do
  c0=$(cpu) x0=$(txns) s0=$(date +%s%N)
  "$peer" bench "127.0.0.1:$port" uncontended "$t" 3 >/dev/null
  row go "$c0" "$(cpu)" "$x0" "$(txns)" $(( ($(date +%s%N) - s0) / 1000000 )) 1
  c0=$(cpu) x0=$(txns) s0=$(date +%s%N) pids=()
  for i in $(seq "$t"); do
    "$build/tests/cost_cycles" "etcd://127.0.0.1:$port" blocking "$n" "cpu$i" >/dev/null & pids+=($!)
  done
  wait "${pids[@]}"
  row dlock "$c0" "$(cpu)" "$x0" "$(txns)" $(( ($(date +%s%N) - s0) / 1000000 )) 2
done
