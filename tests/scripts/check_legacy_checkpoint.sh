#!/usr/bin/env bash
# A checkpoint written by an earlier library loads in this one exactly, and resumes the same
# way every time: tests/fixtures/checkpoint_v1/NAME holds a train_digits project stopped
# after epoch 3 of 8 (made by make.sh there, with the library of git 4850d27). For each:
#   1. what loads equals what was saved: train_digits --resave resumes from the fixture's
#      checkpoint_2 and at once saves the state it holds as checkpoint_3;
#      compare_checkpoints.py requires every tensor (weights, optimizer state, RNG states) and
#      every state field (step counters, loss scale, data position, shard pieces) to equal
#      the fixture's own, bit for bit. Nothing here is computed, so this holds on any CPU.
#   2. resuming is deterministic: the resaved project, and a second fresh copy of the fixture,
#      each train to epoch 8 on this machine; the two final models must be identical bytes.
# What this machine's floating-point kernels compute after the resume is never compared
# with what the fixture's machine computed (the fixture's straight.safetensors and
# straight.log are kept as a record, not as expected output): exact resume against an
# uninterrupted run is proven on one machine by check_resume.sh and test_checkpoint.
#   check_legacy_checkpoint.sh TRAIN_DIGITS FIXTURES_DIR
set -euo pipefail
exe=$1 fixtures=$2
here=$(cd "$(dirname "$0")" && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for dir in "$fixtures"/*/; do
  name=$(basename "$dir")
  read -r -a args < "$dir/args" || true
  cp -r "$dir/project" "$tmp/$name-a"
  cp -r "$dir/project" "$tmp/$name-b"
  "$exe" "${args[@]}" --epochs 8 --project "$tmp/$name-a" --resave > "$tmp/$name-resave.log"
  grep -q "resumed from $tmp/$name-a/checkpoints/checkpoint_2 at epoch 4" "$tmp/$name-resave.log" &&
    grep -q "saved again as $tmp/$name-a/checkpoints/checkpoint_3" "$tmp/$name-resave.log" ||
    { echo "FAIL $name: did not resume from the fixture and save again"; cat "$tmp/$name-resave.log"; exit 1; }
  echo "== $name: the fixture's checkpoint_2 against the state loaded from it and saved again"
  python3 "$here/compare_checkpoints.py" "$dir/project/checkpoints/checkpoint_2" "$tmp/$name-a/checkpoints/checkpoint_3" ||
    { echo "FAIL $name: the state loaded from the v1 checkpoint is not the state it holds"; exit 1; }
  "$exe" "${args[@]}" --epochs 8 --project "$tmp/$name-a" --save "$tmp/$name-a.safetensors" > "$tmp/$name-a.log"
  "$exe" "${args[@]}" --epochs 8 --project "$tmp/$name-b" --save "$tmp/$name-b.safetensors" > "$tmp/$name-b.log"
  grep -q "resumed from $tmp/$name-a/checkpoints/checkpoint_3 at epoch 4" "$tmp/$name-a.log" ||
    { echo "FAIL $name: did not resume from the resaved checkpoint"; cat "$tmp/$name-a.log"; exit 1; }
  grep -q "resumed from $tmp/$name-b/checkpoints/checkpoint_2 at epoch 4" "$tmp/$name-b.log" ||
    { echo "FAIL $name: did not resume from the fixture"; cat "$tmp/$name-b.log"; exit 1; }
  cmp "$tmp/$name-a.safetensors" "$tmp/$name-b.safetensors" ||
    { echo "FAIL $name: two resumes of the same checkpoint on this machine gave different models"; tail -n 1 "$tmp/$name-a.log" "$tmp/$name-b.log"; exit 1; }
  echo "$name: the v1 checkpoint loads exactly; resumed twice to epoch 8, the same model both times ($(tail -n 1 "$tmp/$name-a.log"))"
done
