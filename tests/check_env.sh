#!/usr/bin/env bash
# `accel env` prints what a bug report needs, and names the BLAS the process loaded.
#   check_env.sh ACCEL_TOOL
set -euo pipefail
out=$("$1" env)
echo "$out"
for want in "- accel version: " "- libtorch version: " "- BLAS: " "- BLAS library: /" "- threads: libtorch intra-op " \
            "- devices: CPU" "- communication backends: " "- CUDA toolkit with NCCL at build time: "; do
  grep -qF -- "$want" <<<"$out" || { echo "check_env: no line starting '$want'"; exit 1; }
done
# the BLAS line names a known implementation, not "unknown"
grep -qE -- "^- BLAS: (OpenBLAS|BLIS|MKL|netlib)" <<<"$out" || { echo "check_env: the BLAS is not identified"; exit 1; }
