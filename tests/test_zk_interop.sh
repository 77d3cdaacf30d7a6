#!/usr/bin/env bash
# test_zk_interop.sh: dlock's ZooKeeper mutex against Curator's own
# InterProcessMutex and InterProcessReadWriteLock (Debian's
# libcurator-recipes-java 5.4), both ways: mutual exclusion, readers
# together, and a waiter on one side woken by a release on the other; and
# dlock status, list and release --force on zk://. Installs Curator and a
# JDK when missing (as scripts/install-deps.sh does), starts a private
# standalone ZooKeeper, compiles tests/interop/CuratorMutex.java.
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
  SUDO=""; [[ $(id -u) -ne 0 ]] && SUDO=sudo
  echo "installing Curator, ZooKeeper and a JDK"
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq \
    --no-install-recommends libcurator-recipes-java zookeeper \
    default-jdk-headless >/dev/null || { echo "FAIL: cannot install"; exit 1; }
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
java -Xmx128m -XX:+UseSerialGC -XX:TieredStopAtLevel=1 \
  -cp $J/zookeeper.jar:$J/slf4j-nop.jar \
  org.apache.zookeeper.server.quorum.QuorumPeerMain "$work/zoo.cfg" \
  >"$work/zk.log" 2>&1 &
pids+=($!)
conn=127.0.0.1:$port
url=zk://$conn
for _ in $(seq 400); do
  [[ $(exec 3<>/dev/tcp/127.0.0.1/$port && echo srvr >&3 && cat <&3) == *Mode:* ]] \
    2>/dev/null && break
  sleep 0.05
done
waitfor() { # waitfor FILE WORD: until FILE has a line starting with WORD
  for _ in $(seq 600); do grep -q "^$2" "$1" 2>/dev/null && return 0; sleep 0.05; done
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
"$dlock" -q -u "$url" run /l/b -- sh -c 'echo held; sleep 3; echo released $(date +%s%3N)' \
  >"$work/c3.out" 2>&1 & pids+=($!)
waitfor "$work/c3.out" held || fail "dlock did not take /l/b"
cur /l/b try 300 >"$work/j3.out" 2>&1; rc=$?
[[ $rc -eq 75 ]] || fail "Curator took dlock's lock (exit $rc, expected 75)"
# 4. ... and a Curator waiter is woken by dlock's release.
cur /l/b wait >"$work/j4.out" 2>&1; rc=$?
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
"$dlock" -q -u "$url" run --read /rw/b -- sh -c 'echo held; sleep 2' \
  >"$work/c5.out" 2>&1 & pids+=($!)
waitfor "$work/c5.out" held || fail "dlock did not read /rw/b"
cur /rw/b r:try 300 >"$work/j5b.out" 2>&1 || fail "Curator could not read beside dlock's reader"
cur /rw/b w:try 300 >"$work/j5c.out" 2>&1; rc=$?
[[ $rc -eq 75 ]] || fail "Curator wrote under dlock's reader (exit $rc, expected 75)"
"$dlock" -q -u "$url" run --write /rw/c -- sh -c 'echo held; sleep 2; echo released $(date +%s%3N)' \
  >"$work/c5d.out" 2>&1 & pids+=($!)
waitfor "$work/c5d.out" held || fail "dlock did not write /rw/c"
cur /rw/c r:wait >"$work/j5d.out" 2>&1 || fail "Curator reader exit $?"
rel=$(awk '/^released/{print $2}' "$work/c5d.out")
got=$(awk '/^held/{print $2}' "$work/j5d.out")
[[ -n $rel && -n $got && $got -ge $rel ]] ||
  fail "Curator read at $got, before dlock's writer released at $rel"
echo "ok   read-write lock: readers share across both, writers excluded, a Curator reader woken by dlock's writer"

# 6. The CLI's other commands on zk://: status, list, release --force.
"$dlock" -q -u "$url" run -l 3s /l/c/d -- sh -c 'echo held; sleep 20' \
  >"$work/c6.out" 2>&1 &
holder=$!; pids+=($holder)
waitfor "$work/c6.out" held || fail "dlock did not take /l/c/d"
"$dlock" -u "$url" status /l/c/d >"$work/s6.out" 2>&1 || fail "status: not held"
grep -q "token" "$work/s6.out" || fail "status shows no token"
"$dlock" -u "$url" status --json /l/a >"$work/s6b.out" 2>&1; rc=$?
[[ $rc -eq 1 ]] || fail "status of a free lock: exit $rc, expected 1"
"$dlock" -u "$url" list '/l/*' >"$work/l6.out" 2>&1 || fail "list"
grep -q "^/l/c/d " "$work/l6.out" || fail "list does not show /l/c/d"
[[ $(grep -c . "$work/l6.out") -eq 1 ]] || fail "list shows free locks"
"$dlock" -u "$url" release --force /l/c/d >/dev/null 2>&1 ||
  fail "release --force"
t0=$(date +%s)
wait $holder; rc=$?
[[ $rc -eq 76 ]] || fail "the holder's run exited $rc after release --force, expected 76 (lost)"
(( $(date +%s) - t0 <= 5 )) || fail "the loss took over 5 s to be seen"
cur /l/c/d try 300 >/dev/null 2>&1 || fail "/l/c/d still held after release --force"
echo "ok   status, list, release --force (the holder's run ends as lost)"
echo "4 passed, 0 failed"
