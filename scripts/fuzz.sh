#!/usr/bin/env bash
# fuzz.sh: builds the libFuzzer targets (clang, ASan+UBSan) and runs each:
#   fuzz_parsers   URLs, durations, server error text, URL redaction
#   fuzz_replies   every Redis reply the library reads (lock, watchdog,
#                  inspect, scan, ping, the subscriber's messages)
#   scripts/fuzz.sh [SECONDS]   per target; default 20 (CI runs a short run)
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-20}
command -v clang >/dev/null || { echo "fuzz.sh: needs clang (apt-get install clang)" >&2; exit 1; }
out=build-fuzz
cmake -S . -B "$out" -DCMAKE_C_COMPILER=clang -DCMAKE_BUILD_TYPE=Debug \
  -DDLOCK_FUZZ=ON -DDLOCK_BUILD_TESTS=OFF -DDLOCK_WERROR=ON >/dev/null
cmake --build "$out" -j"$(nproc)" --target fuzz_parsers fuzz_replies >/dev/null
for t in fuzz_parsers fuzz_replies; do
  corpus=$out/corpus-$t
  mkdir -p "$corpus"
  cp -n tests/fuzz/corpus/${t#fuzz_}/* "$corpus/" 2>/dev/null || true
  echo "== $t, $secs s"
  "$out/$t" -max_total_time="$secs" -max_len=2048 -print_final_stats=1 \
    "$corpus" 2>&1 | tail -n 6
done
