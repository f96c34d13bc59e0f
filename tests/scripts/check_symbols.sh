#!/usr/bin/env bash
# The exported symbols of libaccel.so must be exactly the functions declared ACCEL_API in
# the public header and listed in tests/scripts/exported_symbols.txt: a new export, a missing one,
# or a leaked C++ symbol fails. Usage: check_symbols.sh LIB HEADER LIST
set -euo pipefail
lib=$1 header=$2 list=$3
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
nm -D --defined-only "$lib" | awk '$2 ~ /^[TDBRVWiu]$/ {print $3}' | sed 's/@.*//' | sort -u > "$tmp/exported"
tr '\n' ' ' < "$header" | grep -o 'ACCEL_API[^;{]*(' | sed -E 's/.*[ *]([a-z_0-9]+)[ ]*\($/\1/' | sort -u > "$tmp/declared"
grep -v '^#' "$list" | sed '/^$/d' | sort -u > "$tmp/expected"
status=0
if ! diff -u "$tmp/expected" "$tmp/exported" > "$tmp/d1"; then
  echo "exported symbols differ from $list (- expected, + exported):"; cat "$tmp/d1"; status=1
fi
if ! diff -u "$tmp/expected" "$tmp/declared" > "$tmp/d2"; then
  echo "ACCEL_API declarations in the header differ from $list (- expected, + declared):"; cat "$tmp/d2"; status=1
fi
[ $status -eq 0 ] && echo "$(wc -l < "$tmp/exported") symbols exported, all declared and expected"
exit $status
