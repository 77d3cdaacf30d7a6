#!/usr/bin/env bash
# check.sh: installs BUILD_DIR into a temp prefix, then builds and runs a
# program against it twice: with pkg-config and with find_package(dlock).
set -euo pipefail
build=$(realpath "$1")
here=$(cd "$(dirname "$0")" && pwd)
tmp=$(mktemp -d /tmp/dlock-install-XXXXXX)
trap 'rm -rf "$tmp"' EXIT
cmake --install "$build" --prefix "$tmp/prefix" >/dev/null
pcdir=$(dirname "$(find "$tmp/prefix" -name dlock.pc)")
libdir=$(dirname "$pcdir")
flags=$(PKG_CONFIG_PATH=$pcdir pkg-config --cflags --libs dlock)
# shellcheck disable=SC2086
cc "$here/example.c" $flags -o "$tmp/ex-pc"
LD_LIBRARY_PATH=$libdir "$tmp/ex-pc"
# dlock.h includes no hiredis header: its flags must not reach consumers.
cflags=$(PKG_CONFIG_PATH=$pcdir pkg-config --cflags dlock)
case "$cflags" in *hiredis*|*-D_FILE_OFFSET_BITS*)
  echo "dlock.pc gives consumers hiredis' Cflags: $cflags" >&2; exit 1 ;; esac
# A static link takes what it needs from Libs.private.
static_libs=$(PKG_CONFIG_PATH=$pcdir pkg-config --static --libs-only-l dlock)
# shellcheck disable=SC2086
cc "$here/example.c" $cflags "$libdir/libdlock.a" \
  $(PKG_CONFIG_PATH=$pcdir pkg-config --static --libs-only-L dlock) \
  ${static_libs//-ldlock/} -o "$tmp/ex-static"
"$tmp/ex-static"
cmake -S "$here" -B "$tmp/consumer" -DCMAKE_PREFIX_PATH="$tmp/prefix" >/dev/null
cmake --build "$tmp/consumer" >/dev/null
LD_LIBRARY_PATH=$libdir "$tmp/consumer/example"
test -f "$tmp/prefix/share/man/man1/dlock.1"
test -x "$tmp/prefix/bin/dlock"
echo "1 passed, 0 failed"
