#!/usr/bin/env bash
# Builds the safetensors fuzzer with clang (libFuzzer + AddressSanitizer + UBSan) and runs
# it for a bounded time on a copy of the seed corpus. Exit status: the fuzzer's (non-zero
# when it found a crash, a sanitizer report or a broken invariant).
#   run_fuzzer.sh SOURCE_ROOT BUILD_DIR SECONDS
set -euo pipefail
src=$1 build=$2 seconds=$3
clangxx=$(command -v clang++ || true)
[ -n "$clangxx" ] || { echo "run_fuzzer.sh: clang++ is not installed (scripts/setup installs it)"; exit 1; }
out="$build/fuzz"
mkdir -p "$out"
"$clangxx" -std=c++17 -O1 -g -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined \
  -I"$src" "$src/tests/fuzz/fuzz_safetensors.cpp" "$src/runtime/safetensors.cpp" -lz -o "$out/fuzz_safetensors"
corpus=$(mktemp -d)
trap 'rm -rf "$corpus"' EXIT
cp "$src"/tests/fuzz/corpus/* "$corpus"/
echo "fuzzing the safetensors reader for $seconds s from $(ls "$corpus" | wc -l) seeds"
"$out/fuzz_safetensors" -max_total_time="$seconds" -max_len=4096 -timeout=10 -rss_limit_mb=2048 \
  -print_final_stats=1 "$corpus" 2>&1 | tail -n 25
exit "${PIPESTATUS[0]}"
