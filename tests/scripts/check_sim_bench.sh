#!/usr/bin/env bash
# `accel sim bench` prints one JSON line per size, with measured times where measured and
# predictions with algbw/busbw for every size; a bad preset is a clear error. The NVLS
# algorithm is chosen only where NCCL can run it (not for avg). `accel sim step` replays a
# step on 100,000 ranks and names bad arguments.
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
# NVLS (16 MiB on 8 H100) for a bf16 sum, the ring for an avg: NCCL has no NVLS premulsum
"$tool" sim bench -d bfloat16 -o sum -b 16MiB -e 16MiB --predict-to 16MiB --iters 1 --json | grep -q '"algorithm":"nvls"' \
  || { echo "FAIL: a bf16 sum of 16 MiB on 8xH100 should run NVLS"; exit 1; }
"$tool" sim bench -d bfloat16 -o avg -b 16MiB -e 16MiB --predict-to 16MiB --iters 1 --json | grep -q '"algorithm":"ring"' \
  || { echo "FAIL: avg must not run NVLS"; exit 1; }
# --algo (NCCL_ALGO's syntax) forces one: the ring at that size, and NVLS for an all-gather is an error
"$tool" sim bench -d bfloat16 -o sum -b 16MiB -e 16MiB --predict-to 16MiB --iters 1 --json --algo Ring | grep -q '"algorithm":"ring"' \
  || { echo "FAIL: --algo Ring did not force the ring"; exit 1; }
NCCL_ALGO=ring "$tool" sim bench -d bfloat16 -o sum -b 16MiB -e 16MiB --predict-to 16MiB --iters 1 --json | grep -q '"algorithm":"ring"' \
  || { echo "FAIL: NCCL_ALGO=ring did not force the ring"; exit 1; }
if "$tool" sim bench --op all_gather -b 1MiB -e 1MiB --predict-to 1MiB --iters 1 --algo NVLS > "${TMPDIR:-/tmp}/sim_algo_err.$$" 2>&1; then
  echo "FAIL: --algo NVLS for all_gather was accepted"; exit 1
fi
grep -q "no algorithm for all_gather of 1048576 bytes over 8 ranks on 8xH100: the algorithms allowed ('NVLS') exclude the cost model's (ring)" \
  "${TMPDIR:-/tmp}/sim_algo_err.$$" || { echo "FAIL: unclear --algo error"; cat "${TMPDIR:-/tmp}/sim_algo_err.$$"; exit 1; }
rm -f "${TMPDIR:-/tmp}/sim_algo_err.$$"
# a spec preset follows NCCL's tuner: an all-gather on 8 H200 switches LL -> LL128 -> Simple
# (LL up to 4.5 MB, LL128 to 23.9 MB: docs/sim-calibration.md)
ag=$("$tool" sim bench --topology 8xH200 --op all_gather -b 1MiB -e 1MiB --predict-to 64MiB --iters 1 --json)
for want in '"bytes":4194304,.*"protocol":"LL",' '"bytes":8388608,.*"protocol":"LL128",' '"bytes":33554432,.*"protocol":"Simple",'; do
  printf '%s\n' "$ag" | grep -q "$want" || { echo "FAIL: 8xH200 all_gather: no line matching $want"; printf '%s\n' "$ag"; exit 1; }
done
# accel sim step: 100,000 ranks, both patterns, a straggler
step=$("$tool" sim step -n 100000 --json)
printf '%s\n' "$step"
printf '%s\n' "$step" | grep -q '"ranks":100000,"topology":"12500x8xH100-IB"' || { echo "FAIL: sim step's world"; exit 1; }
printf '%s\n' "$step" | grep -q '"collectives":1226,' || { echo "FAIL: 8.03e9 fp32 gradients in 25 MiB buckets are 1226 all-reduces"; exit 1; }
pred=$(printf '%s\n' "$step" | sed -n 's/.*"predicted_step_s":\([0-9.]*\).*/\1/p')
comp=$(printf '%s\n' "$step" | sed -n 's/.*"compute_s":\([0-9.]*\).*/\1/p')
awk -v p="$pred" -v c="$comp" 'BEGIN { exit !(p > c && c > 0) }' || { echo "FAIL: the step ($pred s) must exceed its compute ($comp s)"; exit 1; }
"$tool" sim step -n 1000 --strategy zero3 --layers 4 | grep -q "^predicted step" || { echo "FAIL: sim step's text"; exit 1; }
even=$("$tool" sim step -n 64 --tokens 1e6 --json | sed -n 's/.*"predicted_step_s":\([0-9.]*\).*/\1/p')
slow=$("$tool" sim step -n 64 --tokens 1e6 --slow 7:2 --json | sed -n 's/.*"predicted_step_s":\([0-9.]*\).*/\1/p')
awk -v e="$even" -v s="$slow" 'BEGIN { exit !(s > e) }' || { echo "FAIL: a straggler ($slow s) must slow the step ($even s)"; exit 1; }
for bad in "--slow 7x" "--slow 64:2" "--strategy zero2" "-t 8xH100"; do
  # shellcheck disable=SC2086
  if "$tool" sim step -n 64 $bad > "${TMPDIR:-/tmp}/sim_step_err.$$" 2>&1; then echo "FAIL: sim step accepted $bad"; exit 1; fi
  grep -q "^accel: " "${TMPDIR:-/tmp}/sim_step_err.$$" || { echo "FAIL: sim step $bad: no message"; cat "${TMPDIR:-/tmp}/sim_step_err.$$"; exit 1; }
done
rm -f "${TMPDIR:-/tmp}/sim_step_err.$$"
echo "accel sim bench, accel sim step: OK"
