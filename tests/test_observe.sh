#!/usr/bin/env bash
# test_observe.sh: dlock metrics and dlock top end to end, against a private
# redis-server (unix://), Redlock over it and two more, and etcd, Sentinel
# and ZooKeeper when installed: the values against locks held here, the
# exposition format (promtool check metrics when installed, else the text
# format's rules checked here), --listen scraped with curl and by a real
# Prometheus (when installed), top -b's
# tables, and top on a real terminal (tmux); a lock in both views on
# Sentinel too (a cluster takes seconds to form: checked by hand, see
# docs/OBSERVABILITY.md). Usage: test_observe.sh PATH/TO/dlock
set -u
DLOCK=$(realpath "$1")
SRC=$(cd "$(dirname "$0")/.." && pwd)
set -- # redis-tmp.sh passes its arguments to redis-server
. "$(dirname "$0")/../scripts/redis-tmp.sh"
export DLOCK_URL="unix://$SOCK"
unset DLOCK_PASSWORD
cd "$TMP" || exit 2

passed=0 failed=0 current=""
fail() { echo "    $current: $*" >&2; current_failed=1; }
run_test() {
  current=$1 current_failed=0
  local t0=$(date +%s%N)
  "$1"
  local ms=$(( ($(date +%s%N) - t0) / 1000000 ))
  if [ "$current_failed" = 0 ]; then echo "ok   $1 ($ms ms)"; passed=$((passed+1))
  else echo "FAIL $1 ($ms ms)"; failed=$((failed+1)); fi
}
# wait_until CMD...: polls up to 10 s
wait_until() {
  for _ in $(seq 500); do "$@" && return 0; sleep 0.02; done
  return 1
}
free_port() {
  python3 -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])'
}
# Holders started here, stopped at the end by pid (never by name).
holders=()
hold() { # hold URL NAME [run options]: dlock run ... -- sleep 60, in the background
  local url=$1 name=$2
  shift 2
  "$DLOCK" -u "$url" run -q "$@" "$name" -- sleep 60 &
  holders+=($!)
}
stop_holders() {
  local p
  for p in "${holders[@]}"; do kill "$p" 2>/dev/null; done
  for p in "${holders[@]}"; do wait "$p" 2>/dev/null; done
  holders=()
}
trap 'stop_holders; redis_tmp_cleanup' EXIT

# metric FILE NAME OBJECT: the value of sample NAME{name="OBJECT",...}.
metric() {
  awk -v m="$2" -v o="$3" '$1 ~ "^" m "\\{name=\"" o "\"," { print $2 }' "$1"
}
has_sample() { [ -n "$(metric "$@")" ]; }

# The text format's rules (what promtool check metrics checks), for a
# machine without promtool: every sample's family has HELP and TYPE before
# its samples, once; names match [a-zA-Z_:][a-zA-Z0-9_:]*, dlock_ first;
# gauges do not end in _total (counters do); no label set twice; values
# are numbers.
check_format() {
  if command -v promtool >/dev/null; then
    promtool check metrics <"$1" >promtool.out 2>&1 ||
      fail "promtool check metrics: $(cat promtool.out)"
  fi
  awk '
    /^# HELP / { if (help[$3]++) bad("HELP twice for " $3); next }
    /^# TYPE / { if (type[$3]++) bad("TYPE twice for " $3)
                 if (seen[$3]) bad("TYPE after samples of " $3)
                 t[$3] = $4
                 if ($4 == "counter" && $3 !~ /_total$/) bad("counter " $3 " without _total")
                 if ($4 != "counter" && $3 ~ /_total$/) bad($4 " " $3 " ends in _total")
                 next }
    /^#/ || /^$/ { next }
    { n = $1; sub(/\{.*/, "", n)
      if (n !~ /^dlock_[a-zA-Z0-9_:]*$/) bad("bad name " n)
      if (!type[n] || !help[n]) bad("sample of " n " before its HELP and TYPE")
      if (last != n && seen[n]) bad("samples of " n " not together")
      seen[n] = 1; last = n
      if (dup[$1]++) bad("label set twice: " $1)
      if ($2 !~ /^-?[0-9]+(\.[0-9]+)?([eE][-+]?[0-9]+)?$/) bad("value " $2) }
    function bad(m) { print m; err = 1 }
    END { exit err }' "$1" >format.out || fail "format: $(cat format.out)"
}

# ---- dlock metrics ----

# The values against a lock held here, its waiter, and its token.
t_metrics_values() {
  hold "$DLOCK_URL" obs:a
  wait_until "$DLOCK" status obs:a >/dev/null || { fail "never held"; return; }
  "$DLOCK" -u "$DLOCK_URL" run -q -w 20s obs:a -- true &
  local waiter=$!
  waiters_one() {
    "$DLOCK" metrics 'obs:*' >m.txt && [ "$(metric m.txt dlock_lock_waiters obs:a)" = 1 ]
  }
  wait_until waiters_one || fail "waiters never 1: $(cat m.txt)"
  "$DLOCK" metrics 'obs:*' >m.txt; local rc=$?
  [ $rc = 0 ] || fail "exit $rc"
  check_format m.txt
  [ "$(metric m.txt dlock_lock_held obs:a)" = 1 ] || fail "held: $(cat m.txt)"
  [ "$(metric m.txt dlock_lock_holders obs:a)" = 1 ] || fail "holders"
  grep -q '^dlock_lock_held{name="obs:a",kind="lock",backend="redis"} 1$' m.txt ||
    fail "labels: $(grep held m.txt)"
  local lease held tok want
  lease=$(metric m.txt dlock_lock_lease_remaining_seconds obs:a)
  awk -v v="$lease" 'BEGIN { exit !(v > 0 && v <= 30) }' ||
    fail "lease left $lease (the watchdog's 30 s)"
  held=$(metric m.txt dlock_lock_held_seconds obs:a)
  awk -v v="$held" 'BEGIN { exit !(v >= 0 && v < 20) }' || fail "held for $held"
  tok=$(metric m.txt dlock_lock_fencing_token obs:a)
  want=$("$DLOCK" status --json obs:a | sed 's/.*"token":\([0-9]*\).*/\1/')
  [ "$tok" = "$want" ] || fail "token $tok, status says $want"
  grep -q '^dlock_up{backend="redis"} 1$' m.txt || fail "dlock_up"
  grep -q '^dlock_objects{backend="redis"} 1$' m.txt || fail "dlock_objects"
  ! grep -q redisson_lock_token m.txt || fail "the token counter shown as an object"
  stop_holders
  wait "$waiter" || fail "the waiter failed"
  # Released: nothing held, no samples for the name.
  "$DLOCK" metrics 'obs:*' >m.txt
  ! has_sample m.txt dlock_lock_held obs:a || fail "still shown after release"
  grep -q '^dlock_objects{backend="redis"} 0$' m.txt || fail "objects after release"
}

# Each kind: a read-write lock's readers, a semaphore's permits, a latch
# and a queue named on the command line; a server that is gone.
t_metrics_kinds() {
  hold "$DLOCK_URL" k:rw --read
  hold "$DLOCK_URL" k:rw --read
  hold "$DLOCK_URL" k:sem --permits 3
  redis-cli -s "$SOCK" set k:latch 2 >/dev/null
  "$DLOCK" queue offer k:q a b c >/dev/null || fail "queue offer"
  readers_two() {
    "$DLOCK" metrics 'k:*' >k.txt && [ "$(metric k.txt dlock_rwlock_readers k:rw)" = 2 ]
  }
  wait_until readers_two || fail "readers never 2: $(cat k.txt)"
  sem_one() {
    "$DLOCK" metrics --latch k:latch --queue k:q 'k:*' >k.txt &&
      [ "$(metric k.txt dlock_semaphore_permits_available k:sem)" = 2 ]
  }
  wait_until sem_one || fail "permits never 2 of 3: $(cat k.txt)"
  check_format k.txt
  [ "$(metric k.txt dlock_semaphore_permits_taken k:sem)" = 1 ] || fail "taken"
  [ "$(metric k.txt dlock_latch_remaining k:latch)" = 2 ] || fail "latch"
  [ "$(metric k.txt dlock_queue_depth k:q)" = 3 ] || fail "queue depth"
  grep -q 'name="k:rw",kind="rwlock"' k.txt || fail "rwlock kind"
  grep -q 'name="k:latch",kind="latch"' k.txt || fail "latch kind"
  ! has_sample k.txt dlock_semaphore_permits_available k:latch ||
    fail "the named latch also shown as a semaphore"
  ! grep -q 'rwlock_timeout' k.txt || fail "a reader's timeout key shown"
  stop_holders
  "$DLOCK" -u unix://"$TMP"/nothing.sock metrics >/dev/null 2>&1
  [ $? = 69 ] || fail "no server: exit $?, expected 69"
  "$DLOCK" metrics a b >/dev/null 2>&1; [ $? = 64 ] || fail "two patterns"
}

# --listen: /metrics over HTTP (curl), a fresh snapshot per request, 404
# elsewhere, and SIGTERM stops it at once.
t_metrics_listen() {
  local help
  help=$("$DLOCK" metrics --help 2>&1) || { fail "metrics --help: $help"; return; }
  if [[ $help == *"not in this build"* ]]; then
    echo "    skipped: built without libmicrohttpd" >&2
    return
  fi
  "$DLOCK" metrics --listen 127.0.0.1:0 'l:*' 2>listen.err &
  local srv=$! port=""
  got_port() { port=$(sed -n 's/.*serving metrics on port \([0-9]*\).*/\1/p' listen.err); [ -n "$port" ]; }
  wait_until got_port || { fail "no port said: $(cat listen.err)"; kill $srv; return; }
  curl -s -D hdr.txt "http://127.0.0.1:$port/metrics" >h1.txt || fail "curl"
  grep -qi '^content-type: text/plain; version=0.0.4' hdr.txt || fail "content type: $(cat hdr.txt)"
  grep -q '^dlock_objects{backend="redis"} 0' h1.txt || fail "before: $(cat h1.txt)"
  hold "$DLOCK_URL" l:x
  wait_until "$DLOCK" status l:x >/dev/null || fail "never held"
  curl -s "http://127.0.0.1:$port/metrics" >h2.txt
  [ "$(metric h2.txt dlock_lock_held l:x)" = 1 ] || fail "after: $(cat h2.txt)"
  check_format h2.txt
  [ "$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$port/")" = 404 ] ||
    fail "/ not 404"
  local t0=$(date +%s%N)
  kill -TERM $srv
  wait $srv; local rc=$?
  local ms=$(( ($(date +%s%N) - t0) / 1000000 ))
  [ $rc = 0 ] || fail "exit $rc after SIGTERM"
  [ $ms -lt 2000 ] || fail "SIGTERM took $ms ms"
  "$DLOCK" metrics --listen nonsense >/dev/null 2>&1; [ $? = 64 ] || fail "bad ADDR:PORT"
  stop_holders
}

# A real Prometheus (Debian's prometheus, when installed) scrapes
# dlock metrics --listen: its target is up, the scrape has no errors, and
# a query answers the held lock's sample with its labels.
t_prometheus_scrape() {
  if ! command -v prometheus >/dev/null; then
    echo "    skipped: prometheus not installed" >&2
    return
  fi
  local help
  help=$("$DLOCK" metrics --help 2>&1)
  if [[ $help == *"not in this build"* ]]; then
    echo "    skipped: built without libmicrohttpd" >&2
    return
  fi
  "$DLOCK" metrics --listen 127.0.0.1:0 'p:*' 2>plisten.err &
  local srv=$! port="" pport
  got_port() { port=$(sed -n 's/.*serving metrics on port \([0-9]*\).*/\1/p' plisten.err); [ -n "$port" ]; }
  wait_until got_port || { fail "no port said: $(cat plisten.err)"; kill $srv; return; }
  hold "$DLOCK_URL" p:x
  wait_until "$DLOCK" status p:x >/dev/null || fail "never held"
  pport=$(free_port)
  cat >prom.yml <<EOT
global:
  scrape_interval: 1s
scrape_configs:
  - job_name: dlock
    static_configs:
      - targets: ['127.0.0.1:$port']
EOT
  promtool check config prom.yml >promcfg.out 2>&1 || fail "config: $(cat promcfg.out)"
  prometheus --config.file=prom.yml --storage.tsdb.path="$TMP/prom" \
    --web.listen-address="127.0.0.1:$pport" >prom.log 2>&1 &
  local prom=$!
  local api="http://127.0.0.1:$pport/api/v1"
  scraped() {
    curl -s "$api/query" --data-urlencode 'query=dlock_lock_held{name="p:x",kind="lock",backend="redis",job="dlock"}' >q.json &&
      grep -q '"value":\[[0-9.]*,"1"\]' q.json
  }
  wait_until scraped || fail "no sample in Prometheus: $(cat q.json) $(tail -5 prom.log)"
  curl -s "$api/targets" >t.json
  grep -q '"health":"up"' t.json || fail "target not up: $(cat t.json)"
  grep -q '"lastError":""' t.json || fail "scrape error: $(cat t.json)"
  curl -s "$api/query" --data-urlencode 'query=up{job="dlock"}' >up.json
  grep -q '"value":\[[0-9.]*,"1"\]' up.json || fail "up: $(cat up.json)"
  kill $prom; wait $prom 2>/dev/null
  kill -TERM $srv; wait $srv 2>/dev/null
  stop_holders
}

# ---- dlock top ----

# -b: plain tables, -n rounds, the header naming the backend and the count.
t_top_batch() {
  hold "$DLOCK_URL" t:a
  wait_until "$DLOCK" status t:a >/dev/null || fail "never held"
  "$DLOCK" queue offer t:q x >/dev/null
  "$DLOCK" top -b -n 2 -d 100ms --queue t:q 't:*' >top.txt; local rc=$?
  [ $rc = 0 ] || fail "exit $rc"
  [ "$(grep -c '^dlock top - .* - redis unix://.* - 2 object(s), 1 held, 0 waiting' top.txt)" = 2 ] ||
    fail "headers: $(cat top.txt)"
  [ "$(grep -c '^NAME  *KIND  *HELD  *LEASE  *WAIT  *TOKEN  *DEPTH  *HOLDER$' top.txt)" = 2 ] ||
    fail "column heads"
  grep -Eq "^t:a +lock +[0-9.]+s +[0-9]+s +0 +[0-9]+ +- +$(hostname) pid [0-9]+ \(sleep 60\)$" top.txt ||
    fail "the lock's row: $(grep '^t:a' top.txt)"
  grep -Eq '^t:q +queue +- +- +- +- +1 ' top.txt || fail "the queue's row: $(grep '^t:q' top.txt)"
  "$DLOCK" top -n 0 >/dev/null 2>&1; [ $? = 64 ] || fail "-n 0 accepted"
  stop_holders
}

# On a terminal (tmux): the screen shows the lock, a key sorts, q quits.
t_top_terminal() {
  command -v tmux >/dev/null || { echo "    skipped: no tmux" >&2; return; }
  hold "$DLOCK_URL" tty:a
  wait_until "$DLOCK" status tty:a >/dev/null || fail "never held"
  local T=(tmux -S "$TMP/tmux.sock")
  "${T[@]}" new-session -d -x 160 -y 30 \
    "DLOCK_URL=$DLOCK_URL '$DLOCK' top 'tty:*'; echo exit=\$? >'$TMP/top.rc'; sleep 30"
  screen() { "${T[@]}" capture-pane -p >screen.txt 2>/dev/null && grep -q "$1" screen.txt; }
  wait_until screen "^tty:a  *lock .*pid [0-9]* (sleep 60)" ||
    fail "screen: $(cat screen.txt)"
  grep -q "^dlock top - .* redis unix://.* 1 object(s), 1 held" screen.txt ||
    fail "header: $(head -1 screen.txt)"
  "${T[@]}" send-keys t
  wait_until screen "^sort: t" || fail "key t: $(sed -n 2p screen.txt)"
  "${T[@]}" send-keys q
  wait_until test -s "$TMP/top.rc" || fail "q did not quit"
  [ "$(cat "$TMP/top.rc" 2>/dev/null)" = exit=0 ] || fail "$(cat "$TMP/top.rc")"
  "${T[@]}" kill-server 2>/dev/null
  stop_holders
}

# ---- the other URL kinds ----

# url_row URL NAME: a lock held on URL is in both views with its backend.
url_row() {
  local url=$1 name=$2 backend=$3
  hold "$url" "$name"
  wait_until "$DLOCK" -u "$url" status "$name" >/dev/null || { fail "$backend: never held"; return; }
  "$DLOCK" -u "$url" metrics >u.txt || fail "$backend: metrics exit $?"
  check_format u.txt
  grep -q "^dlock_lock_held{name=\"$name\",kind=\"lock\",backend=\"$backend\"} 1$" u.txt ||
    fail "$backend: $(cat u.txt)"
  "$DLOCK" -u "$url" top -b -n 1 >u-top.txt || fail "$backend: top exit $?"
  grep -q "^dlock top - .* - $backend " u-top.txt && grep -q "^$name  *lock " u-top.txt ||
    fail "$backend top: $(cat u-top.txt)"
  stop_holders
}

t_redlock() {
  local extra=() pids=() p
  for _ in 1 2; do
    p=$(free_port)
    redis-server --port "$p" --bind 127.0.0.1 --save '' --appendonly no \
      --dir "$TMP" --logfile "$TMP/rl$p.log" &
    pids+=($!) extra+=("127.0.0.1:$p")
  done
  for p in "${extra[@]}"; do
    wait_until eval "redis-cli -p ${p#*:} ping 2>/dev/null | grep -q PONG"
  done
  url_row "redlock://127.0.0.1:$PORT,${extra[0]},${extra[1]}" rl:a redlock
  kill "${pids[@]}"; wait "${pids[@]}" 2>/dev/null
}

t_etcd() {
  command -v etcd >/dev/null || { echo "    skipped: no etcd" >&2; return; }
  local c=$(free_port) p=$(free_port)
  etcd --name t --data-dir "$TMP/etcd" --listen-client-urls "http://127.0.0.1:$c" \
    --advertise-client-urls "http://127.0.0.1:$c" --listen-peer-urls "http://127.0.0.1:$p" \
    --initial-advertise-peer-urls "http://127.0.0.1:$p" --initial-cluster "t=http://127.0.0.1:$p" \
    --log-level error >"$TMP/etcd.log" 2>&1 &
  local pid=$!
  wait_until eval "curl -s http://127.0.0.1:$c/health | grep -q true" || fail "etcd did not start"
  url_row "etcd://127.0.0.1:$c" e:a etcd
  # A queue (contrib/recipes' layout) and a latch on etcd:// too: the
  # queue's depth and the latch's count (none set: 0).
  "$DLOCK" -u "etcd://127.0.0.1:$c" queue offer e:q v1 v2 || fail "etcd: offer"
  "$DLOCK" -u "etcd://127.0.0.1:$c" top -b -n 1 --queue e:q --latch e:l >e-top.txt
  grep -Eq '^e:q +queue( +-){4} +2 ' e-top.txt &&
    grep -Eq '^e:l +latch .*count 0' e-top.txt ||
    fail "etcd: $(cat e-top.txt)"
  "$DLOCK" -u "etcd://127.0.0.1:$c" metrics --queue e:q --latch e:l >e.txt
  check_format e.txt
  [ "$(metric e.txt dlock_queue_depth e:q)" = 2 ] || fail "etcd: queue depth: $(cat e.txt)"
  [ "$(metric e.txt dlock_latch_remaining e:l)" = 0 ] || fail "etcd: latch: $(cat e.txt)"
  # A running latch's count in dlock status (its key holds the count).
  curl -s "http://127.0.0.1:$c/v3/kv/put" \
    -d "{\"key\":\"$(printf e:l2 | base64)\",\"value\":\"$(printf 3 | base64)\"}" >/dev/null
  local out
  out=$("$DLOCK" -u "etcd://127.0.0.1:$c" status --latch e:l2) &&
    [ "$out" = "e:l2: count-down latch, count 3" ] || fail "etcd: status --latch: $out"
  out=$("$DLOCK" -u "etcd://127.0.0.1:$c" status e:l2 2>&1)
  [ $? = 65 ] && [ "$out" = "dlock: e:l2: not a dlock lock: a count-down latch (dlock status --latch e:l2)" ] ||
    fail "etcd: a latch's name is no lock: $out"
  out=$("$DLOCK" -u "etcd://127.0.0.1:$c" status --permits e:l2 2>&1)
  [ $? = 65 ] && [ "$out" = "dlock: e:l2: not a semaphore: latch" ] ||
    fail "etcd: a latch's name is no semaphore: $out"
  kill $pid; wait $pid 2>/dev/null
}

t_sentinel() {
  command -v redis-sentinel >/dev/null || { echo "    skipped: no redis-sentinel" >&2; return; }
  local p=$(free_port)
  printf 'port %s\nbind 127.0.0.1\ndir %s\nsentinel monitor obs 127.0.0.1 %s 1\n' \
    "$p" "$TMP" "$PORT" >"$TMP/sentinel.conf"
  redis-sentinel "$TMP/sentinel.conf" >"$TMP/sentinel.log" 2>&1 &
  local pid=$!
  wait_until eval "redis-cli -p $p sentinel get-master-addr-by-name obs 2>/dev/null | grep -q $PORT" ||
    fail "sentinel did not start"
  url_row "redis-sentinel://127.0.0.1:$p/obs" s:a sentinel
  kill $pid; wait $pid 2>/dev/null
}

# zk://: no lease (a dash, no lease sample); the nodes behind the holder
# are its waiters.
t_zk() {
  [ -r /usr/share/java/zookeeper.jar ] && command -v java >/dev/null ||
    { echo "    skipped: no ZooKeeper" >&2; return; }
  local port=$(free_port)
  mkdir -p "$TMP/zk/data"
  printf '%s\n' "tickTime=250" "dataDir=$TMP/zk/data" "clientPort=$port" \
    "clientPortAddress=127.0.0.1" "admin.enableServer=false" \
    "4lw.commands.whitelist=srvr" >"$TMP/zk/zoo.cfg"
  java -Xmx128m -XX:+UseSerialGC -XX:TieredStopAtLevel=1 \
    -cp /usr/share/java/zookeeper.jar:/usr/share/java/slf4j-nop.jar \
    org.apache.zookeeper.server.quorum.QuorumPeerMain "$TMP/zk/zoo.cfg" \
    >"$TMP/zk/zk.log" 2>&1 &
  local pid=$!
  zk_up() {
    [[ $(timeout 2 bash -c "exec 3<>/dev/tcp/127.0.0.1/$port && echo srvr >&3 && cat <&3" \
        2>/dev/null) == *Mode:* ]]
  }
  wait_until zk_up || { fail "ZooKeeper did not start"; kill $pid; return; }
  local url=zk://127.0.0.1:$port
  url_row "$url" /obs/a zk
  hold "$url" /obs/b
  wait_until "$DLOCK" -u "$url" status /obs/b >/dev/null || fail "never held"
  "$DLOCK" -u "$url" run -q -w 20s /obs/b -- true &
  local waiter=$!
  zk_waiter() {
    "$DLOCK" -u "$url" metrics '/obs/*' >z.txt && [ "$(metric z.txt dlock_lock_waiters /obs/b)" = 1 ]
  }
  wait_until zk_waiter || fail "waiters never 1: $(cat z.txt)"
  ! has_sample z.txt dlock_lock_lease_remaining_seconds /obs/b || fail "a lease on zk://"
  "$DLOCK" -u "$url" top -b -n 1 '/obs/*' >z-top.txt
  grep -Eq '^/obs/b +lock +[0-9.]+s +- +1 ' z-top.txt || fail "top: $(cat z-top.txt)"
  stop_holders
  wait $waiter
  kill $pid; wait $pid 2>/dev/null
}

# Each command's help, and the man page's synopsis.
t_help() {
  local c
  for c in top metrics; do
    "$DLOCK" "$c" --help | grep -q "^usage: dlock $c" || fail "$c --help"
    "$DLOCK" --help | grep -q "^  $c " || fail "$c not in dlock --help"
    sed -n '/^\.SH SYNOPSIS/,/^\.SH DESCRIPTION/p' "$SRC/docs/dlock.1" |
      grep -q "^\.B $c\$" || fail "$c not in dlock.1's SYNOPSIS"
  done
}

run_test t_help
run_test t_metrics_values
run_test t_metrics_kinds
run_test t_metrics_listen
run_test t_prometheus_scrape
run_test t_top_batch
run_test t_top_terminal
run_test t_redlock
run_test t_etcd
run_test t_sentinel
run_test t_zk
echo "$passed passed, $failed failed"
[ "$failed" = 0 ]
