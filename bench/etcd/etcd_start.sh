# etcd_start.sh: sourced by the etcd bench scripts. Starts one private
# single-member etcd on free loopback ports in a fresh dir (NAME in its
# dir's name), stopped and removed when the script exits, and waits until
# it is healthy. Sets port (the client port), dir and ep (its pid), and
# cpu (prints the server's CPU seconds so far, from /proc).
#   . "$(dirname "$0")/etcd_start.sh"; etcd_start NAME
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
etcd_start() {
  port=$(free_port)
  local pport
  pport=$(free_port)
  dir=$(mktemp -d "/tmp/dlock-$1.XXXXXX")
  etcd --name n1 --data-dir "$dir/data" --listen-client-urls "http://127.0.0.1:$port" \
    --advertise-client-urls "http://127.0.0.1:$port" --listen-peer-urls "http://127.0.0.1:$pport" \
    --initial-advertise-peer-urls "http://127.0.0.1:$pport" \
    --initial-cluster "n1=http://127.0.0.1:$pport" --log-level error >"$dir/etcd.log" 2>&1 &
  ep=$!
  trap 'kill $ep 2>/dev/null; wait $ep 2>/dev/null || true; rm -rf "$dir"' EXIT
  for _ in $(seq 100); do
    curl -s -m 1 "http://127.0.0.1:$port/health" | grep -q '"health":"true"' && return 0
    sleep 0.1
  done
  echo "etcd did not start: $(tail -3 "$dir/etcd.log")" >&2
  return 1
}
tck=$(getconf CLK_TCK)
cpu() { awk -v t="$tck" '{print ($14 + $15) / t}' "/proc/$ep/stat"; }
