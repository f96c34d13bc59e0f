#!/usr/bin/env bash
# `accel sim bench` prints one JSON line per size, with measured times where measured and
# predictions with algbw/busbw for every size; a bad preset is a clear error.
# Usage: check_sim_bench.sh ACCEL_TOOL
set -euo pipefail
tool=$1
out=$("$tool" sim bench --op all_reduce --ranks 2,4 --min-bytes 64KiB --max-bytes 256KiB --predict-to 1MiB --json --iters 2)
printf '%s\n' "$out"
[ "$(printf '%s\n' "$out" | grep -c '"bench":"sim_bench"')" -eq 10 ] || { echo "FAIL: expected 10 lines (5 sizes x 2 world sizes)"; exit 1; }
[ "$(printf '%s\n' "$out" | grep -c '"measured_us":null')" -eq 4 ] || { echo "FAIL: sizes above --max-bytes must be predicted only"; exit 1; }
printf '%s\n' "$out" | grep -q '"ranks":4,"dtype":"float32","topology":"8xH100","bytes":1048576' || { echo "FAIL: missing the 1 MiB row"; exit 1; }
for op in reduce_scatter all_gather broadcast reduce; do
  "$tool" sim bench --op $op --ranks 3 --min-bytes 12KiB --max-bytes 12KiB --predict-to 12KiB --iters 1 > /dev/null
done
if "$tool" sim bench --topology 8xTPU > "${TMPDIR:-/tmp}/sim_bench_err.$$" 2>&1; then echo "FAIL: a bad topology was accepted"; exit 1; fi
grep -q "unknown topology '8xTPU'" "${TMPDIR:-/tmp}/sim_bench_err.$$" || { echo "FAIL: unclear error"; exit 1; }
rm -f "${TMPDIR:-/tmp}/sim_bench_err.$$"
"$tool" sim topologies | grep -q 8xA100
echo "accel sim bench: OK"
