#!/usr/bin/env bash
# test_zk_interop.sh: dlock's ZooKeeper mutex against Curator's own
# InterProcessMutex, InterProcessReadWriteLock, InterProcessSemaphoreV2
# and LeaderLatch (Debian's
# libcurator-recipes-java 5.4), both ways: mutual exclusion, readers
# together, and a waiter on one side woken by a release on the other; and
# dlock status, list and release --force on zk://. Needs Curator and a JDK
# (scripts/install-deps.sh installs them; this test installs nothing),
# starts a private standalone ZooKeeper, compiles
# tests/interop/CuratorMutex.java.
#   tests/test_zk_interop.sh DLOCK_BINARY
set -uo pipefail
dlock=$1
here=$(cd "$(dirname "$0")" && pwd)
J=/usr/share/java

if [[ $("$dlock" -u zk://x status /x 2>&1) == *libzookeeper* ]]; then
  echo "skipped: this dlock was built without libzookeeper-mt"; exit 0
fi
if [[ ! -r $J/curator-recipes.jar || ! -r $J/zookeeper.jar ]] ||
   ! command -v javac >/dev/null; then
  echo "FAIL: Curator, ZooKeeper's jars or javac missing" \
    "(scripts/install-deps.sh installs libcurator-recipes-java, zookeeper," \
    "default-jdk-headless)"
  exit 1
fi

work=$(mktemp -d /tmp/dlock-zk-interop.XXXXXX)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null; done
  wait 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT
fail() { echo "FAIL: $*"; for f in "$work"/*.out; do echo "== $f"; cat "$f"; done; exit 1; }

cp="$J/curator-client.jar:$J/curator-framework.jar:$J/curator-recipes.jar"
cp+=":$J/guava.jar:$J/zookeeper.jar:$J/zookeeper-jute.jar:$J/slf4j-api.jar"
cp+=":$J/slf4j-nop.jar"
javac -d "$work/classes" -cp "$cp" "$here/interop/CuratorMutex.java" ||
  fail "javac"
cur() { java -XX:TieredStopAtLevel=1 -XX:+UseSerialGC -cp "$work/classes:$cp" \
  CuratorMutex "$conn" "$@"; }

port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
mkdir -p "$work/data"
cat >"$work/zoo.cfg" <<CFG
tickTime=500
dataDir=$work/data
clientPort=$port
clientPortAddress=127.0.0.1
admin.enableServer=false
4lw.commands.whitelist=ruok,srvr
CFG
conn=127.0.0.1:$port
url=zk://$conn
# start_zk: the server (again: same port, data and sessions), until srvr
# answers a mode. Each probe is bounded: CI once hung here for the whole
# test timeout, a probe's read never ending.
start_zk() {
  java -Xmx128m -XX:+UseSerialGC -XX:TieredStopAtLevel=1 \
    -cp $J/zookeeper.jar:$J/slf4j-nop.jar \
    org.apache.zookeeper.server.quorum.QuorumPeerMain "$work/zoo.cfg" \
    >>"$work/zk.log" 2>&1 &
  zkpid=$!
  pids+=($zkpid)
  for _ in $(seq 400); do
    [[ $(timeout 2 bash -c "exec 3<>/dev/tcp/127.0.0.1/$port && echo srvr >&3 && cat <&3" \
          2>/dev/null) == *Mode:* ]] && return 0
    sleep 0.05
  done
  cat "$work/zk.log"
  fail "ZooKeeper did not start on port $port"
}
start_zk
waitfor() { # waitfor FILE WORD: until FILE has a line starting with WORD
  for _ in $(seq 600); do grep -q "^$2" "$1" 2>/dev/null && return 0; sleep 0.05; done
  return 1
}
# holdsh FILE: a command that prints "held", holds until FILE exists, then
# prints "released MS". Timed holds ran out in CI while a JVM started.
holdsh() { echo "echo held; while [ ! -e '$1' ]; do sleep 0.05; done; echo released \$(date +%s%3N)"; }
# queued PATH N: until dlock status shows N waiters on the lock at PATH.
queued() {
  for _ in $(seq 600); do
    "$dlock" -u "$url" status --json "$1" 2>/dev/null | grep -q "\"waiters\":$2}" && return 0
    sleep 0.05
  done
  return 1
}

# 1. Curator holds: dlock is refused (exit 75), and leaves no node behind.
cur /l/a hold 3000 >"$work/j1.out" 2>&1 & pids+=($!)
waitfor "$work/j1.out" held || fail "Curator did not take /l/a"
"$dlock" -q -u "$url" run -w 300ms /l/a -- true; rc=$?
[[ $rc -eq 75 ]] || fail "dlock ran under Curator's lock (exit $rc, expected 75)"
# 2. ... and a dlock waiter is woken by Curator's release: it runs after it.
"$dlock" -q -u "$url" run -w 20s /l/a -- sh -c 'date +%s%3N' >"$work/c2.out"; rc=$?
[[ $rc -eq 0 ]] || fail "dlock waiter exit $rc"
rel=$(awk '/^released/{print $2}' "$work/j1.out")
got=$(cat "$work/c2.out")
[[ -n $rel && $got -ge $rel ]] || fail "dlock ran at $got, before Curator released at $rel"
echo "ok   Curator holds: dlock refused, then woken by Curator's release"

# 3. dlock holds: Curator is refused (75).
"$dlock" -q -u "$url" run /l/b -- sh -c "$(holdsh "$work/go3")" \
  >"$work/c3.out" 2>&1 & pids+=($!)
waitfor "$work/c3.out" held || fail "dlock did not take /l/b"
cur /l/b try 300 >"$work/j3.out" 2>&1; rc=$?
[[ $rc -eq 75 ]] || fail "Curator took dlock's lock (exit $rc, expected 75)"
# 4. ... and a Curator waiter, queued behind dlock, is woken by its release.
cur /l/b wait >"$work/j4.out" 2>&1 & waiter=$!; pids+=($waiter)
queued /l/b 1 || fail "Curator's waiter never queued on /l/b"
touch "$work/go3"
wait $waiter; rc=$?
[[ $rc -eq 0 ]] || fail "Curator waiter exit $rc"
rel=$(awk '/^released/{print $2}' "$work/c3.out")
got=$(awk '/^held/{print $2}' "$work/j4.out")
[[ -n $rel && -n $got && $got -ge $rel ]] ||
  fail "Curator held at $got, before dlock released at $rel"
echo "ok   dlock holds: Curator refused, then woken by dlock's release"

# 5. The read-write lock: Curator reads, dlock reads beside it and cannot
# write; dlock reads, Curator reads beside it and cannot write; dlock
# writes, and a Curator reader is woken by its release.
cur /rw/a r:hold 3000 >"$work/j5.out" 2>&1 & pids+=($!)
waitfor "$work/j5.out" held || fail "Curator did not read /rw/a"
"$dlock" -q -u "$url" run --read -w 0 /rw/a -- true ||
  fail "dlock could not read beside Curator's reader"
"$dlock" -q -u "$url" run --write -w 300ms /rw/a -- true; rc=$?
[[ $rc -eq 75 ]] || fail "dlock wrote under Curator's reader (exit $rc, expected 75)"
# Held until killed below: two JVMs start meanwhile, slow on a loaded machine.
"$dlock" -q -u "$url" run --read /rw/b -- sh -c 'echo held; exec sleep 30' \
  >"$work/c5.out" 2>&1 & r5=$!; pids+=($r5)
waitfor "$work/c5.out" held || fail "dlock did not read /rw/b"
cur /rw/b r:try 300 >"$work/j5b.out" 2>&1 || fail "Curator could not read beside dlock's reader"
cur /rw/b w:try 300 >"$work/j5c.out" 2>&1; rc=$?
[[ $rc -eq 75 ]] || fail "Curator wrote under dlock's reader (exit $rc, expected 75)"
kill -TERM "$r5"; wait "$r5" 2>/dev/null # the runner forwards it, releases
"$dlock" -q -u "$url" run --write /rw/c -- sh -c "$(holdsh "$work/go5")" \
  >"$work/c5d.out" 2>&1 & pids+=($!)
waitfor "$work/c5d.out" held || fail "dlock did not write /rw/c"
cur /rw/c r:wait >"$work/j5d.out" 2>&1 & waiter=$!; pids+=($waiter)
queued /rw/c 1 || fail "Curator's reader never queued on /rw/c"
touch "$work/go5"
wait $waiter || fail "Curator reader exit $?"
rel=$(awk '/^released/{print $2}' "$work/c5d.out")
got=$(awk '/^held/{print $2}' "$work/j5d.out")
[[ -n $rel && -n $got && $got -ge $rel ]] ||
  fail "Curator read at $got, before dlock's writer released at $rel"
echo "ok   read-write lock: readers share across both, writers excluded, a Curator reader woken by dlock's writer"

# 6. Leader election: dlock elect and Curator's LeaderLatch in one
# election. dlock leads: Curator follows (and names dlock's id as the
# leader), and is elected once dlock's command ends; Curator leads: dlock
# elect is refused (75), status names the leader, and a waiting dlock
# elect runs once Curator leaves; a leader whose node is deleted (release
# --force) has its command stopped (76).
"$dlock" -q -u "$url" elect --id c-1 /el/a -- sh -c \
  "echo leading; while [ ! -e '$work/go6' ]; do sleep 0.05; done; echo done \$(date +%s%3N)" \
  >"$work/c6.out" 2>&1 & pids+=($!)
waitfor "$work/c6.out" leading || fail "dlock elect did not lead /el/a"
cur /el/a latch j-1 20000 >"$work/j6.out" 2>&1 & follower=$!; pids+=($follower)
waitfor "$work/j6.out" follower || fail "Curator did not follow dlock's leader"
touch "$work/go6"
wait $follower || fail "Curator was not elected after dlock"
grep -q "^follower c-1" "$work/j6.out" || fail "Curator did not see dlock (c-1) as the leader"
rel=$(awk '/^done/{print $2}' "$work/c6.out")
got=$(awk '/^leader/{print $2}' "$work/j6.out")
[[ -n $rel && -n $got && $got -ge $rel ]] ||
  fail "Curator led at $got, before dlock's command ended at $rel"
cur /el/b lead j-2 3000 >"$work/j6b.out" 2>&1 & pids+=($!)
waitfor "$work/j6b.out" leader || fail "Curator did not lead /el/b"
"$dlock" -q -u "$url" elect -w 300ms /el/b -- true; rc=$?
[[ $rc -eq 75 ]] || fail "dlock led beside Curator's leader (exit $rc, expected 75)"
"$dlock" -u "$url" status /el/b >"$work/s6.out" 2>&1 || fail "status: no leader"
grep -q "j-2" "$work/s6.out" || fail "status does not name Curator's leader j-2"
"$dlock" -q -u "$url" elect /el/b -- sh -c 'date +%s%3N' >"$work/c6b.out" 2>&1 ||
  fail "dlock elect after Curator: exit $?"
rel=$(awk '/^released/{print $2}' "$work/j6b.out")
got=$(cat "$work/c6b.out")
[[ -n $rel && $got -ge $rel ]] || fail "dlock led at $got, before Curator left at $rel"
"$dlock" -q -u "$url" elect /el/c -- sh -c 'echo leading; sleep 20' \
  >"$work/c6c.out" 2>&1 &
leader=$!; pids+=($leader)
waitfor "$work/c6c.out" leading || fail "dlock elect did not lead /el/c"
"$dlock" -u "$url" release --force /el/c >/dev/null 2>&1 || fail "release --force /el/c"
wait $leader; rc=$?
[[ $rc -eq 76 ]] || fail "the leader's elect exited $rc after its node was deleted, expected 76"
echo "ok   leader election: dlock elect and Curator's LeaderLatch elect each other in turn"

# 7. The semaphore (InterProcessSemaphoreV2, 2 leases): a dlock permit
# and a Curator lease are out together; then neither side gets a third; a
# Curator waiter, queued (its lease node is the third), is woken by dlock's
# release. Both holders live until the checks are done (files go7 and
# end7): a timed hold ran out in CI while a JVM started.
"$dlock" -q -u "$url" run --permits 2 /sem/a -- sh -c "$(holdsh "$work/go7")" \
  >"$work/c7.out" 2>&1 & pids+=($!)
waitfor "$work/c7.out" held || fail "dlock took no permit of /sem/a"
cur /sem/a sem 2 hold "$work/end7" >"$work/j7.out" 2>&1 & pids+=($!)
waitfor "$work/j7.out" held || fail "Curator took no lease beside dlock's permit"
"$dlock" -u "$url" status --json --permits /sem/a >"$work/s7.out" 2>&1 ||
  fail "status --permits: $(cat "$work/s7.out")"
grep -q '"counter":0,"permits_taken":2' "$work/s7.out" ||
  fail "status --permits: $(cat "$work/s7.out"), expected 0 free and 2 taken"
"$dlock" -u "$url" list '/sem/*' >"$work/l7.out" 2>&1 || fail "list /sem/*"
[[ ! -s $work/l7.out ]] ||
  fail "list shows a semaphore's leases as locks: $(cat "$work/l7.out")"
"$dlock" -q -u "$url" run --permits 2 -w 300ms /sem/a -- true; rc=$?
[[ $rc -eq 75 ]] || fail "dlock took a third permit of 2 (exit $rc, expected 75)"
cur /sem/a sem 2 try 300 >"$work/j7b.out" 2>&1; rc=$?
[[ $rc -eq 75 ]] || fail "Curator took a third lease of 2 (exit $rc, expected 75)"
cur /sem/a sem 2 wait >"$work/j7c.out" 2>&1 &
waiter=$!; pids+=($waiter)
queued=""
for _ in $(seq 600); do
  "$dlock" -u "$url" status --json --permits /sem/a 2>/dev/null |
    grep -q '"permits_taken":3' && { queued=1; break; }
  sleep 0.05
done
[[ -n $queued ]] || fail "Curator's waiter never queued its lease"
[[ ! -s $work/j7c.out ]] || fail "Curator's waiter took a third lease of 2"
touch "$work/go7"
wait $waiter || fail "Curator's waiter exit $?"
touch "$work/end7"
rel=$(awk '/^released/{print $2}' "$work/c7.out")
got=$(awk '/^held/{print $2}' "$work/j7c.out")
[[ -n $rel && -n $got && $got -ge $rel ]] ||
  fail "Curator's lease came at $got, before dlock released at $rel"
echo "ok   semaphore: dlock permits and Curator leases counted together, a Curator waiter woken by dlock"

# 8. The server restarted under dlock run: it warns that the connection
# is lost, says it is back with the same session, keeps the lock, and its
# command ends normally (1 s after the server is back).
"$dlock" -u "$url" run /rs/a -- sh -c \
  "echo held; while [ ! -e '$work/go8' ]; do sleep 0.05; done; sleep 1; echo done" \
  >"$work/c8.out" 2>&1 &
runner=$!; pids+=($runner)
waitfor "$work/c8.out" held || fail "dlock did not take /rs/a"
kill -9 "$zkpid"; wait "$zkpid" 2>/dev/null
start_zk
# The command ends once dlock has its session back (a release sent
# before would wait for it, a command timeout at most: under a loaded
# sanitizer run the reconnect alone took longer, exit 76).
for _ in $(seq 600); do
  grep -q "the connection is back" "$work/c8.out" && break
  sleep 0.05
done
touch "$work/go8"
wait $runner; rc=$?
[[ $rc -eq 0 ]] || fail "dlock run exited $rc across a server restart: $(cat "$work/c8.out")"
grep -q "warning: the connection to the server is lost" "$work/c8.out" ||
  fail "no warning of the lost connection: $(cat "$work/c8.out")"
grep -q "the connection is back" "$work/c8.out" ||
  fail "not told the connection came back: $(cat "$work/c8.out")"
grep -q "^done" "$work/c8.out" || fail "the command did not finish"
echo "ok   server restarted under dlock run: warned, reconnected, lock kept"

# 9. The CLI's other commands on zk://: status, list, release --force.
"$dlock" -q -u "$url" run -l 3s /l/c/d -- sh -c 'echo held; sleep 20' \
  >"$work/c9.out" 2>&1 &
holder=$!; pids+=($holder)
waitfor "$work/c9.out" held || fail "dlock did not take /l/c/d"
"$dlock" -u "$url" status /l/c/d >"$work/s9.out" 2>&1 || fail "status: not held"
grep -q "token" "$work/s9.out" || fail "status shows no token"
"$dlock" -u "$url" status --json /l/a >"$work/s9b.out" 2>&1; rc=$?
[[ $rc -eq 1 ]] || fail "status of a free lock: exit $rc, expected 1"
"$dlock" -u "$url" list '/l/*' >"$work/l9.out" 2>&1 || fail "list"
grep -q "^/l/c/d " "$work/l9.out" || fail "list does not show /l/c/d"
[[ $(grep -c . "$work/l9.out") -eq 1 ]] || fail "list shows free locks"
"$dlock" -u "$url" release --force /l/c/d >/dev/null 2>&1 ||
  fail "release --force"
t0=$(date +%s)
wait $holder; rc=$?
[[ $rc -eq 76 ]] || fail "the holder's run exited $rc after release --force, expected 76 (lost)"
(( $(date +%s) - t0 <= 5 )) || fail "the loss took over 5 s to be seen"
cur /l/c/d try 300 >/dev/null 2>&1 || fail "/l/c/d still held after release --force"
echo "ok   status, list, release --force (the holder's run ends as lost)"
echo "7 passed, 0 failed"
