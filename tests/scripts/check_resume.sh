#!/usr/bin/env bash
# The main job killed and restarted gives the uninterrupted run's model, bit for bit:
# train_digits with --project stops after 3 of 8 epochs (--stop-after, as if killed), is
# started again with the same arguments, resumes from its checkpoint, and saves the same
# model.safetensors as a run that never stopped.
#   check_resume.sh TRAIN_DIGITS [ARGS...]
set -euo pipefail
exe=$1; shift
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
"$exe" "$@" --epochs 8 --save "$dir/straight.safetensors" > "$dir/straight.log"
"$exe" "$@" --epochs 8 --project "$dir/p" --stop-after 3 > "$dir/first.log"
"$exe" "$@" --epochs 8 --project "$dir/p" --save "$dir/resumed.safetensors" > "$dir/second.log"
grep -q "resumed from $dir/p/checkpoints/checkpoint_2 at epoch 4" "$dir/second.log" || { echo "FAIL: no resume"; cat "$dir/second.log"; exit 1; }
tail -n 1 "$dir/straight.log" "$dir/second.log"
cmp "$dir/straight.safetensors" "$dir/resumed.safetensors" || { echo "FAIL: the resumed model differs"; exit 1; }
echo "resumed model identical to the uninterrupted one ($(stat -c %s "$dir/resumed.safetensors") bytes)"
