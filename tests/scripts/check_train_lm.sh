#!/usr/bin/env bash
# The language-model example end to end (examples/c/train_lm.c --quick): a tiny Llama trained
# from scratch on 4 simulated GPUs under ZeRO-3 + precision auto (bf16 where the CPU has it,
# else fp32) + checkpointing beats the unigram
# baseline's validation perplexity clearly (below 0.75 of it), LoRA on Proverbs lowers its
# perplexity, both phases generate greedy and top-k text from their prompts, the directories
# are written, and the measured per-GPU peak is within 20% of accel_estimate_memory.
#   check_train_lm.sh TRAIN_LM OUT_DIR
set -euo pipefail
exe=$1 out=$2
rm -rf "$out"
log=$("$exe" --quick --out "$out")
printf '%s\n' "$log"
fail() { echo "check_train_lm: $*"; exit 1; }
last=$(grep -E '^epoch 2: training loss' <<<"$log" | head -n 1) || fail "no epoch 2 line"
ppl=$(sed -n 's/.*validation perplexity \([0-9.]*\) (unigram baseline \([0-9.]*\)).*/\1/p' <<<"$last")
uni=$(sed -n 's/.*validation perplexity \([0-9.]*\) (unigram baseline \([0-9.]*\)).*/\2/p' <<<"$last")
awk -v p="$ppl" -v u="$uni" 'BEGIN { exit !(p < 0.75 * u) }' || fail "perplexity $ppl is not clearly below the unigram baseline's $uni"
before=$(sed -n 's/^LoRA on Proverbs: before fine-tuning, validation perplexity \([0-9.]*\).*/\1/p' <<<"$log")
after=$(grep -A100 '^LoRA on Proverbs' <<<"$log" | sed -n 's/^epoch 1: .*validation perplexity \([0-9.]*\).*/\1/p' | head -n 1)
[ -n "$before" ] && [ -n "$after" ] || fail "no LoRA perplexities"
awk -v a="$after" -v b="$before" 'BEGIN { exit !(a < b) }' || fail "LoRA did not lower Proverbs' perplexity ($before -> $after)"
[ "$(grep -c '^  greedy (KV cache): "And God said' <<<"$log")" = 1 ] || fail "no greedy sample after pretraining"
[ "$(grep -c '^  top-k 10, temperature 0.8 (KV cache): "My son, ' <<<"$log")" = 1 ] || fail "no top-k sample after LoRA"
for f in base/config.json base/model.safetensors lora/adapter_config.json lora/adapter_model.safetensors; do
  [ -s "$out/$f" ] || fail "$out/$f is missing"
done
while read -r measured estimated; do
  awk -v m="$measured" -v e="$estimated" 'BEGIN { r = e / m; exit !(r > 0.8 && r < 1.2) }' ||
    fail "the measured peak $measured MiB and the estimate $estimated MiB differ by more than 20%"
done < <(sed -n 's/.*peak \([0-9.]*\) MiB (accel_estimate_memory: \([0-9.]*\) MiB).*/\1 \2/p' <<<"$log")
echo "check_train_lm: ok (perplexity $ppl against the unigram's $uni; LoRA $before -> $after)"
