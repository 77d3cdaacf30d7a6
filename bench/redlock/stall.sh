#!/usr/bin/env bash
# stall.sh DLOCK: six `dlock run` loops contending for three names over
# redlock:// on 5 servers; acquisitions counted in the 5 s before and the
# 5 s after one server is SIGSTOPped.
D=$1; dir=$(mktemp -d /tmp/dlock-stall.XXXX); pids=(); ports=()
for i in 1 2 3 4 5; do
  p=$(python3 -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])'); ports+=($p)
  redis-server --port $p --bind 127.0.0.1 --save '' --appendonly no --dir $dir \
    --logfile $dir/$p.log --daemonize no & pids+=($!)
done
sleep 0.5
U="redlock://$(printf '127.0.0.1:%s,' "${ports[@]}" | sed 's/,$//')"
workers=()
for w in 1 2 3 4 5 6; do
  ( n=$((w % 3)); while :; do
      "$D" -u "$U" run -q -w 5s -l 5s "load$n" -- true 2>/dev/null && date +%s%N >> $dir/w$w
    done ) & workers+=($!)
done
sleep 1
t1=$(date +%s%N); sleep 5; t2=$(date +%s%N)
kill -STOP "${pids[4]}"
sleep 5; t3=$(date +%s%N)
for w in "${workers[@]}"; do kill "$w"; done
wait "${workers[@]}" 2>/dev/null
kill -CONT "${pids[4]}"
before=$(cat $dir/w* | awk -v a=$t1 -v b=$t2 '$1>=a && $1<b' | wc -l)
after=$(cat $dir/w* | awk -v a=$t2 -v b=$t3 '$1>=a && $1<b' | wc -l)
echo "acquisitions: 5 s before the stop $before, 5 s after $after"
for p in "${pids[@]}"; do kill "$p"; done; wait 2>/dev/null
rm -rf "$dir"
