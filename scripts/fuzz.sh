#!/usr/bin/env bash
# fuzz.sh: builds the libFuzzer target (clang, ASan+UBSan) and runs it.
#   scripts/fuzz.sh [SECONDS]   default 20; CI runs a short run
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-20}
command -v clang >/dev/null || { echo "fuzz.sh: needs clang (apt-get install clang)" >&2; exit 1; }
out=build-fuzz
mkdir -p "$out/corpus"
cp -n tests/fuzz/corpus/* "$out/corpus/" 2>/dev/null || true
clang -g -O1 -std=c11 -D_GNU_SOURCE -fsanitize=fuzzer,address,undefined \
  -fno-sanitize-recover=all -Iinclude -Isrc \
  tests/fuzz/fuzz_parsers.c src/core/url.c src/core/error.c src/core/util.c \
  src/cli/duration.c -lcrypto -lpthread -o "$out/fuzz_parsers"
"$out/fuzz_parsers" -max_total_time="$secs" -max_len=512 -print_final_stats=1 \
  "$out/corpus" 2>&1 | tail -n 12
