#!/usr/bin/env bash
# test_interop_node.sh: the plain string lock (dlock run --plain) against the
# Node.js peers that share its layout, npm redlock 4.2.0 and redis-semaphore
# 5.6.2's Mutex (tests/interop/node), on one private redis-server; then
# dlock on redlock:// against npm redlock's quorum over three servers.
# Usage: test_interop_node.sh PATH/TO/dlock [PEERS_DIR]
# The peers are npm packages in PEERS_DIR/node_modules (default: beside
# peer.js, tests/interop/node, where scripts/install-deps.sh installs
# them); this test installs nothing. Without node or the peers it fails.
set -u
DLOCK=$(realpath "$1")
SRC=$(cd "$(dirname "$0")/.." && pwd)
PEERS=$(realpath "${2:-$SRC/tests/interop/node}") # the tests cd elsewhere
command -v node >/dev/null || { echo "test_interop_node: node is missing (scripts/install-deps.sh)" >&2; exit 1; }
if [ ! -d "$PEERS/node_modules/redlock" ] || [ ! -d "$PEERS/node_modules/redis-semaphore" ]; then
  echo "test_interop_node: npm redlock or redis-semaphore missing in $PEERS/node_modules (scripts/install-deps.sh installs them)" >&2
  exit 1
fi
[ -f "$PEERS/peer.js" ] || cp "$SRC/tests/interop/node/peer.js" "$PEERS/"
set --  # redis-tmp.sh passes its arguments to redis-server
. "$SRC/scripts/redis-tmp.sh"
export DLOCK_URL=$URL
PEER_PORTS=$PORT
rcli() { redis-cli -p "$PORT" "$@"; }
peer() { node "$PEERS/peer.js" "$PEER_PORTS" "$@"; }
cd "$TMP" || exit 2

passed=0 failed=0 current=""
fail() { echo "    $current: $*" >&2; current_failed=1; }
expect_rc() { [ "$2" = "$1" ] || fail "$3: exit $2, expected $1"; }
# wait_until CMD...: polls up to 20 s
wait_until() {
  for _ in $(seq 1000); do "$@" && return 0; sleep 0.02; done
  return 1
}
has_line() { grep -qx "$2" "$1" 2>/dev/null; }
exists() { [ -e "$1" ]; }
waiters() { [ "$(rcli pubsub numsub "redisson_lock__channel:{$1}" | tail -1)" -ge 1 ]; }
# A Redlock waiter subscribes nowhere: it polls, and the scripts it runs
# show it.
evals() { rcli info commandstats | sed -n 's/^cmdstat_evalsha:calls=\([0-9]*\).*/\1/p'; }
polling() { local a; a=$(evals); sleep 0.1; [ "$(evals)" -gt "$((a + 1))" ]; }
WAITING=waiters
# The key a peer LIB writes for NAME.
key_of() { if [ "$1" = mutex ]; then echo "mutex:$2"; else echo "$2"; fi; }

# dlock holds KEY: the peer is refused; it gets it after dlock's release.
t_peer_after_dlock() {
  local lib=$1 key; key=$(key_of "$1" "a$1")
  rm -f go.$lib
  "$DLOCK" run -q --plain "$key" -- sh -c "touch held.$lib; while [ ! -e go.$lib ]; do sleep 0.01; done" &
  local h=$!
  wait_until exists "held.$lib" || fail "dlock never held $key"
  [ "$(peer "$lib" "a$lib" try)" = busy ] || fail "$lib acquired while dlock held $key"
  peer "$lib" "a$lib" wait > waiter.$lib & local w=$!
  wait_until has_line waiter.$lib busy || fail "the $lib waiter was not refused"
  has_line waiter.$lib acquired && fail "$lib acquired while dlock held $key"
  touch go.$lib
  wait "$h"; expect_rc 0 $? "dlock run"
  wait "$w"; expect_rc 0 $? "$lib waiter"
  has_line waiter.$lib released || fail "$lib did not get $key after dlock's release"
  [ "$(rcli exists "$key")" = 0 ] || fail "$key left behind"
}

# The peer holds KEY: dlock is refused; a dlock waiter gets it after the
# peer's release (which publishes nothing: found by polling).
t_dlock_after_peer() {
  local lib=$1 key; key=$(key_of "$1" "b$1")
  rm -f go.$lib
  peer "$lib" "b$lib" hold "$TMP/go.$lib" > holder.$lib & local h=$!
  wait_until has_line holder.$lib held || fail "$lib never held $key"
  "$DLOCK" run -q --plain -w 0 "$key" -- true; expect_rc 75 $? "dlock while $lib holds"
  "$DLOCK" status "$key" > /dev/null; expect_rc 0 $? "status of $lib's hold"
  "$DLOCK" run -q --plain -w 20s "$key" -- touch got.$lib & local w=$!
  wait_until $WAITING "$key" || fail "the dlock waiter never waited"
  exists got.$lib && fail "dlock acquired while $lib held $key"
  touch go.$lib
  wait "$h"; expect_rc 0 $? "$lib holder (extend, release)"
  wait "$w"; expect_rc 0 $? "dlock waiter"
  exists got.$lib || fail "dlock did not get $key after $lib's release"
  has_line holder.$lib released || fail "$lib did not release"
}

# Many of both at once on one key: never two holders. DLOCK_KIND: how
# dlock run takes it (--plain; nothing on redlock://, whose mutex is the
# plain lock).
DLOCK_KIND=--plain
t_mutual_exclusion_mixed() {
  local lib=$1 key; key=$(key_of "$1" "c$1")
  echo 0 > counter.$lib
  : > inside.$lib
  local pids=() i
  for i in 1 2 3; do
    ( for _ in 1 2 3; do
        "$DLOCK" run -q $DLOCK_KIND "$key" -- sh -c "[ -s inside.$lib ] && echo overlap >> overlap.$lib; echo d > inside.$lib; v=\$(cat counter.$lib); echo \$((v+1)) > counter.$lib; : > inside.$lib" || exit 1
      done ) & pids+=($!)
  done
  for i in 1 2 3; do
    ( for j in 1 2 3; do
        # A file of its own per round: the background child truncates its
        # output only once it runs, and a file of the round before would
        # still say "held".
        local out=ph.$lib.$i.$j
        rm -f go.$lib.$i "$out"; peer "$lib" "c$lib" hold "$TMP/go.$lib.$i" > "$out" & p=$!
        until has_line "$out" held; do
          kill -0 $p 2>/dev/null || exit 1
          sleep 0.005
        done
        [ -s inside.$lib ] && echo overlap >> overlap.$lib
        echo p > inside.$lib; v=$(cat counter.$lib); echo $((v+1)) > counter.$lib; : > inside.$lib
        touch go.$lib.$i; wait $p || exit 1
      done ) & pids+=($!)
  done
  local bad=0 p
  for p in "${pids[@]}"; do wait "$p" || bad=1; done
  [ "$bad" = 0 ] || fail "a holder failed"
  [ -e overlap.$lib ] && fail "two holders at once"
  [ "$(cat counter.$lib)" = 18 ] || fail "counter $(cat counter.$lib), expected 18"
  [ "$(rcli exists "$key")" = 0 ] ||
    fail "$key left behind: $(rcli get "$key"), pttl $(rcli pttl "$key")"
}

for lib in redlock mutex; do
  for t in t_peer_after_dlock t_dlock_after_peer t_mutual_exclusion_mixed; do
    current="$t $lib" current_failed=0
    t0=$(date +%s%N)
    $t $lib
    ms=$(( ($(date +%s%N) - t0) / 1000000 ))
    if [ "$current_failed" = 0 ]; then echo "ok   $current ($ms ms)"; passed=$((passed+1))
    else echo "FAIL $current ($ms ms)"; failed=$((failed+1)); fi
  done
done
# Redlock over three servers: dlock on redlock:// (its default layout,
# no --plain) and npm redlock's quorum over the same three exclude each
# other.
S2=$TMP/s2 S3=$TMP/s3
mkdir -p "$S2" "$S3"
EXTRA=()
for d in "$S2" "$S3"; do
  p=$(python3 -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])')
  redis-server --port "$p" --bind 127.0.0.1 --dir "$d" --save '' \
    --appendonly no --logfile "$d/redis.log" --daemonize no &
  EXTRA+=("$!:$p")
done
extra_cleanup() {
  local e
  for e in "${EXTRA[@]}"; do kill -9 "${e%%:*}" 2>/dev/null; wait "${e%%:*}" 2>/dev/null; done
  redis_tmp_cleanup
}
trap extra_cleanup EXIT
P2=${EXTRA[0]#*:} P3=${EXTRA[1]#*:}
for p in "$P2" "$P3"; do
  wait_until sh -c "redis-cli -p $p ping 2>/dev/null | grep -q PONG"
done
export DLOCK_URL="redlock://127.0.0.1:$PORT,127.0.0.1:$P2,127.0.0.1:$P3"
PEER_PORTS="$PORT,$P2,$P3" DLOCK_KIND="" WAITING=polling
on_all() { # KEY: how many of the three servers have it
  local n=0 p
  for p in "$PORT" "$P2" "$P3"; do
    n=$((n + $(redis-cli -p "$p" exists "$1")))
  done
  echo $n
}
# What is left of KEYs, where: value and PTTL (whose key, and since when).
left_behind() {
  local k p
  for k in "$@"; do
    for p in "$PORT" "$P2" "$P3"; do
      [ "$(redis-cli -p "$p" exists "$k")" = 1 ] &&
        echo -n "[$k on $p: $(redis-cli -p "$p" get "$k") pttl $(redis-cli -p "$p" pttl "$k")] "
    done
  done
}
# The single-server rounds' files go (they share the names).
rm -f held.* go.* waiter.* holder.* got.* counter.* inside.* overlap.* ph.*
for t in t_peer_after_dlock t_dlock_after_peer t_mutual_exclusion_mixed; do
  current="$t redlock://3" current_failed=0
  t0=$(date +%s%N)
  $t redlock
  if [ "$(on_all aredlock)$(on_all credlock)" != 00 ]; then
    fail "left behind on a server: $(left_behind aredlock credlock)"
  fi
  ms=$(( ($(date +%s%N) - t0) / 1000000 ))
  if [ "$current_failed" = 0 ]; then echo "ok   $current ($ms ms)"; passed=$((passed+1))
  else echo "FAIL $current ($ms ms)"; failed=$((failed+1)); fi
done

# Neither side ever met a key of the other type.
current="no WRONGTYPE" current_failed=0
if rcli info errorstats | grep -q WRONGTYPE; then
  fail "$(rcli info errorstats | grep WRONGTYPE)"; failed=$((failed+1))
else echo "ok   no WRONGTYPE"; passed=$((passed+1)); fi
echo "$passed passed, $failed failed"
[ "$failed" = 0 ]
