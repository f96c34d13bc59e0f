#!/bin/bash
# A fake simulated rank for check_launch.sh's sim_* cases: it does what a process of
# `accel launch --backend sim` does at its end (docs/launch.md, "Simulated GPUs"), without
# accel: writes ACCEL_SIM_OUT/rank-<RANK>.json and, when ACCEL_SIM_TRACE=1, trace-<RANK>.json.
# Its numbers depend on RANK only, so two runs write the same files.
#
# It first prints the variables it got, one line. Then, by these variables (each a list of
# ranks, "1 3"), rank R
#   FAKE_SIM_FAIL        writes status "failed" and exits 3
#   FAKE_SIM_FAIL_FIRST  the same, on the first attempt only (ACCEL_RESTART_COUNT=0)
#   FAKE_SIM_KILLED      writes status "killed" (a fault), then kills itself with SIGKILL
#   FAKE_SIM_VANISH      writes nothing and kills itself with SIGKILL
#   FAKE_SIM_GARBAGE     writes a report that is not JSON, exits 0
#   FAKE_SIM_SLEEP       writes nothing and sleeps 30 s (for the launcher to stop it)
#   FAKE_SIM_NOSTEPS     reports 0 optimizer steps
#   FAKE_SIM_OWN_ERROR   writes status "ok", then fails on its own: an error on stderr, exit 1
# FAKE_SIM_SYNC=1: every rank ignores SIGTERM and waits, before it ends, until every rank has
# written its files, so that no rank is stopped by the launcher before it ends its own way.
set -u
r=$RANK
out=${ACCEL_SIM_OUT:-}
is() { case " ${!1:-} " in *" $r "*) return 0 ;; esac; return 1; }

echo "rank=$r backend=${ACCEL_BACKEND:-} mem=${ACCEL_SIM_GPU_MEM:-} topology=${ACCEL_SIM_TOPOLOGY:-} trace=${ACCEL_SIM_TRACE:-} faults=${ACCEL_SIM_FAULTS:-} restart=${ACCEL_RESTART_COUNT:-} stale=$(find "$out" -name 'stale-*' 2>/dev/null | wc -l) out=$out"
{ [ -n "$out" ] && [ -d "$out" ]; } || { echo "ACCEL_SIM_OUT '$out' is not a directory" >&2; exit 9; }
[ "${FAKE_SIM_SYNC:-}" = 1 ] && ! is FAKE_SIM_SLEEP && trap '' TERM
# the launcher empties the directory before a restart (a redirection, not touch: a touch still
# running when the launcher stops this shell would outlive it and write after the emptying)
[ "${ACCEL_RESTART_COUNT:-0}" = 0 ] && : >"$out/stale-$r"

status=ok error="" code=0
if is FAKE_SIM_FAIL || { is FAKE_SIM_FAIL_FIRST && [ "${ACCEL_RESTART_COUNT:-0}" = 0 ]; }; then
  status=failed error="loss is NaN at step 3" code=3
fi
is FAKE_SIM_KILLED && status=killed error="fault kill:$r@step:5"
steps=10
is FAKE_SIM_NOSTEPS && steps=0

if is FAKE_SIM_GARBAGE; then
  echo '{"rank": '"$r"', "status": "ok", truncated' >"$out/rank-$r.json"
elif ! is FAKE_SIM_VANISH && ! is FAKE_SIM_SLEEP; then
  # rank R: peak (R+1)*1.5 MiB, R+1.5 virtual seconds
  printf '{"rank":%d,"world_size":%d,"topology":"%s","status":"%s","error":"%s","peak_bytes":%d,"capacity_bytes":0,"virtual_seconds":%d.5,"compute_seconds":%d.25,"comm_seconds":0.25,"steps":%d,"collectives":%d,"bytes_sent":%d}\n' \
    "$r" "$WORLD_SIZE" "${ACCEL_SIM_TOPOLOGY:-}" "$status" "$error" $(((r + 1) * 1572864)) $((r + 1)) $((r + 1)) \
    "$steps" $((steps * 4)) $(((r + 1) * 1000)) >"$out/rank-$r.json.tmp"
  mv "$out/rank-$r.json.tmp" "$out/rank-$r.json"
  if [ "${ACCEL_SIM_TRACE:-}" = 1 ]; then
    cat >"$out/trace-$r.json" <<EOF
[{"name":"process_name","ph":"M","pid":$r,"tid":0,"ts":0,"args":{"name":"rank $r"}},
 {"name":"forward","ph":"X","pid":$r,"tid":0,"ts":$((r * 10)),"dur":1000.5,"args":{"step":1}},
 {"name":"all_reduce","ph":"X","pid":$r,"tid":1,"ts":1000.5,"dur":250,"args":{"bytes":4096,"algorithm":"ring"}}]
EOF
  fi
fi

if [ "${FAKE_SIM_SYNC:-}" = 1 ]; then
  touch "$out/ready-$r"
  for _ in $(seq 1 400); do
    [ "$(find "$out" -name 'ready-*' | wc -l)" -ge "$WORLD_SIZE" ] && break
    sleep 0.025
  done
fi
if is FAKE_SIM_SLEEP; then exec sleep 30; fi
if is FAKE_SIM_KILLED || is FAKE_SIM_VANISH; then kill -KILL $$; fi
if is FAKE_SIM_OWN_ERROR; then
  echo "train: accel_prepare: the processes disagree; process 0 has loader batch_size 32, this process ($r) has batch_size 33" >&2
  exit 1
fi
exit "$code"
