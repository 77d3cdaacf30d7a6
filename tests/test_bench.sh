#!/usr/bin/env bash
# test_bench.sh: dlock bench runs each scenario, prints the documented JSON
# fields and draws its plot. Usage: test_bench.sh PATH/TO/dlock
set -u
DLOCK=$(realpath "$1")
set --  # redis-tmp.sh passes its arguments to redis-server
. "$(dirname "$0")/../scripts/redis-tmp.sh"
export DLOCK_URL=redis://127.0.0.1:$PORT
passed=0 failed=0
check() { # check NAME PYTHON-ASSERTIONS -- dlock args...
  local name=$1 py=$2; shift 3
  local out
  out=$("$DLOCK" bench --json "$@" 2>"$TMP/err")
  if python3 -c "
import json,sys
rows=[json.loads(l) for l in sys.argv[1].splitlines()]
for r in rows:
    for k in ('scenario','threads','processes','ops_per_sec','p50_us','p99_us','max_us',
              'baseline_rtt_p50_us','ceiling_ops_per_sec','server_cpu_us_per_op','errors'):
        assert k in r, k
    assert r['errors']==0 and r['ceiling_ops_per_sec']>0 and r['baseline_rtt_p50_us']>0, r
$py
" "$out"; then echo "ok   $name"; passed=$((passed+1))
  else echo "FAIL $name: $out $(cat "$TMP/err")"; failed=$((failed+1)); fi
}
check uncontended "r=rows[0]; assert r['ops_per_sec']>0 and r['p50_us']>0 and r['series_p50_us']>0 and r['p50_over_series']>0" -- -d 300ms uncontended
check uncontended_threads "assert rows[0]['threads']==4" -- -d 300ms -t 4 -c 2 uncontended
check contended "r=rows[0]; assert r['processes']==2 and 0<r['utilisation']<=1 and r['handoff_floor_p50_us']>0 and 0<r['utilisation_limit']<1 and r['utilisation_over_limit']>0 and r['wakeups_per_acquire']>=0 and 0 <= r['wait_p50_us'] <= r['wait_p99_us'] <= r['wait_max_us']" -- -d 500ms -p 2 -t 2 --hold 1ms contended
check contended_fair "r=rows[0]; assert r['kind']=='fair' and r['errors']==0 and r['ops_per_sec']>0" -- -d 500ms -p 2 --kind fair contended
check contended_semaphore "r=rows[0]; assert r['kind']=='semaphore' and r['errors']==0 and r['ops_per_sec']>0" -- -d 500ms -p 2 --kind semaphore --permits 2 contended
check contended_permits "r=rows[0]; assert r['kind']=='permits' and r['errors']==0 and r['ops_per_sec']>0" -- -d 500ms -p 2 --kind permits --permits 2 contended
# 500 locks renewed 100 a round trip: 5 a period; a round that falls on the
# measured periods' edge counts a little more (5.1 seen under ASan beside
# TSan), one a lock would be 500.
check watchdog "r=rows[0]; assert r['locks']==500 and r['lost']==0 and 0 < r['renewal_round_trips_per_period'] <= 6 and r['ops_per_sec'] > 0 and r['bytes_per_lock']>=0 and 0 <= r['client_cpu_share'] <= 1" -- -k 500 --lease 300ms --periods 2 watchdog
check async_uncontended "r=rows[0]; assert r['async'] is True and r['inflight']==64 and r['threads']==1 and r['ops_per_sec']>0 and r['p50_us']>0" -- --async -d 300ms uncontended
check async_inflight "r=rows[0]; assert r['inflight']==256 and r['ops_per_sec']>0 and r['ceiling_at_inflight_ops_per_sec']>0 and r['ops_over_ceiling_at_inflight']>0" -- --async --inflight 256 -d 300ms uncontended
check async_contended "r=rows[0]; assert r['async'] is True and r['processes']==2 and r['inflight']==1 and 0<r['utilisation']<=1" -- --async -d 500ms -p 2 --hold 1ms contended
check async_idle_waiters "r=rows[0]; assert r['scenario']=='idle-waiters' and r['waiters']==100 and 0<r['client_cpu_share']<=1 and r['server_cpu_share']>=0" -- --async --idle-waiters 100 -d 300ms
check queue "r=rows[0]; assert r['scenario']=='queue' and r['threads']==2 and min(r['queue_offers_per_sec'],r['queue_takes_per_sec'],r['rpush_per_sec'],r['blpop_per_sec'])>0 and 0 <= r['delivery_delay_p50_us'] <= r['delivery_delay_p99_us'] and r['delivery_delay_p99_us'] > 0 and r['p50_us']>0" -- -d 500ms -t 2 queue
# redlock://: the algorithm's own steps in series beside the lock, over
# this server and two more (stopped by pid): acquire, the token's
# write-back, release; without fencing, two steps.
rl_url=redlock://127.0.0.1:$PORT rl_pids=()
for i in 1 2; do
  p=$(python3 -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])')
  redis-server --port "$p" --bind 127.0.0.1 --dir "$TMP" --dbfilename "rl$i.rdb" \
    --save '' --appendonly no --logfile "$TMP/rl$i.log" --daemonize no &
  rl_pids+=($!)
  rl_url=$rl_url,127.0.0.1:$p
  for _ in $(seq 250); do redis-cli -p "$p" ping 2>/dev/null | grep -q PONG && break; sleep 0.02; done
done
DLOCK_URL=$rl_url check redlock_series "r=rows[0]; assert r['series_p50_us']>0 and r['p50_over_series']>0 and r['baseline_fanout_rtt_p50_us']>0" -- -d 300ms uncontended
DLOCK_URL="$rl_url?fencing=off" check redlock_series_unfenced "r=rows[0]; assert r['series_p50_us']>0" -- -d 300ms uncontended
DLOCK_URL=$rl_url check redlock_series_loop "r=rows[0]; assert r['async'] is True and r['series_p50_us']>0" -- --async --inflight 1 -d 300ms uncontended
DLOCK_URL=$rl_url check redlock_no_series_threads "r=rows[0]; assert 'series_p50_us' not in r" -- -d 300ms -t 2 uncontended
for p in "${rl_pids[@]}"; do kill -9 "$p" 2>/dev/null; wait "$p" 2>/dev/null; done
if command -v gnuplot >/dev/null; then
  if "$DLOCK" bench -d 200ms -t 2 --plot "$TMP/p.svg" uncontended >/dev/null 2>&1 && grep -q "<svg" "$TMP/p.svg"; then
    echo "ok   plot"; passed=$((passed+1))
  else echo "FAIL plot"; failed=$((failed+1)); fi
fi
"$DLOCK" bench --async watchdog 2>/dev/null; rc=$?
if [ "$rc" = 64 ]; then echo "ok   async_watchdog_refused"; passed=$((passed+1)); else echo "FAIL async_watchdog_refused ($rc)"; failed=$((failed+1)); fi
"$DLOCK" bench nosuchscenario 2>/dev/null; rc=$?
if [ "$rc" = 64 ]; then echo "ok   bad_scenario"; passed=$((passed+1)); else echo "FAIL bad_scenario ($rc)"; failed=$((failed+1)); fi
# etcd://: the server's limits beside the lock's cycle (a private etcd).
if command -v etcd >/dev/null &&
   [[ $("$DLOCK" -u etcd://127.0.0.1:1 status x 2>&1) != *libcurl* ]]; then
  # The bench scripts' start (bench/etcd/etcd_start.sh) in this test's own
  # dir, without their EXIT trap: stopped below by its pid.
  . "$(dirname "$0")/../bench/etcd/etcd_start.sh"
  etcd_launch "$TMP/etcd" || echo "etcd_limits: etcd not healthy" >&2
  eport=$port etcd_pid=$ep
  out=$(DLOCK_URL="etcd://127.0.0.1:$eport" "$DLOCK" bench --json -d 300ms uncontended 2>"$TMP/err")
  left=$(ETCDCTL_API=3 etcdctl --endpoints "127.0.0.1:$eport" get --prefix dlock-bench-probe --keys-only 2>&1)
  # The event loop's cycle rides on the session lease, as the threads'
  # (the locks' 10 s): no lease call a cycle (the server's own count of
  # the lease calls it started, before and after; a hold on a lease of
  # its own makes one or more a cycle).
  leases() { curl -s "http://127.0.0.1:$eport/metrics" | awk '/^grpc_server_started_total/ && /Lease(Grant|KeepAlive)"/ {n += $2} END {print n + 0}'; }
  l0=$(leases)
  secs=0.5
  aout=$(DLOCK_URL="etcd://127.0.0.1:$eport" "$DLOCK" bench --json --async --inflight 4 -d "${secs}s" uncontended 2>>"$TMP/err")
  l1=$(leases)
  kill "$etcd_pid" 2>/dev/null; wait "$etcd_pid" 2>/dev/null
  if python3 -c "
import json,sys
r=json.loads(sys.argv[1].splitlines()[-1])
ops=r['ops_per_sec']*float(sys.argv[4]); calls=int(sys.argv[3])-int(sys.argv[2])
assert r['errors']==0 and ops>=10, r
# At least the session's grant: the counter is read.
assert 1<=calls<=2+ops/5, '%d lease calls for %d cycles' % (calls, ops)
" "$aout" "$l0" "$l1" "$secs"; then echo "ok   etcd_async_session"; passed=$((passed+1))
  else echo "FAIL etcd_async_session: $aout leases $l0 -> $l1 $(cat "$TMP/err")"; failed=$((failed+1)); fi
  if python3 -c "
import json,sys
r=json.loads(sys.argv[1].splitlines()[-1])
assert r['backend']=='etcd' and r['errors']==0 and r['ops_per_sec']>0, r
assert r['write_rtt_p50_us']>0 and r['series_cycles_per_sec']>0, r
assert r['ceiling_cycles_per_sec']>=0.5*r['series_cycles_per_sec'], r
assert r['ceiling_threads']==16 and r['server_cpu_us_per_cycle']>0, r
assert r['ops_over_series']>0 and r['ops_over_ceiling']>0 and r['p50_over_2_write_rtt']>0, r
assert sys.argv[2]=='', 'scratch keys left: '+sys.argv[2]
" "$out" "$left"; then echo "ok   etcd_limits"; passed=$((passed+1))
  else echo "FAIL etcd_limits: $out $(cat "$TMP/err")"; failed=$((failed+1)); fi
fi
echo "$passed passed, $failed failed"
[ "$failed" = 0 ]
