#!/usr/bin/env bash
# CUDA's runtime and NCCL are loaded at run time, never linked (docs/gpu.md, "One build, with
# or without CUDA"):
#   1. no program or library of the build lists libcudart, libnccl or any other CUDA library
#      as NEEDED (readelf -d), whether or not the toolkit was found at configure time;
#   2. where the machine has them, `accel env` loads them (names the files and NCCL's version);
#   3. with them hidden from the loader (each file covered by /dev/null in a private mount
#      namespace, where this user may make one), `accel env` says they are not found and the
#      digits example still trains; elsewhere, LD_DEBUG shows the example never opens them.
#   check_no_cuda.sh BUILD_DIR ACCEL_TOOL TRAIN_DIGITS
set -euo pipefail
build=$1 tool=$2 exe=$3
fail() { echo "check_no_cuda: FAIL: $*"; exit 1; }
n=0
while IFS= read -r -d '' f; do
  head -c 4 "$f" | grep -q ELF || continue
  needed=$(readelf -d "$f" 2>/dev/null | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p')
  bad=$(grep -E '^lib(cuda|cudart|nccl|cublas|cufft|curand|cusolver|cusparse|nvrtc|nvToolsExt)' <<<"$needed" || true)
  [ -z "$bad" ] || fail "$f links $(tr '\n' ' ' <<<"$bad")"
  n=$((n + 1))
done < <(find "$build" -maxdepth 3 -type f \( -name '*.so' -o -name '*.so.*' -o -perm -u+x \) \
           -not -path '*/meson-*' -not -path '*.p/*' -print0)
[ "$n" -gt 5 ] || fail "only $n ELF files found under $build"
echo "1. $n programs and libraries under $build: none links a CUDA or NCCL library"

libs=$(ldconfig -p 2>/dev/null | sed -n 's/^[[:space:]]*\(libcudart\|libnccl\)\.so[^ ]* .*=> //p' | sort -u)
if [ -n "$libs" ]; then
  out=$(env -u ACCEL_NCCL_LIBRARY -u ACCEL_CUDART_LIBRARY "$tool" env)
  line=$(grep -F -- "- NCCL and CUDA runtime" <<<"$out") || fail "accel env has no NCCL line"
  grep -q "(NCCL [0-9]" <<<"$line" || fail "this machine has $(tr '\n' ' ' <<<"$libs")but accel env says: $line"
  echo "2. $line"
else
  echo "2. this machine has no libcudart or libnccl: nothing to load"
fi

# 3. hidden
if [ -n "$libs" ] && [ "$(id -u)" = 0 ] && unshare -m true 2>/dev/null; then
  targets=$(for l in $libs; do readlink -f "$l"; done | sort -u | tr '\n' ' ')
  out=$(unshare -m bash -c 'for t in '"$targets"'; do mount --bind /dev/null "$t"; done
                            "$0" env && "$1" --ranks 2 --epochs 2' "$tool" "$exe") || fail "with $targets hidden: $out"
  grep -q -- "- NCCL and CUDA runtime (ACCEL_BACKEND=nccl, loaded at run time): not found" <<<"$out" ||
    fail "with them hidden, accel env still found them: $(grep -F -- '- NCCL' <<<"$out")"
  grep -q '^accuracy: ' <<<"$out" || fail "the example did not finish with them hidden: $out"
  echo "3. with $targets hidden (a private mount namespace): accel env says not found, and the example trains: $(grep '^accuracy: ' <<<"$out")"
else
  trace=$(mktemp)
  trap 'rm -f "$trace"' EXIT
  LD_DEBUG=files LD_DEBUG_OUTPUT="$trace" "$exe" --ranks 2 --epochs 2 > /dev/null
  if cat "$trace".* 2>/dev/null | grep -E 'file=[^ ]*(libcudart|libnccl)' | grep -q .; then
    fail "the example opened a CUDA or NCCL library: $(cat "$trace".* | grep -E 'file=[^ ]*(libcudart|libnccl)' | head -3)"
  fi
  rm -f "$trace".*
  echo "3. (no mount namespace here) LD_DEBUG: the example trains without opening libcudart or libnccl"
fi
