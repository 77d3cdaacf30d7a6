# etcd_start.sh: sourced by the etcd bench scripts and tests/test_bench.sh.
# Starts one private single-member etcd on free loopback ports and waits
# until it is healthy.
#   etcd_start NAME  in a fresh dir (NAME in its name), stopped and removed
#                    when the script exits (an EXIT trap): the bench scripts
#   etcd_launch DIR  in DIR (made if missing), no trap: the caller stops it
#                    (kill "$ep") and removes DIR itself
# Both set port (the client port), dir and ep (its pid), and return 1 when
# etcd is not healthy within 10 s (it may still run: stop it by $ep).
# cpu prints the server's CPU seconds so far (from /proc).
#   . "$(dirname "$0")/etcd_start.sh"; etcd_start NAME
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
etcd_launch() {
  dir=$1
  mkdir -p "$dir"
  port=$(free_port)
  local pport
  pport=$(free_port)
  etcd --name n1 --data-dir "$dir/data" --listen-client-urls "http://127.0.0.1:$port" \
    --advertise-client-urls "http://127.0.0.1:$port" --listen-peer-urls "http://127.0.0.1:$pport" \
    --initial-advertise-peer-urls "http://127.0.0.1:$pport" \
    --initial-cluster "n1=http://127.0.0.1:$pport" --log-level error >"$dir/etcd.log" 2>&1 &
  ep=$!
  for _ in $(seq 100); do
    curl -s -m 1 "http://127.0.0.1:$port/health" | grep -q '"health":"true"' && return 0
    sleep 0.1
  done
  echo "etcd did not start: $(tail -3 "$dir/etcd.log")" >&2
  return 1
}
etcd_start() {
  # The trap is set before the start, so that a failed start is cleaned up
  # too; $ep and $dir are read when it runs.
  ep= dir=$(mktemp -d "/tmp/dlock-$1.XXXXXX")
  trap 'if [ -n "$ep" ]; then kill $ep 2>/dev/null || true; wait $ep 2>/dev/null || true; fi; rm -rf "$dir"' EXIT
  etcd_launch "$dir"
}
tck=$(getconf CLK_TCK)
cpu() { awk -v t="$tck" '{print ($14 + $15) / t}' "/proc/$ep/stat"; }
