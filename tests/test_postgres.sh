#!/usr/bin/env bash
# test_postgres.sh: the fencing token checked by PostgreSQL (issue 34, part
# 3), against a private server: initdb in a temp dir, postgres on a free
# loopback port (as the postgres user when run as root: the server refuses
# root), stopped by its pid; and a private redis-server for the lock.
#   test_postgres.sh PATH/TO/dlock-example-postgres PATH/TO/dlock
# Jepsen's lock workload on a row: a victim stops itself (SIGSTOP) between
# its read and its write, past its 300 ms lease; three holders do 5
# increments each after it; then it is continued. Unguarded (the positive
# control) its stale write loses the 15 increments; with the fence column
# (UPDATE ... WHERE fence <= $token) it is refused (exit 76) and none is
# lost. Then the same guard from the shell: psql inside dlock run.
set -u
EX=$(realpath "$1")
DLOCK=$(realpath "$2")
PGBIN=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1)
if [ -z "$PGBIN" ] || [ ! -x "$PGBIN/initdb" ]; then
  echo "skipped: no PostgreSQL server here (scripts/install-deps.sh)"; exit 0
fi
set --
. "$(dirname "$0")/../scripts/redis-tmp.sh"
export DLOCK_URL=$URL
AS=()
if [ "$(id -u)" = 0 ]; then AS=(runuser -u postgres --); fi
PGDIR=$TMP/pg
mkdir -p "$PGDIR" && chmod 755 "$TMP"
[ ${#AS[@]} = 0 ] || chown postgres "$PGDIR"
"${AS[@]}" "$PGBIN/initdb" -D "$PGDIR/data" -A trust -U dlock >"$TMP/initdb.log" 2>&1 ||
  { echo "FAIL initdb: $(tail -5 "$TMP/initdb.log")"; exit 1; }
PGPORT=$(python3 -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])')
"${AS[@]}" "$PGBIN/postgres" -D "$PGDIR/data" -p "$PGPORT" -c listen_addresses=127.0.0.1 \
  -c unix_socket_directories="$PGDIR" -c fsync=off >"$TMP/pg.log" 2>&1 &
PG=$!
pg_cleanup() { kill "$PG" 2>/dev/null; wait "$PG" 2>/dev/null; redis_tmp_cleanup; }
trap pg_cleanup EXIT
DSN="host=127.0.0.1 port=$PGPORT user=dlock dbname=postgres"
for _ in $(seq 250); do "$PGBIN/pg_isready" -q -d "$DSN" && break; sleep 0.02; done
"$PGBIN/pg_isready" -q -d "$DSN" || { echo "FAIL postgres did not start: $(tail -5 "$TMP/pg.log")"; exit 1; }
psql_() { "$PGBIN/psql" -X -q -t -A -v ON_ERROR_STOP=1 -d "$DSN" "$@"; }

passed=0 failed=0
check() { # check NAME OK DETAIL
  if [ "$2" = 1 ]; then echo "ok   $1"; passed=$((passed+1))
  else echo "FAIL $1: $3"; failed=$((failed+1)); fi
}
stopped() { [ "$(ps -o stat= -p "$1" 2>/dev/null | cut -c1)" = T ]; }

# workload MODE_FLAG: prints "VICTIM_EXIT VALUE".
workload() {
  psql_ -c "DELETE FROM fenced_counter" 2>/dev/null
  "$EX" --victim $1 "$DSN" "$URL" 2>"$TMP/victim.err" & local v=$!
  for _ in $(seq 500); do stopped $v && break; sleep 0.02; done
  stopped $v || { echo "never-stopped 0"; kill -9 $v; return; }
  local pids=() bad=0
  for i in 1 2 3; do "$EX" $1 -n 5 "$DSN" "$URL" & pids+=($!); done
  for p in "${pids[@]}"; do wait "$p" || bad=1; done
  kill -CONT $v; wait $v; local vr=$?
  [ $bad = 0 ] || vr="holders-failed"
  echo "$vr $(psql_ -c "SELECT value FROM fenced_counter WHERE id = 'example'")"
}

read -r vr value <<< "$(workload --unguarded)"
check "unguarded: the paused holder's stale write loses updates (control)" \
  "$([ "$vr" = 0 ] && [ "$value" = 1 ] && echo 1)" "victim exit $vr, counter $value (expected 0, 1)"
read -r vr value <<< "$(workload "")"
check "guarded: the stale write is refused (76), none lost" \
  "$([ "$vr" = 76 ] && [ "$value" = 15 ] && echo 1)" "victim exit $vr, counter $value (expected 76, 15)"

# From the shell: psql inside dlock run, with the token dlock run gives.
psql_ -c "CREATE TABLE shell_fenced (id text PRIMARY KEY, value text, fence bigint NOT NULL DEFAULT 0);
          INSERT INTO shell_fenced (id) VALUES ('x')"
write='psql -X -q -t -A -v ON_ERROR_STOP=1 -d "$0" -v tok="$DLOCK_TOKEN" -v val="$1" <<SQL
UPDATE shell_fenced SET value = :'"'"'val'"'"', fence = :tok WHERE id = '"'"'x'"'"' AND fence <= :tok RETURNING 1;
SQL'
PATH=$PGBIN:$PATH "$DLOCK" run shl -- sh -c 'echo "$DLOCK_TOKEN" > '"$TMP"'/t1; '"$write" "$DSN" one >"$TMP/o1"
PATH=$PGBIN:$PATH "$DLOCK" run shl -- sh -c "$write" "$DSN" two >"$TMP/o2"
PATH=$PGBIN:$PATH DLOCK_TOKEN=$(cat "$TMP/t1") sh -c "$write" "$DSN" late >"$TMP/o3"
check "psql inside dlock run: each holder's write, then the first one's late write refused" \
  "$([ "$(cat "$TMP/o1")" = 1 ] && [ "$(cat "$TMP/o2")" = 1 ] && [ ! -s "$TMP/o3" ] &&
     [ "$(psql_ -c "SELECT value FROM shell_fenced")" = two ] && echo 1)" \
  "o1 '$(cat "$TMP/o1")' o2 '$(cat "$TMP/o2")' o3 '$(cat "$TMP/o3")' value '$(psql_ -c "SELECT value FROM shell_fenced")'"
echo "$passed passed, $failed failed"
[ "$failed" = 0 ]
