#!/usr/bin/env bash
# test_abi.sh: the built shared library against the ABI recorded for its
# SONAME (abi/libdlock.so.N.abi; docs/API.md, "Versions and the ABI").
# Additions pass (and are listed); anything removed or changed fails, but a
# member appended to a struct that begins with its size (abi/sized.suppr).
#   tests/test_abi.sh LIBRARY            compare
#   tests/test_abi.sh LIBRARY --write    record (with a SONAME bump only)
# LIBRARY is the built libdlock.so.X.Y.Z. Needs abidw and abidiff (Debian's
# abigail-tools; scripts/install-deps.sh installs them).
set -u
SRC=$(cd "$(dirname "$0")/.." && pwd)
LIB=$1
for t in abidw abidiff readelf; do
  command -v "$t" >/dev/null || { echo "test_abi: $t is missing (scripts/install-deps.sh)" >&2; exit 1; }
done
SONAME=$(readelf -d "$LIB" | sed -n 's/.*Library soname: \[\(.*\)\]/\1/p')
[ -n "$SONAME" ] || { echo "test_abi: $LIB has no SONAME" >&2; exit 1; }
readelf -S "$LIB" | grep -q '\.debug_info' || {
  echo "test_abi: skipped: $LIB has no debug info (build with -DCMAKE_BUILD_TYPE=RelWithDebInfo, as scripts/test.sh does)"
  exit 77
}
REC=$SRC/abi/$SONAME.abi
dump() {
  abidw --headers-dir "$SRC/include" --drop-private-types --no-show-locs \
    --no-corpus-path --no-comp-dir-path "$LIB"
}
if [ "${2:-}" = --write ]; then
  dump > "$REC" && echo "test_abi: wrote $REC"
  exit
fi
[ -f "$REC" ] || {
  echo "test_abi: no record of $SONAME's ABI ($REC): a new SONAME is recorded with --write" >&2
  exit 1
}
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
dump > "$TMP/now.abi" || { echo "test_abi: abidw failed" >&2; exit 1; }
abidiff --suppressions "$SRC/abi/sized.suppr" "$REC" "$TMP/now.abi" > "$TMP/diff"
rc=$?
cat "$TMP/diff"
# abidiff's bits: 1 error, 2 usage, 4 a change, 8 an incompatible change.
if [ $((rc & 3)) != 0 ]; then echo "test_abi: abidiff failed ($rc)" >&2; exit 1; fi
bad=$(grep -E '^(Functions|Variables) changes summary|symbols changes summary' "$TMP/diff" |
  grep -Ev ' 0 Removed, 0 Changed' | grep -Ev ' 0 Removed, [0-9]+ Added' || true)
if [ $((rc & 8)) != 0 ] || [ -n "$bad" ]; then
  echo "test_abi: $SONAME's ABI changed: bump DLOCK_SOVERSION in CMakeLists.txt and record the new one (--write), or keep the old" >&2
  exit 1
fi
# The positive control: the record of the SONAME before (if any) differs
# from this build as the gate sees it, since a break is what bumped it.
N=${SONAME##*.so.}
PREV=$SRC/abi/libdlock.so.$((N - 1)).abi
if [ "$N" -gt 0 ] && [ -f "$PREV" ]; then
  abidiff --suppressions "$SRC/abi/sized.suppr" "$PREV" "$TMP/now.abi" > "$TMP/prev"
  prc=$?
  pbad=$(grep -E '^(Functions|Variables) changes summary' "$TMP/prev" |
    grep -Ev ' 0 Removed, 0 Changed' || true)
  if [ $((prc & 8)) = 0 ] && [ -z "$pbad" ]; then
    echo "test_abi: the gate sees no break from $(basename "$PREV") to this build: the SONAME bump was not needed, or the check misses it" >&2
    exit 1
  fi
  echo "test_abi: $(basename "$PREV") to this build: a break, as the SONAME bump says"
fi
echo "test_abi: $SONAME keeps its ABI ($([ $((rc & 4)) != 0 ] && echo 'with additions' || echo 'unchanged'))"
