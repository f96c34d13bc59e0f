#!/usr/bin/env bash
# The small-memory example end to end (examples/c/qlora_budget.c --quick): under a device
# budget between the two plans' estimates, plain LoRA fails with the simulated CUDA
# out-of-memory error, and LoRA on an NF4 base with the optimizer offloaded trains under the
# same budget (its loss falls), its measured device peak within the budget and within 10% of
# accel_estimate_memory's, host memory used and bytes moved, and the PEFT adapter written.
#   check_qlora_budget.sh QLORA_BUDGET OUT_DIR
set -euo pipefail
exe=$1 out=$2
rm -rf "$out"
log=$("$exe" --quick --out "$out")
printf '%s\n' "$log"
fail() { echo "check_qlora_budget: $*"; exit 1; }
grep -q 'LoRA on the float32 base:' <<<"$log" || fail "no plain run"
sed -n '/^LoRA on the float32 base:/,/^$/p' <<<"$log" | grep -q 'CUDA out of memory\. Tried to allocate .*(simulated: rank 0' ||
  fail "the plain run did not fail with the simulated CUDA out-of-memory error"
line=$(grep '^Trained under' <<<"$log") || fail "the QLoRA run did not train"
python3 - "$line" <<'PY'
import re, sys
line = sys.argv[1]
m = re.search(r"Trained under ([0-9.]+)MiB: loss ([0-9.]+) -> ([0-9.]+) .*device peak ([0-9.]+) MiB \(estimated ([0-9.]+)\), "
              r"host peak ([0-9.]+) MiB \(estimated ([0-9.]+)\); ([0-9.]+) MiB moved", line)
assert m, line
budget, first, last, peak, est, host, host_est, moved = map(float, m.groups())
assert last < first, f"the loss did not fall: {first} -> {last}"
assert peak <= budget, f"peak {peak} MiB over the budget {budget} MiB"
assert abs(est - peak) / peak < 0.10, f"the estimate {est} MiB is not within 10% of the peak {peak} MiB"
assert host > 0 and abs(host_est - host) / host < 0.10, (host, host_est)
assert moved > 0, line
print(f"check_qlora_budget: budget {budget} MiB, peak {peak} (estimated {est}), host {host} MiB, loss {first} -> {last}")
PY
for f in adapter/adapter_config.json adapter/adapter_model.safetensors; do
  [ -s "$out/$f" ] || fail "$out/$f is missing"
done
echo "check_qlora_budget: ok"
