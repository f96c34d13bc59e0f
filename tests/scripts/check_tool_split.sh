#!/usr/bin/env bash
# The `accel` executable is torch-free (launch, --version, --help start in milliseconds);
# the commands that need the runtime come from libaccel-tools.so, loaded when one runs, and
# a missing module is named, not a crash.
#   check_tool_split.sh ACCEL_TOOL
set -euo pipefail
tool=$1
fail() { echo "check_tool_split: FAIL: $*"; exit 1; }
needed=$(readelf -d "$tool" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p')
! grep -qE '^lib(torch|c10|accel)' <<<"$needed" || fail "accel links $(grep -E '^lib(torch|c10|accel)' <<<"$needed" | tr '\n' ' ')"
echo "1. accel needs only: $(tr '\n' ' ' <<<"$needed")"
# launch and --version do not load libtorch (LD_DEBUG lists every object the loader opens)
for args in "--version" "launch -n 1 /bin/true"; do
  loaded=$(LD_DEBUG=files "$tool" $args 2>&1 >/dev/null | grep -c 'calling init: .*lib\(torch\|c10\)' || true)
  [ "$loaded" = 0 ] || fail "accel $args loaded libtorch"
done
echo "2. accel --version and accel launch load no libtorch"
# a command of the module runs through it
"$tool" sim topologies | grep -q '^8xH100 ' || fail "accel sim topologies printed no 8xH100"
echo "3. accel sim topologies runs from libaccel-tools.so"
# found through PATH by its bare name, from another directory, it still finds the module
# beside itself (the loader knows it as "accel"; the kernel knows its file)
tool_abs=$(cd "$(dirname "$tool")" && pwd)/$(basename "$tool")
(cd / && PATH="$(dirname "$tool_abs"):$PATH" "$(basename "$tool_abs")" sim topologies) | grep -q '^8xH100 ' ||
  fail "accel run through PATH from / did not find its module"
echo "3b. accel found through PATH from / runs a command of the module"
# without the module beside it (and none installed where this build would put it), the
# command that needs it is named with the paths looked at; launch still works
d=$(mktemp -d)
trap 'rm -rf "$d"' EXIT
cp "$tool" "$d/accel"
{
  set +e
  out=$("$d/accel" estimate-memory gpt2 2>&1)
  rc=$?
  set -e
  if [ $rc -ne 0 ]; then
    grep -q "'estimate-memory' needs libaccel-tools.so, which could not be loaded: not found (looked for $d/libaccel-tools.so" <<<"$out" ||
      fail "without the module: $out"
    [ $rc = 1 ] || fail "without the module: exit $rc"
    echo "4. without the module: $out"
  else
    echo "4. skipped: an installed libaccel-tools.so answered"
  fi
}
"$d/accel" launch -n 2 /bin/true >/dev/null 2>&1 || fail "launch without the module failed"
echo "5. accel launch runs without the module"
