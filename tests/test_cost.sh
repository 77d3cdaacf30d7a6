#!/usr/bin/env bash
# test_cost.sh: the cost gate. What a lock cycle costs, counted where the
# count does not depend on the machine's load, against budgets kept in
# tests/cost/budgets:
#   - the commands the server executes per uncontended cycle (INFO
#     commandstats: the scripts' EVALSHA and every command they call), and
#   - the instructions the client executes per cycle (valgrind's callgrind,
#     every thread of the process),
# for the blocking and the event-loop forms (tests/cost/cycles.c). Each
# figure is the difference of a run of N and one of 2N cycles, divided by
# N: the open, the close and the first connect cancel out.
# A figure over its budget by more than 5 % fails the gate. Raising a
# budget is a commit that says why; a figure far below its budget is
# reported, so the budget can follow it down.
#   test_cost.sh PATH/TO/cycles            the gate
#   COST_PRINT=1 test_cost.sh ...          also print every figure as a
#                                          budget line
set -u
CYCLES=$(realpath "$1")
SRC=$(cd "$(dirname "$0")/.." && pwd)
BUDGETS=$SRC/tests/cost/budgets
N=${COST_N:-500}
set -- # redis-tmp.sh passes its arguments to redis-server
. "$SRC/scripts/redis-tmp.sh"
rcli() { redis-cli -p "$PORT" "$@"; }

fails=0
declare -A got

# server_cmds MODE: commands per cycle, by name and in all ("total").
server_cmds() {
  local mode=$1 k
  declare -A a b
  for k in 1 2; do
    rcli config resetstat >/dev/null
    "$CYCLES" "$URL" "$mode" $((N * k)) || { echo "FAIL: cycles $mode" >&2; exit 1; }
    while IFS=: read -r cmd rest; do
      case "$cmd" in cmdstat_*) ;; *) continue ;; esac
      local calls=${rest#calls=}; calls=${calls%%,*}
      if [ "$k" = 1 ]; then a[${cmd#cmdstat_}]=$calls; else b[${cmd#cmdstat_}]=$calls; fi
    done < <(rcli info commandstats | tr -d '\r')
  done
  local total=0 detail=""
  for k in "${!b[@]}"; do
    local d=$(( ${b[$k]} - ${a[$k]:-0} ))
    [ "$d" -le 0 ] && continue
    total=$((total + d))
    detail+=" $k=$(awk -v d="$d" -v n="$N" 'BEGIN{printf "%.2f", d/n}')"
  done
  got[$mode.server_commands]=$(awk -v d="$total" -v n="$N" 'BEGIN{printf "%.2f", d/n}')
  echo "$mode: server commands per cycle ${got[$mode.server_commands]}:$detail"
}

# client_instr MODE: instructions per cycle, every thread.
client_instr() {
  local mode=$1 k ir=()
  for k in 1 2; do
    local out=$TMP/cg.$mode.$k
    valgrind --tool=callgrind --callgrind-out-file="$out" \
      "$CYCLES" "$URL" "$mode" $((N * k)) 2>"$out.log" ||
      { echo "FAIL: callgrind cycles $mode" >&2; cat "$out.log" >&2; exit 1; }
    # The totals of every thread's part (one file per thread, or one file).
    ir+=("$(cat "$out"* 2>/dev/null | awk '/^totals:/ {s += $2} END {print s + 0}')")
  done
  got[$mode.client_instructions]=$(( (${ir[1]} - ${ir[0]}) / N ))
  echo "$mode: client instructions per cycle ${got[$mode.client_instructions]}"
}

# server_instr MODE: the server's instructions per cycle, counted by
# callgrind inside reading a request (the parse, the command, its scripts,
# the reply) and writing replies only: not its timers, whose share would
# follow the wall clock. A server of its own for each run.
server_instr() {
  local mode=$1 k ir=()
  for k in 1 2; do
    local out=$TMP/srv.$mode.$k port
    port=$(python3 -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])')
    mkdir -p "$TMP/srv"
    valgrind --tool=callgrind --callgrind-out-file="$out" \
      --toggle-collect=readQueryFromClient --toggle-collect=writeToClient \
      redis-server --port "$port" --bind 127.0.0.1 --dir "$TMP/srv" \
      --save '' --appendonly no --daemonize no >"$out.log" 2>&1 &
    local pid=$!
    for _ in $(seq 1000); do
      redis-cli -p "$port" ping 2>/dev/null | grep -q PONG && break
      sleep 0.02
    done
    "$CYCLES" "redis://127.0.0.1:$port" "$mode" $((N * k)) ||
      { echo "FAIL: cycles $mode against callgrind's server" >&2; kill -9 "$pid"; exit 1; }
    redis-cli -p "$port" shutdown nosave >/dev/null 2>&1
    wait "$pid"
    ir+=("$(cat "$out"* 2>/dev/null | awk '/^totals:/ {s += $2} END {print s + 0}')")
  done
  got[$mode.server_instructions]=$(( (${ir[1]} - ${ir[0]}) / N ))
  echo "$mode: server instructions per cycle ${got[$mode.server_instructions]}"
}

for mode in blocking loop redisson; do
  server_cmds "$mode"
  command -v valgrind >/dev/null || continue
  [ "$mode" = redisson ] || client_instr "$mode"
  server_instr "$mode"
done
if [ -n "${got[redisson.server_instructions]:-}" ]; then
  for mode in blocking loop; do
    got[$mode.server_vs_redisson]=$(awk -v a="${got[$mode.server_instructions]}" \
      -v b="${got[redisson.server_instructions]}" 'BEGIN{printf "%.3f", a/b}')
    echo "$mode: the server's instructions per cycle / Redisson's = ${got[$mode.server_vs_redisson]}"
  done
fi

# etcd://: the mutex's cycle on etcd (a private single-member etcd; the
# locks on the client's session lease, tests/cost/cycles.c): the gRPC
# calls the server starts per cycle (its /metrics; not the watches and
# status calls, which follow the wall clock), and the client's
# instructions, for both forms. Skipped where etcd cannot run or the
# build has no etcd backend.
etcd_calls() { # the calls the server has started so far
  curl -s "http://127.0.0.1:$eport/metrics" |
    awk '/^grpc_server_started_total/ && $0 !~ /Watch|Status/ {n += $2} END {print n + 0}'
}
if command -v etcd >/dev/null &&
   [[ $("$CYCLES" etcd://127.0.0.1:1 blocking 1 2>&1) != *libcurl* ]]; then
  . "$SRC/bench/etcd/etcd_start.sh"
  # Its dir is under $TMP: on any other way out, redis-tmp.sh's clean-up
  # stops it (every process with $TMP/ in its command line).
  if etcd_launch "$TMP/etcd"; then
    eport=$port
    eurl="etcd://127.0.0.1:$eport"
    EN=${COST_ETCD_N:-100}
    for mode in blocking loop; do
      c=()
      for k in 1 2; do
        c+=("$(etcd_calls)")
        "$CYCLES" "$eurl" "$mode" $((EN * k)) || { echo "FAIL: cycles etcd $mode" >&2; fails=1; }
      done
      c+=("$(etcd_calls)")
      got[etcd.$mode.server_calls]=$(awk -v a="${c[0]}" -v b="${c[1]}" -v d="${c[2]}" -v n="$EN" \
        'BEGIN{printf "%.2f", ((d - b) - (b - a)) / n}')
      echo "etcd $mode: server calls per cycle ${got[etcd.$mode.server_calls]}"
      command -v valgrind >/dev/null || continue
      ir=()
      for k in 1 2; do
        out=$TMP/cg.etcd.$mode.$k
        valgrind --tool=callgrind --callgrind-out-file="$out" \
          "$CYCLES" "$eurl" "$mode" $((EN * k)) 2>"$out.log" ||
          { echo "FAIL: callgrind cycles etcd $mode" >&2; cat "$out.log" >&2; fails=1; }
        ir+=("$(cat "$out"* 2>/dev/null | awk '/^totals:/ {s += $2} END {print s + 0}')")
      done
      got[etcd.$mode.client_instructions]=$(( (${ir[1]} - ${ir[0]}) / EN ))
      echo "etcd $mode: client instructions per cycle ${got[etcd.$mode.client_instructions]}"
    done
  else
    fails=1
  fi
  kill "$ep" 2>/dev/null; wait "$ep" 2>/dev/null
else
  echo "etcd: not gated (no etcd server, or a build without the etcd backend)"
  etcd_skip=1
fi

if ! command -v valgrind >/dev/null; then
  echo "valgrind is missing: the client's instructions are not gated" >&2
  fails=1
fi

# budgets: "NAME VALUE  # why", NAME as in got[].
while read -r name budget _; do
  case "$name" in ''|'#'*) continue ;; esac
  case "$name" in etcd.*) [ -n "${etcd_skip:-}" ] && continue ;; esac
  v=${got[$name]:-}
  if [ -z "$v" ]; then echo "FAIL: no figure for $name" >&2; fails=1; continue; fi
  verdict=$(awk -v v="$v" -v b="$budget" 'BEGIN{
    if (v > b * 1.05) print "over"; else if (v < b * 0.9) print "under"; else print "ok"}')
  case "$verdict" in
    over) echo "FAIL: $name $v is over its budget $budget by more than 5 %" >&2; fails=1 ;;
    under) echo "note: $name $v is well under its budget $budget: lower the budget" ;;
    *) echo "ok   $name $v (budget $budget)" ;;
  esac
done < "$BUDGETS"
if [ "${COST_PRINT:-0}" = 1 ]; then
  for k in "${!got[@]}"; do echo "$k ${got[$k]}"; done | sort
fi
exit "$fails"
