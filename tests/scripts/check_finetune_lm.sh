#!/usr/bin/env bash
# The fine-tuning example end to end (examples/c/finetune_lm.c --quick): LoRA on a small
# Qwen2-shaped model, from a chat JSONL, on 2 simulated GPUs. The loss on the assistant's
# answers falls below 0.3 of the first step's, the model answers the three questions before
# and after (generation from a left-padded batch), at least one answer after fine-tuning is an
# equation "A + B = C." or "A - B = C." (the data's format), and the PEFT adapter is written.
#   check_finetune_lm.sh FINETUNE_LM OUT_DIR
set -euo pipefail
exe=$1 out=$2
rm -rf "$out"
log=$("$exe" --quick --out "$out")
printf '%s\n' "$log"
fail() { echo "check_finetune_lm: $*"; exit 1; }
last=$(grep -E '^step 120: loss' <<<"$log") || fail "no step 120 line"
loss=$(sed -n 's/^step 120: loss \([0-9.]*\) .*first step \([0-9.]*\)).*/\1/p' <<<"$last")
first=$(sed -n 's/^step 120: loss \([0-9.]*\) .*first step \([0-9.]*\)).*/\2/p' <<<"$last")
awk -v l="$loss" -v f="$first" 'BEGIN { exit !(l < 0.3 * f) }' || fail "the loss $loss is not below 0.3 of the first step's $first"
[ "$(grep -c '^  What is ' <<<"$log")" = 6 ] || fail "not three answers before and after"
after=$(sed -n '/^After fine-tuning/,$p' <<<"$log" | grep '^  What is ')
eqs=$(grep -cE -- '-> "[0-9]+ [+-] [0-9]+ = [0-9]+\."$' <<<"$after" || true)
[ "$eqs" -ge 1 ] || fail "no answer after fine-tuning is an equation"
for f in config.json adapter/adapter_config.json adapter/adapter_model.safetensors; do
  [ -s "$out/$f" ] || fail "$out/$f is missing"
done
echo "check_finetune_lm: ok (loss $first -> $loss; $eqs of 3 answers are equations)"
