#!/usr/bin/env bash
# `meson install` into a staging directory, then a C program builds against the installed
# header and library through pkg-config alone, and runs. Usage: check_install.sh BUILD_DIR SOURCE.c
set -euo pipefail
build=$1 src=$2
stage=$(mktemp -d); trap 'rm -rf "$stage"' EXIT
DESTDIR="$stage" meson install -C "$build" --quiet --no-rebuild
pc=$(find "$stage" -name accel.pc | head -n 1)
[ -n "$pc" ] || { echo "FAIL: accel.pc was not installed"; exit 1; }
for f in include/accel/accel.h; do
  find "$stage" -path "*/$f" | grep -q . || { echo "FAIL: $f was not installed"; exit 1; }
done
# beside libaccel-tools.so, where an installed `accel launch --warm-start` looks for it
find "$stage" -path "*/accel/libaccel-warm-start.so" | grep -q . || { echo "FAIL: libaccel-warm-start.so was not installed in libdir/accel"; exit 1; }
libdir=$(dirname "$(find "$stage" -name 'libaccel.so.0' | head -n 1)")
[ -L "$libdir/libaccel.so" ] || { echo "FAIL: libaccel.so development link missing"; exit 1; }
export PKG_CONFIG_PATH=$(dirname "$pc") PKG_CONFIG_SYSROOT_DIR="$stage"
cc -std=c99 -Wall -Wextra -Werror -o "$stage/prog" "$src" $(pkg-config --cflags --libs accel)
LD_LIBRARY_PATH="$libdir" "$stage/prog"
echo "installed accel $(pkg-config --modversion accel): header, library and accel.pc work"
