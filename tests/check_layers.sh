#!/usr/bin/env bash
# check_layers.sh: the tree's layers point one way (docs/ARCHITECTURE.md).
#   core <- net <- redis, zk, etcd (peers) <- client <- locks <- cli
# (the CLI sees a backend only through redis/probe.h and etcd/probe.h,
# the benchmark's)
# A file may include headers of its own layer and of the layers below it,
# never above, and not of its peer (redis, zk and etcd do not see each
# other); hiredis is included by the Redis layer and the CLI only,
# ZooKeeper's headers by the zk layer only, libcurl's, json-c's and
# protobuf-c's by the etcd layer only.
# Inside src/redis the same holds for its floors, its folders:
#   lua (the scripts), redis.h (the entry: it includes no floor)
#     <- conns <- links <- ops <- redlock <- probe.c, probe.h
# (a file sees its own floor and those below it; every floor may include
# redis.h, which declares the factories the floors define).
#   tests/check_layers.sh [SRC_DIR]   checks SRC_DIR (default: src)
# It first checks itself on a small tree with one wrong include, which
# must fail (the positive control).
set -uo pipefail

# Each layer's rank (a layer sees those of lower or equal rank), and the
# floors' order inside src/redis; lookups, not subshells (the check reads
# a thousand includes).
declare -A RANK=([core]=0 [net]=1 [redis]=2 [zk]=2 [etcd]=2 [client]=3
                 [locks]=4 [cli]=5)
declare -A FLOOR_RANK=([entry]=0 [lua]=0 [conns]=1 [links]=2 [ops]=3
                       [redlock]=4 [top]=5)
rank() { r=${RANK[$1]:--1}; }
floor_rank() { r=${FLOOR_RANK[$1]:--1}; }

# The floor of a file inside src/redis ($1: its path under redis/), in fl.
redis_floor() {
  case $1 in
    redis.h) fl=entry ;;
    probe.c | probe.h) fl=top ;;
    */*) fl=${1%%/*} ;;
    *) fl=none ;;
  esac
}

# $1 made absolute (from the working directory) and without "." and ".."
# steps, in np (realpath -m without the fork; no symbolic links here).
normpath() {
  local - p=$1 part out=() IFS=/
  set -f # no globbing of the path's parts
  [[ $p == /* ]] || p=$PWD/$p
  for part in $p; do
    case $part in
      '' | .) ;;
      ..) ((${#out[@]})) && unset 'out[${#out[@]}-1]' ;;
      *) out+=("$part") ;;
    esac
  done
  np=/${out[*]}
}

# Prints "FILE includes WHAT" for each file under $1 outside the layers
# $4... that includes a header matching $2 (an extended regex after
# "#include "); returns 1 if any.
only() {
  local src=$1 re=$2 what=$3 f layer bad=0
  shift 3
  while IFS= read -r f; do
    layer=${f#"$src"/}
    layer=${layer%%/*}
    [[ " $* " == *" $layer "* ]] && continue
    echo "$f includes $what"
    bad=1
  done < <(find "$src" \( -name '*.c' -o -name '*.h' \) -print0 | sort -z |
             xargs -0 grep -lE \
               "^[[:space:]]*#[[:space:]]*include[[:space:]]*$re")
  return $bad
}

# Prints one line per wrong include under $1; returns 1 if any.
check() {
  local src=$1 bad=0 f layer inc target tl ff tf srcabs rl rt r fl np
  normpath "$src"
  srcabs=$np
  while IFS= read -r f; do
    layer=${f#"$src"/}
    layer=${layer%%/*}
    rank "$layer"
    rl=$r
    [[ $rl -ge 0 ]] || { echo "$f: not in a layer"; bad=1; continue; }
    if [[ $layer == redis ]]; then
      redis_floor "${f#"$src"/redis/}"
      ff=$fl
      floor_rank "$ff"
      [[ $r -ge 0 ]] || {
        echo "$f: not in a floor of src/redis"
        bad=1
      }
    fi
    while IFS= read -r inc; do
      normpath "${f%/*}/$inc"
      target=$np
      # Not beside the file: from src/ (the build's include path).
      [[ -e $target ]] || { normpath "$src/$inc"; target=$np; }
      case $target in "$srcabs"/*) ;; *) continue ;; esac
      tl=${target#"$srcabs"/}
      tl=${tl%%/*}
      rank "$tl"
      rt=$r
      if [[ $layer == redis && $tl == redis ]]; then
        # Inside the Redis layer: its floors point one way.
        redis_floor "${target#"$srcabs"/redis/}"
        tf=$fl
        floor_rank "$ff"
        local rf=$r
        floor_rank "$tf"
        if [[ $rf -ge 0 && $r -gt $rf ]]; then
          echo "$f includes $inc: the redis floor $ff may not see $tf (a floor above it)"
          bad=1
        fi
      elif [[ $rt -gt $rl ]]; then
        echo "$f includes $inc: $layer may not see $tl (a layer above it)"
        bad=1
      elif [[ $tl != "$layer" && $rt -eq $rl ]]; then
        echo "$f includes $inc: $layer may not see $tl (a peer layer)"
        bad=1
      elif [[ $layer == cli && ( $tl == redis || $tl == zk || $tl == etcd ) &&
              $target != */redis/probe.h && $target != */etcd/probe.h ]]; then
        # The CLI is a user of the library: of the backends it sees only
        # the benchmark's probes (redis/probe.h, etcd/probe.h).
        echo "$f includes $inc: the CLI sees a backend only through its probe (redis/probe.h, etcd/probe.h)"
        bad=1
      fi
    done < <(sed -n 's/^[[:space:]]*#[[:space:]]*include[[:space:]]*"\([^"]*\)".*/\1/p' "$f")
  done < <(find "$src" -name '*.c' -o -name '*.h' | sort)
  # The libraries' headers, each seen by its own layers only (one grep
  # over the tree for each).
  only "$src" '<hiredis/' "hiredis: only the Redis layer and the CLI may" redis cli || bad=1
  only "$src" '<zookeeper/' "ZooKeeper: only the zk layer may" zk || bad=1
  only "$src" '<(curl|json-c|jansson|protobuf-c)[/.]' \
    "libcurl, a JSON library or protobuf-c: only the etcd layer may" etcd || bad=1
  return $bad
}

self=$(mktemp -d)
trap 'rm -rf "$self"' EXIT
mkdir -p "$self/core" "$self/redis" "$self/locks" "$self/zk" "$self/client"
printf '#include "../redis/redis.h"\n' > "$self/core/bad.c"
printf '#include "../core/core.h"\n' > "$self/redis/redis.h"
printf '#include <hiredis/hiredis.h>\n' > "$self/locks/reply.c"
printf '#include "locks/x.h"\n' > "$self/redis/up.c"
touch "$self/locks/x.h"
printf '#include <zookeeper/zookeeper.h>\n' > "$self/client/zkuse.c"
printf '#include "../redis/redis.h"\n' > "$self/zk/peer.c"
mkdir -p "$self/cli" "$self/etcd"
printf '#include <curl/curl.h>\n' > "$self/locks/http.c"
printf '#include "../zk/zk.h"\n' > "$self/etcd/peer.c"
touch "$self/zk/zk.h"
printf '#include "../redis/redis.h"\n' > "$self/cli/inside.c"
# The floors of src/redis: a connection that sees a link and an operation
# that sees Redlock are wrong; a link that sees a connection, an operation
# that sees the entry header and a file of a folder that is no floor are
# told apart.
mkdir -p "$self/redis/conns" "$self/redis/links" "$self/redis/ops" \
  "$self/redis/redlock" "$self/redis/attic"
touch "$self/redis/conns/conns.h" "$self/redis/links/links.h" \
  "$self/redis/redlock/redlock.h"
printf '#include "../links/links.h"\n' > "$self/redis/conns/upfloor.c"
printf '#include "redis/redlock/redlock.h"\n' > "$self/redis/ops/upfloor.c"
printf '#include "../conns/conns.h"\n' > "$self/redis/links/down.c"
printf '#include "../redis.h"\n' > "$self/redis/ops/entry.c"
printf '#include "../conns/conns.h"\n' > "$self/redis/attic/stray.c"
out=$(check "$self")
if [[ $? -eq 0 || $out != *"core may not see redis"* ||
      $out != *"only the Redis layer"* ||
      $out != *"redis may not see locks"* ||
      $out != *"only the zk layer"* || $out != *"zk may not see redis"* ||
      $out != *"only through its probe"* ||
      $out != *"only the etcd layer may"* ||
      $out != *"etcd may not see zk"* ||
      $out != *"floor conns may not see links"* ||
      $out != *"floor ops may not see redlock"* ||
      $out != *"attic/stray.c: not in a floor"* ||
      $out == *"down.c"* || $out == *"entry.c"* ]]; then
  echo "check_layers.sh: the positive control passed a wrong tree:" >&2
  echo "$out" >&2
  exit 1
fi

src=${1:-"$(dirname "$0")/../src"}
if ! check "$src"; then
  echo "check_layers.sh: includes point up a layer (see above)" >&2
  exit 1
fi
echo "check_layers.sh: every include points down or sideways"
