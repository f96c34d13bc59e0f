#!/usr/bin/env bash
# `accel env` prints what a bug report needs, and names the BLAS the process loaded, the
# CPU's kernel sets and whether bf16 is native (what mixed precision auto picks).
#   check_env.sh ACCEL_TOOL
set -euo pipefail
out=$("$1" env)
echo "$out"
for want in "- accel version: " "- libtorch version: " "- BLAS: " "- BLAS library: /" "- threads: libtorch intra-op " \
            "- CPU: " "- bf16 on this CPU: " "- devices: CPU" "- communication backends: " \
            "- NCCL and CUDA runtime (ACCEL_BACKEND=nccl, loaded at run time): "; do
  grep -qF -- "$want" <<<"$out" || { echo "check_env: no line starting '$want'"; exit 1; }
done
# the BLAS line names a known implementation, not "unknown"
grep -qE -- "^- BLAS: (OpenBLAS|BLIS|MKL|netlib)" <<<"$out" || { echo "check_env: the BLAS is not identified"; exit 1; }
# auto's choice follows the bf16 line, whatever this CPU is
grep -qE -- "^- bf16 on this CPU: (native \(.*\); mixed precision auto trains in bf16|not native \(.*\); mixed precision auto trains in fp32) here$" <<<"$out" ||
  { echo "check_env: the bf16 line and auto's choice disagree"; exit 1; }
# oneDNN held to AVX2 has no bf16 instructions on any CPU: not native, auto trains in fp32
low=$(ONEDNN_MAX_CPU_ISA=AVX2 "$1" env | grep -F -- "- bf16 on this CPU: ")
grep -q "not native .*fp32 here$" <<<"$low" || { echo "check_env: under ONEDNN_MAX_CPU_ISA=AVX2: $low"; exit 1; }
grep -qF "ONEDNN_MAX_CPU_ISA=AVX2" <<<"$(ONEDNN_MAX_CPU_ISA=AVX2 "$1" env)" || { echo "check_env: the kernel-set variables are not shown"; exit 1; }
echo "check_env: ok ($low under ONEDNN_MAX_CPU_ISA=AVX2)"
