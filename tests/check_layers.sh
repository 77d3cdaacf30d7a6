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

rank() {
  case $1 in
    core) echo 0 ;; net) echo 1 ;; redis | zk | etcd) echo 2 ;; client) echo 3 ;;
    locks) echo 4 ;; cli) echo 5 ;; *) echo -1 ;;
  esac
}

# The floor of a file inside src/redis ($1: its path under redis/), and
# the floors' order (-1: not a floor).
redis_floor() {
  case $1 in
    redis.h) echo entry ;;
    probe.c | probe.h) echo top ;;
    */*) echo "${1%%/*}" ;;
    *) echo none ;;
  esac
}
floor_rank() {
  case $1 in
    entry | lua) echo 0 ;; conns) echo 1 ;; links) echo 2 ;; ops) echo 3 ;;
    redlock) echo 4 ;; top) echo 5 ;; *) echo -1 ;;
  esac
}

# Prints one line per wrong include under $1; returns 1 if any.
check() {
  local src=$1 bad=0 f layer inc target tl ff tf
  while IFS= read -r f; do
    layer=${f#"$src"/}
    layer=${layer%%/*}
    [[ $(rank "$layer") -ge 0 ]] || { echo "$f: not in a layer"; bad=1; continue; }
    if [[ $layer == redis ]]; then
      ff=$(redis_floor "${f#"$src"/redis/}")
      [[ $(floor_rank "$ff") -ge 0 ]] || {
        echo "$f: not in a floor of src/redis"
        bad=1
      }
    fi
    while IFS= read -r inc; do
      target=$(realpath -m "$(dirname "$f")/$inc")
      # Not beside the file: from src/ (the build's include path).
      [[ -e $target ]] || target=$(realpath -m "$src/$inc")
      case $target in "$(realpath -m "$src")"/*) ;; *) continue ;; esac
      tl=${target#"$(realpath -m "$src")"/}
      tl=${tl%%/*}
      if [[ $layer == redis && $tl == redis ]]; then
        # Inside the Redis layer: its floors point one way.
        tf=$(redis_floor "${target#"$(realpath -m "$src")"/redis/}")
        if [[ $(floor_rank "$ff") -ge 0 &&
              $(floor_rank "$tf") -gt $(floor_rank "$ff") ]]; then
          echo "$f includes $inc: the redis floor $ff may not see $tf (a floor above it)"
          bad=1
        fi
      elif [[ $(rank "$tl") -gt $(rank "$layer") ]]; then
        echo "$f includes $inc: $layer may not see $tl (a layer above it)"
        bad=1
      elif [[ $tl != "$layer" && $(rank "$tl") -eq $(rank "$layer") ]]; then
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
    if grep -q '^[[:space:]]*#[[:space:]]*include[[:space:]]*<hiredis/' "$f" &&
       [[ $layer != redis && $layer != cli ]]; then
      echo "$f includes hiredis: only the Redis layer and the CLI may"
      bad=1
    fi
    if grep -q '^[[:space:]]*#[[:space:]]*include[[:space:]]*<zookeeper/' "$f" &&
       [[ $layer != zk ]]; then
      echo "$f includes ZooKeeper: only the zk layer may"
      bad=1
    fi
    if grep -Eq '^[[:space:]]*#[[:space:]]*include[[:space:]]*<(curl|json-c|jansson|protobuf-c)[/.]' "$f" &&
       [[ $layer != etcd ]]; then
      echo "$f includes libcurl, a JSON library or protobuf-c: only the etcd layer may"
      bad=1
    fi
  done < <(find "$src" -name '*.c' -o -name '*.h' | sort)
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
