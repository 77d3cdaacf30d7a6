# redis-tmp.sh: sourced by the shell tests and bench/compare.sh. Starts a
# private redis-server on a free loopback port in a fresh temp dir, with any
# extra arguments, waits for it, and removes everything on exit.
#   . scripts/redis-tmp.sh [redis-server args...]
# Sets TMP (the dir), PORT, SOCK (a unix socket), SERVER (its pid) and URL.
TMP=$(mktemp -d /tmp/dlock-run-XXXXXX)
PORT=$(python3 -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])')
SOCK=$TMP/redis.sock
redis-server --port "$PORT" --bind 127.0.0.1 --unixsocket "$SOCK" \
  --dir "$TMP" --save '' --appendonly no --logfile "$TMP/redis.log" \
  --daemonize no "$@" &
SERVER=$!
URL=redis://127.0.0.1:$PORT
redis_tmp_cleanup() {
  kill -9 "$SERVER" 2>/dev/null
  wait "$SERVER" 2>/dev/null
  pkill -9 -f "$TMP/" 2>/dev/null
  rm -rf "$TMP"
}
trap redis_tmp_cleanup EXIT
for _ in $(seq 250); do
  redis-cli -p "$PORT" ${REDIS_TMP_AUTH:+-a "$REDIS_TMP_AUTH" --no-auth-warning} \
    ping 2>/dev/null | grep -q PONG && break
  sleep 0.02
done
