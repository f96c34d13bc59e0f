#!/usr/bin/env bash
# Runs a training example and checks the accuracy on its last line ("accuracy: 0.97") and
# the time it took. Usage: check_accuracy.sh MIN_ACCURACY MAX_SECONDS COMMAND [ARGS...]
set -euo pipefail
min=$1 max_s=$2; shift 2
start=$(date +%s.%N)
out=$("$@")
end=$(date +%s.%N)
printf '%s\n' "$out"
last=$(printf '%s\n' "$out" | tail -n 1)
acc=$(printf '%s\n' "$last" | sed -n 's/^accuracy: \([0-9.]*\)$/\1/p')
[ -n "$acc" ] || { echo "FAIL: last line is not 'accuracy: X': $last"; exit 1; }
secs=$(awk -v a="$start" -v b="$end" 'BEGIN { printf "%.1f", b - a }')
echo "accuracy $acc (minimum $min), $secs s (maximum $max_s s)"
awk -v a="$acc" -v m="$min" 'BEGIN { exit !(a >= m) }' || { echo "FAIL: accuracy $acc < $min"; exit 1; }
awk -v s="$secs" -v m="$max_s" 'BEGIN { exit !(s <= m) }' || { echo "FAIL: took $secs s > $max_s s"; exit 1; }
