#!/usr/bin/env bash
# install-deps.sh: installs every build and test dependency of dlock on a
# Debian or Ubuntu machine. Idempotent; needs root or sudo.
set -euo pipefail

packages=(build-essential cmake pkg-config libhiredis-dev libssl-dev
          redis-server redis-tools openssl gnuplot-nox python3 bsdutils
          libfaketime libuv1-dev libevent-dev redis-sentinel
          libzookeeper-mt-dev zookeeper default-jdk-headless
          libcurator-recipes-java valgrind abigail-tools
          etcd-server etcd-client libcurl4-openssl-dev libjson-c-dev
          golang-go golang-etcd-server-dev curl libmicrohttpd-dev tmux
          postgresql libpq-dev prometheus libprotobuf-c-dev
          protobuf-c-compiler iptables)
# default-jdk-headless (javac) and libcurator-recipes-java: the ZooKeeper
# interop test (tests/test_zk_interop.sh) compiles a Curator peer; valgrind:
# the cost gate (tests/test_cost.sh) in every run; abigail-tools: the ABI
# check (tests/test_abi.sh). etcd-server and etcd-client (etcdctl): the
# etcd tests' private server and its own lock client (tests/test_etcd.c);
# libcurl4-openssl-dev and libjson-c-dev: the etcd backend (src/etcd, the
# JSON gateway over HTTP; json-c for its incremental parser of the watch
# streams, docs/ARCHITECTURE.md); golang-go and golang-etcd-server-dev:
# the etcd interop test (tests/test_etcd_interop.sh) builds etcd's own Go
# client from Debian's sources; curl: its server's health probe (and
# tests/test_observe.sh's scrape of dlock metrics --listen, which
# libmicrohttpd-dev builds); tmux: test_observe.sh's terminal for dlock top.
# postgresql and libpq-dev: the fencing token checked by PostgreSQL
# (examples/fenced_postgres.c, tests/test_postgres.sh: a private server).
# prometheus (with promtool): test_observe.sh checks dlock metrics' text
# with promtool and has a real Prometheus scrape dlock metrics --listen.
# libprotobuf-c-dev and protobuf-c-compiler: the etcd backend's gRPC
# messages (src/etcd/etcd_min.proto; without them etcd:// is off) and the
# gRPC spike (bench/etcd/grpc_probe.c, ctest test_etcd_grpc_probe).
# iptables: tests/test_partition.c cuts connections in a network namespace
# of its own.
[ "${DLOCK_WITH_TOOLS:-0}" = 1 ] && packages+=(clang)
# Node and npm for the interop test with npm redlock and redis-semaphore
# (tests/test_interop_node.sh); only when missing: an npm installed outside
# Debian's packages conflicts with Debian's.
command -v node >/dev/null || packages+=(nodejs)
command -v npm >/dev/null || packages+=(npm)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" \
    || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  SUDO=""
  if [ "$(id -u)" -ne 0 ]; then
    command -v sudo >/dev/null || { echo "install-deps: need root or sudo for: ${missing[*]}" >&2; exit 1; }
    SUDO=sudo
  fi
  echo "install-deps: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# The Node.js peers of tests/test_interop_node.sh (npm redlock and
# redis-semaphore, pinned in tests/interop/node/package.json), beside
# peer.js, as the user running this (not root's files in the tree).
peers="$(cd "$(dirname "$0")/.." && pwd)/tests/interop/node"
if [ ! -d "$peers/node_modules/redlock" ] ||
   [ ! -d "$peers/node_modules/redis-semaphore" ]; then
  echo "install-deps: installing the Node.js peers into $peers/node_modules"
  (cd "$peers" && npm install --no-audit --no-fund --no-package-lock \
     --loglevel=error >/dev/null)
fi
