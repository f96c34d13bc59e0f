#!/usr/bin/env bash
# Two builds of accel side by side on this machine, alternately (so load drifts hit both): the
# main job (examples/train_digits with its defaults: its whole output, and its wall time) and
# the --quick runs of bench_step_overhead, bench_ddp_overhead, bench_sim_allreduce (--no-gloo)
# and bench_sim_processes (--no-gloo), ROUNDS times each. What a restructuring must not change
# (issue 34: "figures before and after").
#   bench/before_after.sh BEFORE_BUILD AFTER_BUILD [ROUNDS] [OUT]
# e.g. git worktree add /tmp/before OLD && meson setup /tmp/before/build -Dtests=false &&
#      ninja -C /tmp/before/build examples/train_digits bench/bench_step_overhead \
#        bench/bench_ddp_overhead bench/bench_sim_allreduce bench/bench_sim_processes tools/accel
#      bench/before_after.sh /tmp/before/build build 2
# OUT (default /tmp/before_after) gets main_SIDE_ROUND.txt/.time and BENCH_SIDE_ROUND.json.
set -euo pipefail
[ $# -ge 2 ] || { sed -n '2,12p' "$0"; exit 2; }
before=$(cd "$1" && pwd) after=$(cd "$2" && pwd) rounds=${3:-2} out=${4:-/tmp/before_after}
mkdir -p "$out"
for round in $(seq 1 "$rounds"); do
  for side in before after; do
    d=$before; [ "$side" = after ] && d=$after
    echo "before_after: round $round, $side ($d), $(date +%T)" >&2
    t0=$(date +%s.%N)
    (cd "$d" && ./examples/train_digits > "$out/main_${side}_${round}.txt" 2>&1)
    t1=$(date +%s.%N)
    echo "$t1 - $t0" | bc > "$out/main_${side}_${round}.time"
    "$d/bench/bench_step_overhead" --quick > "$out/step_${side}_${round}.json"
    "$d/bench/bench_ddp_overhead" --quick > "$out/ddp_${side}_${round}.json"
    "$d/bench/bench_sim_allreduce" --quick --no-gloo > "$out/simar_${side}_${round}.json"
    "$d/bench/bench_sim_processes" --quick --no-gloo > "$out/simproc_${side}_${round}.json"
  done
done
for round in $(seq 1 "$rounds"); do
  if cmp -s "$out/main_before_${round}.txt" "$out/main_after_${round}.txt"; then
    echo "before_after: round $round: the main job's output is the same, byte for byte" >&2
  else
    echo "before_after: round $round: the main job's output differs:" >&2
    diff "$out/main_before_${round}.txt" "$out/main_after_${round}.txt" >&2 || true
  fi
done
echo "before_after: figures in $out" >&2
