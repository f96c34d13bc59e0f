#!/usr/bin/env bash
# A checkpoint written by an earlier library loads in this one and resumes exactly:
# tests/fixtures/checkpoint_v1/NAME holds a train_digits project stopped after epoch 3 of 8
# (made by make.sh there, with the library of git 4850d27) and the final model of the same
# run never stopped. Each is resumed with today's train_digits; the final model must be the
# uninterrupted run's, bit for bit.
#
# Bit-for-bit needs the same floating-point kernels as the machine that made the fixtures
# (x86-64, OpenBLAS 0.3.21 OpenMP): where this machine's own uninterrupted run differs from
# the committed one, its BLAS picked other kernels, and the test compares the final
# accuracy line instead (and says so).
#   check_legacy_checkpoint.sh TRAIN_DIGITS FIXTURES_DIR
set -euo pipefail
exe=$1 fixtures=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for dir in "$fixtures"/*/; do
  name=$(basename "$dir")
  read -r -a args < "$dir/args" || true
  cp -r "$dir/project" "$tmp/$name"
  "$exe" "${args[@]}" --epochs 8 --project "$tmp/$name" --save "$tmp/$name.safetensors" > "$tmp/$name.log"
  grep -q "resumed from $tmp/$name/checkpoints/checkpoint_2 at epoch 4" "$tmp/$name.log" ||
    { echo "FAIL $name: did not resume from the fixture"; cat "$tmp/$name.log"; exit 1; }
  if cmp -s "$tmp/$name.safetensors" "$dir/straight.safetensors"; then
    echo "$name: resumed from the v1 checkpoint, final model identical to the v1 uninterrupted run"
    continue
  fi
  "$exe" "${args[@]}" --epochs 8 --save "$tmp/$name-straight.safetensors" > "$tmp/$name-straight.log"
  if cmp -s "$tmp/$name-straight.safetensors" "$dir/straight.safetensors"; then
    echo "FAIL $name: this machine reproduces the v1 uninterrupted run, but resuming the v1 checkpoint gives another model"
    tail -n 2 "$tmp/$name.log" "$dir/straight.log"
    exit 1
  fi
  want=$(tail -n 1 "$dir/straight.log") got=$(tail -n 1 "$tmp/$name.log")
  [ "$want" = "$got" ] || { echo "FAIL $name: resumed '$got', the v1 run '$want' (and this machine's kernels differ)"; exit 1; }
  echo "$name: resumed from the v1 checkpoint; this machine's kernels differ from the fixture's, final $got as the v1 run"
done
