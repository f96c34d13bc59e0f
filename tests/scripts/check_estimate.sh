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
# offload: the optimizer's state moves to the host (the device total falls by it, host holds it)
lines=$("$tool" estimate-memory llama-7b --mixed-precision bf16 --json; "$tool" estimate-memory llama-7b --mixed-precision bf16 --offload optimizer --json)
python3 - "$lines" <<'PY'
import json, sys
plain, off = [json.loads(l)["bytes_per_gpu"] for l in sys.argv[1].splitlines()]
assert plain["host"] == 0 and plain["transfer_per_step"] == 0, plain
assert off["optimizer"] == 0 and off["host"] >= plain["optimizer"], (plain, off)
assert off["total"] < plain["total"] - plain["optimizer"] * 0.9, (plain, off)
assert off["transfer_per_step"] == 12 * 6738415616, off  # fp32: the gradient and the weight there, the weight back
assert off["gradient_transfer_per_step"] == 4 * 6738415616, off  # of which the gradients, beside the backward
PY
# an NF4 base (double quant) holds about 0.51 bytes a block weight
lines=$("$tool" estimate-memory llama-7b --lora-rank 8 --json; "$tool" estimate-memory llama-7b --lora-rank 8 --quantization nf4 --double-quant --json)
python3 - "$lines" <<'PY'
import json, sys
fp32, nf4 = [json.loads(l) for l in sys.argv[1].splitlines()]
saved = fp32["bytes_per_gpu"]["weights"] - nf4["bytes_per_gpu"]["weights"]
block = 32 * (4 * 4096 * 4096 + 3 * 4096 * 11008)  # the blocks' linear weights
assert abs(saved / block - (4 - 0.5 - 1 / 64 - 4 / 16384)) < 1e-3, saved / block
PY
# --budget: the plans that fit, best first; each within the budget, the order as --sort says
plans=$("$tool" estimate-memory llama-3.1-8b --budget 16GB --mixed-precision bf16 --topology 8xPCIe)
echo "$plans"
for want in "plans fit" "LoRA r16 on an NF4 base (double quant) + checkpointing" "Best: llama-3.1-8b on 1 GPU"; do
  grep -qF -- "$want" <<<"$plans" || { echo "check_estimate: no '$want' in the plans"; exit 1; }
done
json=$("$tool" estimate-memory llama-3.1-8b --budget 16GB --mixed-precision bf16 --plans 100 --json)
python3 - "$json" <<'PY'
import json, sys
rows = [json.loads(l) for l in sys.argv[1].splitlines()]
assert rows and all(r["device_bytes"] <= 16e9 for r in rows), rows
assert [r["plan"] for r in rows] == list(range(1, len(rows) + 1)), rows
order = {"none": 1, "int8": 2, "nf4": 3, "fp4": 3}
keys = [(0 if r["training"] == "full" else order[r["quantization"]], r["step_seconds"]) for r in rows]
assert keys == sorted(keys), keys
assert not any(r["training"] == "full" for r in rows), "8B fully fine-tuned does not fit 16 GB"
PY
json=$("$tool" estimate-memory llama-3.1-8b --budget 80GB --host-budget 200GB -n 8 --mixed-precision bf16 --sort memory --plans 100 --json)
python3 - "$json" <<'PY'
import json, sys
rows = [json.loads(l) for l in sys.argv[1].splitlines()]
assert all(r["device_bytes"] <= 80e9 and r["host_bytes"] <= 200e9 for r in rows), rows
assert [r["device_bytes"] for r in rows] == sorted(r["device_bytes"] for r in rows), rows
full = [r for r in rows if r["training"] == "full"]
assert full and {r["strategy"] for r in full} <= {"ddp", "zero1", "zero2", "zero3"}, rows
PY
# nothing fits: the smallest plan named, status 1
if err=$("$tool" estimate-memory llama-70b --budget 8GB 2>&1 >/dev/null); then echo "check_estimate: 70B in 8 GB fitted"; exit 1; fi
grep -q "no plan fits in 7.45 GiB per GPU; the smallest, LoRA r16 on an NF4 base" <<<"$err" || { echo "check_estimate: $err"; exit 1; }
for bad in "nope-7b" "llama-7b --optimizer adam" "llama-7b --quantization nf4" "llama-7b --lora-rank 4 --double-quant --quantization int8" \
           "llama-7b --offload all" "llama-7b --host-budget 1GB" "llama-7b --budget lots" "llama-7b --budget 1GB --sort best" \
           "llama-7b --budget 1GB --topology 9xH100" "llama-7b --offload optimizer --optimizer lamb" "llama-7b -n 4 --strategy no" "llama-7b --strategy zero2 -n 2 --optimizer lamb"; do
  # shellcheck disable=SC2086
  if err=$("$tool" estimate-memory $bad 2>&1); then
    echo "check_estimate: '$bad' succeeded: $err"; exit 1
  fi
  echo "refused '$bad': $err"
done
echo "check_estimate: ok"
