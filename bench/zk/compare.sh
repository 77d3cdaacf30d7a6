#!/usr/bin/env bash
# compare.sh: dlock on zk:// beside Apache Curator's InterProcessMutex on the
# same private ZooKeeper, in one run, alternating: uncontended with 1 and 16
# threads, contended with 4 processes of 1 thread holding 1 ms. Once with
# the server's default fsync per transaction and once with forceSync=no
# (labelled: a speed figure only, never a safety setting). Beside them, on
# the same server, its ceiling for the writes a lock makes, with no lock
# library: one session keeping W create+delete pairs of ephemeral-sequential
# nodes in flight (CuratorPeer's "ceiling", on the raw ZooKeeper handle),
# W = 64 (the most pairs/s), 16 and 1 (the same concurrency as the 16- and
# 1-thread rows). Prints one JSON line per measurement, then a table of the
# ratios issue 21 sets (>= 2x Curator's cycles/s uncontended, >= Curator's
# hand-offs/s contended) and each uncontended row as a fraction of the
# ceiling.
#   bench/zk/compare.sh [SECS]     (default 5)
# Needs a built build/dlock (DLOCK= to change), Debian's zookeeper and
# libcurator-recipes-java and a JDK.
set -u
cd "$(dirname "$0")/../.."
SECS=${1:-5}
DLOCK=${DLOCK:-build/dlock}
J=/usr/share/java
TMP=$(mktemp -d /tmp/dlock-zkbench-XXXXXX)
ZKPID=
cleanup() {
  [ -n "$ZKPID" ] && { kill -9 "$ZKPID" 2>/dev/null; wait "$ZKPID" 2>/dev/null; }
  rm -rf "$TMP"
}
trap cleanup EXIT
cp="$J/curator-client.jar:$J/curator-framework.jar:$J/curator-recipes.jar"
cp+=":$J/guava.jar:$J/zookeeper.jar:$J/zookeeper-jute.jar:$J/slf4j-api.jar"
cp+=":$J/slf4j-nop.jar"
javac -d "$TMP" -cp "$cp" bench/zk/CuratorPeer.java || exit 1
port=$(python3 -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])')
url=zk://127.0.0.1:$port
OUT=$TMP/results.jsonl

start_zk() { # start_zk FORCESYNC
  [ -n "$ZKPID" ] && { kill -9 "$ZKPID"; wait "$ZKPID" 2>/dev/null; }
  rm -rf "$TMP/data"; mkdir -p "$TMP/data"
  printf 'tickTime=2000\ndataDir=%s/data\nclientPort=%s\nclientPortAddress=127.0.0.1\nadmin.enableServer=false\n4lw.commands.whitelist=srvr\nforceSync=%s\n' \
    "$TMP" "$port" "$1" >"$TMP/zoo.cfg"
  java -Xmx256m -XX:+UseSerialGC -cp "$J/zookeeper.jar:$J/slf4j-nop.jar" \
    org.apache.zookeeper.server.quorum.QuorumPeerMain "$TMP/zoo.cfg" >"$TMP/zk.log" 2>&1 &
  ZKPID=$!
  for _ in $(seq 400); do
    [[ $(timeout 2 bash -c "exec 3<>/dev/tcp/127.0.0.1/$port && echo srvr >&3 && cat <&3" \
          2>/dev/null) == *Mode:* ]] && return 0
    sleep 0.05
  done
  echo "ZooKeeper did not start" >&2; exit 1
}

peer() { # peer SCENARIO THREADS|WINDOW PROCS HOLD_MS SYNC
  local start=$(( $(date +%s%3N) + 2500 )) i
  for i in $(seq "$3"); do
    java -XX:+UseSerialGC -cp "$TMP:$cp" CuratorPeer "127.0.0.1:$port" "$1" "$2" \
      "$SECS" "$4" "$start" >"$TMP/peer.$i" &
  done
  wait $(jobs -p | grep -v "^$ZKPID\$")
  # The processes' sums, one line.
  python3 - "$TMP" "$3" "$5" <<'PY'
import json, sys
rows = [json.loads(open(f"{sys.argv[1]}/peer.{i}").read()) for i in range(1, int(sys.argv[2]) + 1)]
ops = sum(r["ops_per_sec"] for r in rows)
out = {"lib": rows[0]["lib"], "sync": sys.argv[3], "scenario": rows[0]["scenario"],
       "threads": rows[0]["threads"]}
if "window" in rows[0]:
    out["window"] = rows[0]["window"]
out.update({"processes": len(rows), "ops_per_sec": round(ops),
            "p50_us": max(r["p50_us"] for r in rows), "p99_us": max(r["p99_us"] for r in rows),
            "utilisation": round(sum(r["held_s"] for r in rows) / rows[0]["secs"], 3)})
print(json.dumps(out))
PY
}

for sync in yes no; do
  start_zk "$sync"
  # Unmeasured: the server's JIT is cold after a start, and the first row
  # then measured a round trip 1.3 to 3 times the later rows'.
  "$DLOCK" -u "$url" bench -d 3s -t 16 uncontended >/dev/null
  for t in 1 16; do
    "$DLOCK" -u "$url" bench --json -d "${SECS}s" -t "$t" uncontended |
      sed "s/^{/{\"lib\":\"dlock\",\"sync\":\"$sync\",/" | tee -a "$OUT"
    peer uncontended "$t" 1 0 "$sync" | tee -a "$OUT"
  done
  for w in 64 16 1; do
    peer ceiling "$w" 1 0 "$sync" | tee -a "$OUT"
  done
  "$DLOCK" -u "$url" bench --json -d "${SECS}s" -p 4 -t 1 --hold 1ms contended |
    sed "s/^{/{\"lib\":\"dlock\",\"sync\":\"$sync\",/" | tee -a "$OUT"
  peer contended 1 4 1 "$sync" | tee -a "$OUT"
done

python3 - "$OUT" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith('{')]
def find(**kw):
    for r in rows:
        if all(r.get(k) == v for k, v in kw.items()):
            return r
print()
print(f"{'forceSync':<10}{'scenario':<26}{'dlock /s':>10}{'Curator /s':>11}{'ratio':>7}  dlock p50 us / Curator p50 us")
for sync in ("yes", "no"):
    for sc, t, label in (("uncontended", 1, "uncontended, 1 thread"),
                         ("uncontended", 16, "uncontended, 16 threads"),
                         ("contended", 1, "contended, 4 x 1, 1 ms")):
        d = find(lib="dlock", sync=sync, scenario=sc, threads=t)
        c = find(lib="curator", sync=sync, scenario=sc, threads=t)
        if not d or not c:
            continue
        ratio = d["ops_per_sec"] / c["ops_per_sec"] if c["ops_per_sec"] else 0
        print(f"{sync:<10}{label:<26}{d['ops_per_sec']:>10.0f}{c['ops_per_sec']:>11.0f}{ratio:>7.2f}  {d['p50_us']:.0f} / {c['p50_us']:.0f}")
    d = find(lib="dlock", sync=sync, scenario="uncontended", threads=1)
    if d:
        print(f"{'':<10}ZooKeeper round trip p50 {d['baseline_rtt_p50_us']:.0f} us; 1-thread cycle p50 / (2 x round trip) = {d['p50_us'] / (2 * d['baseline_rtt_p50_us']):.2f}")
    ceil = {w: find(lib="zookeeper", sync=sync, scenario="ceiling", window=w) for w in (64, 16, 1)}
    if not all(ceil.values()):
        continue
    print(f"{'':<10}ceiling, create+delete pairs/s, one session: " +
          ", ".join(f"W={w} {c['ops_per_sec']:.0f} (p50 {c['p50_us']:.0f} us)" for w, c in ceil.items()))
    # Each uncontended row against the ceiling (W=64), then against the
    # pairs in flight it has itself (one per thread).
    for t in (1, 16):
        d = find(lib="dlock", sync=sync, scenario="uncontended", threads=t)
        c = find(lib="curator", sync=sync, scenario="uncontended", threads=t)
        if not d or not c:
            continue
        top, same = ceil[64]["ops_per_sec"], ceil[t]["ops_per_sec"]
        if not top or not same:
            continue
        print(f"{'':<10}{t:>2} thread{'s' if t > 1 else ' '}: dlock {d['ops_per_sec'] / top:.2f} of the ceiling, "
              f"Curator {c['ops_per_sec'] / top:.2f}; of W={t}: dlock {d['ops_per_sec'] / same:.2f}, "
              f"Curator {c['ops_per_sec'] / same:.2f}")
PY
