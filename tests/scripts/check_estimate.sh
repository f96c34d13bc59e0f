#!/usr/bin/env bash
# `accel estimate-memory`: the table names each strategy's components, the JSON lines carry
# the C ABI's numbers (llama-7b's 6,738,415,616 parameters, 4 bytes each in fp32), and bad
# input is a clear error with a non-zero status.
#   check_estimate.sh ACCEL_TOOL
set -euo pipefail
tool=$1
table=$("$tool" estimate-memory llama-7b -n 8 --mixed-precision bf16 --seq 2048 --gradient-checkpointing)
echo "$table"
for want in "llama-7b: 6738 M parameters" "strategy" "weights" "activations" "total/GPU" "ddp " "zero1 " "zero2 " \
            "zero3 " "accelerate estimate-memory"; do
  grep -qF -- "$want" <<<"$table" || { echo "check_estimate: no '$want' in the table"; exit 1; }
done
json=$("$tool" estimate-memory llama-7b --json)
echo "$json"
python3 - "$json" <<'PY'
import json, sys
rows = [json.loads(l) for l in sys.argv[1].splitlines()]
assert len(rows) == 1, rows
r = rows[0]
assert r["parameters"] == 6738415616, r
b = r["bytes_per_gpu"]
assert b["weights"] == 4 * 6738415616 and b["gradients"] == 4 * 6738415616 and b["optimizer"] == 8 * 6738415616, b
assert b["total"] >= b["weights"] + b["gradients"] + b["optimizer"] + b["activations"], b
PY
# the published models' shapes give their published parameter counts (the counts transformers'
# own classes have for these configs: scripts/lm_fixtures' venv, AutoModelForCausalLM.from_config
# on the meta device; the model cards' figures)
for pair in llama-3.2-1b:1235814400 llama-3.2-3b:3212749824 llama-3.1-8b:8030261248 qwen2.5-0.5b:494032768 \
            qwen2.5-1.5b:1543714304 qwen2.5-7b:7615616512 qwen3-0.6b:596049920 mistral-7b:7241732096 \
            phi-3-mini:3821079552 gemma-2-2b:2614341888 gemma-3-1b:999885952 smollm2-135m:134515008 \
            smollm2-1.7b:1711376384 smollm3-3b:3075098624; do
  name=${pair%%:*} want=${pair##*:}
  got=$("$tool" estimate-memory "$name" --json | python3 -c 'import json,sys; print(json.loads(sys.stdin.readline())["parameters"])')
  [ "$got" = "$want" ] || { echo "check_estimate: $name has $got parameters, published $want"; exit 1; }
  echo "$name: $got parameters (published $want)"
done
# Phi-3 has no PEFT default for LoRA: named targets are needed
if err=$("$tool" estimate-memory phi-3-mini --lora-rank 8 2>&1); then echo "check_estimate: phi-3 LoRA without targets: $err"; exit 1; fi
grep -q "no default target modules" <<<"$err" || { echo "check_estimate: $err"; exit 1; }
"$tool" estimate-memory phi-3-mini --lora-rank 8 --lora-targets qkv_proj,o_proj --json >/dev/null
# ZeRO-3 on 64 GPUs needs less per GPU than DDP
lines=$("$tool" estimate-memory llama-7b -n 64 --mixed-precision bf16 --strategy ddp,zero3 --json)
python3 - "$lines" <<'PY'
import json, sys
ddp, z3 = [json.loads(l) for l in sys.argv[1].splitlines()]
assert z3["bytes_per_gpu"]["total"] < ddp["bytes_per_gpu"]["total"] / 4, (ddp, z3)
PY
for bad in "nope-7b" "llama-7b --optimizer adam" "llama-7b -n 4 --strategy no" "llama-7b --strategy zero2 -n 2 --optimizer lamb"; do
  # shellcheck disable=SC2086
  if err=$("$tool" estimate-memory $bad 2>&1); then
    echo "check_estimate: '$bad' succeeded: $err"; exit 1
  fi
  echo "refused '$bad': $err"
done
echo "check_estimate: ok"
