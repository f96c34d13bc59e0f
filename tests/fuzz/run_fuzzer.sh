#!/usr/bin/env bash
# Builds a fuzzer with clang (libFuzzer + AddressSanitizer + UBSan) and runs it for a
# bounded time on a copy of its seed corpus. Exit status: the fuzzer's (non-zero when it
# found a crash, a sanitizer report or a broken invariant).
#   run_fuzzer.sh SOURCE_ROOT BUILD_DIR SECONDS [TARGET]
# TARGET: safetensors (the safetensors reader, the default) or checkpoint (the checkpoint
# manifest and rank-file readers). By hand, for longer: tests/fuzz/run_fuzzer.sh . build 3600 checkpoint
set -euo pipefail
src=$1 build=$2 seconds=$3 target=${4:-safetensors}
clangxx=$(command -v clang++ || true)
[ -n "$clangxx" ] || { echo "run_fuzzer.sh: clang++ is not installed (scripts/setup installs it)"; exit 1; }
case "$target" in
  safetensors) sources=("$src/tests/fuzz/fuzz_safetensors.cpp" "$src/runtime/safetensors.cpp" "$src/base/files.cpp" "$src/base/text.cpp") corpus_src="$src/tests/fuzz/corpus" ;;
  checkpoint) sources=("$src/tests/fuzz/fuzz_checkpoint.cpp" "$src/runtime/checkpoint_format.cpp") corpus_src="$src/tests/fuzz/corpus_checkpoint" ;;
  *) echo "run_fuzzer.sh: unknown target '$target' (safetensors, checkpoint)"; exit 2 ;;
esac
out="$build/fuzz"
mkdir -p "$out"
"$clangxx" -std=c++17 -O1 -g -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined \
  -I"$src" "${sources[@]}" -lz -o "$out/fuzz_$target"
corpus=$(mktemp -d)
trap 'rm -rf "$corpus"' EXIT
cp "$corpus_src"/* "$corpus"/
echo "fuzzing the $target reader for $seconds s from $(ls "$corpus" | wc -l) seeds"
"$out/fuzz_$target" -max_total_time="$seconds" -max_len=4096 -timeout=10 -rss_limit_mb=2048 \
  -print_final_stats=1 "$corpus" 2>&1 | tail -n 25
exit "${PIPESTATUS[0]}"
