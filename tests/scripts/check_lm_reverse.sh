#!/usr/bin/env bash
# The reverse round trip of issue 16 in the suite, when Python with transformers and peft is
# available (the lm venv that scripts/lm_fixtures makes: ${ACCEL_CACHE:-~/.cache/accel}/lm-venv,
# or ACCEL_LM_PYTHON); skipped (77) otherwise. accel trains the fixtures a few steps and saves
# them (LM.TrainedModelExportsForTransformers with ACCEL_LM_EXPORT_DIR), then transformers and
# peft load the directories and reproduce accel's logits within 1e-4 (scripts/lm_reverse_check.py).
#   check_lm_reverse.sh TEST_LM SOURCE_ROOT
set -euo pipefail
test_lm=$1 src=$2
py=${ACCEL_LM_PYTHON:-${ACCEL_CACHE:-$HOME/.cache/accel}/lm-venv/bin/python}
if [[ ! -x "$py" ]] || ! "$py" -c 'import torch, transformers, peft, safetensors' 2>/dev/null; then
  echo "check_lm_reverse: no Python with torch, transformers and peft at $py (scripts/lm_fixtures makes it): skipped"
  exit 77
fi
tmp=$(mktemp -d "${TMPDIR:-/tmp}/accel_lm_reverse.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
ACCEL_LM_EXPORT_DIR=$tmp "$test_lm" --gtest_filter=LM.TrainedModelExportsForTransformers
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_HUB_DISABLE_TELEMETRY=1
export CUDA_VISIBLE_DEVICES="" OMP_NUM_THREADS=1 MKL_NUM_THREADS=1
# the venv's torch must not see this build's libtorch first
env -u LD_LIBRARY_PATH "$py" "$src/scripts/lm_reverse_check.py" "$tmp"
