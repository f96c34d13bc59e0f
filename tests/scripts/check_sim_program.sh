#!/usr/bin/env bash
# A run recorded on simulated ranks replays: train_digits (the main job) with
# ACCEL_SIM_PROGRAM=FILE writes its ranks' computes, collectives and waits; `accel sim step
# --program FILE` replays them to the time the run predicted (to 1e-9), and on 1,000 ranks of
# 125 H100 nodes. A file that is not a recording is a clear error.
# Usage: check_sim_program.sh TRAIN_DIGITS ACCEL_TOOL
set -euo pipefail
digits=$1 tool=$2
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
ACCEL_SIM_PROGRAM="$dir/run.json" "$digits" --epochs 1 > "$dir/out.txt" 2>&1 || { cat "$dir/out.txt"; echo "FAIL: train_digits"; exit 1; }
[ -s "$dir/run.json" ] || { echo "FAIL: no recording written"; exit 1; }
same=$("$tool" sim step --program "$dir/run.json" --json)
printf '%s\n' "$same"
rec=$(printf '%s\n' "$same" | sed -n 's/.*"recorded_predicted_s":\([0-9.e-]*\).*/\1/p')
rep=$(printf '%s\n' "$same" | sed -n 's/.*"replayed_predicted_s":\([0-9.e-]*\).*/\1/p')
awk -v a="$rec" -v b="$rep" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(a > 0 && d <= 1e-9 * a) }' \
  || { echo "FAIL: the replay ($rep s) is not the run's time ($rec s)"; exit 1; }
grep -q "predicted on" "$dir/out.txt" || { echo "FAIL: the run printed no prediction"; exit 1; }
big=$("$tool" sim step --program "$dir/run.json" -n 1000 --json)
printf '%s\n' "$big"
printf '%s\n' "$big" | grep -q '"ranks":1000,"topology":"125x8xH100-IB"' || { echo "FAIL: the replay on 1,000 ranks"; exit 1; }
echo '{"not":"a recording"}' > "$dir/bad.json"
if "$tool" sim step --program "$dir/bad.json" > "$dir/err.txt" 2>&1; then echo "FAIL: a bad recording was accepted"; exit 1; fi
grep -q "not an accel simulator recording" "$dir/err.txt" || { cat "$dir/err.txt"; echo "FAIL: unclear error"; exit 1; }
echo "recorded run replays: OK"
