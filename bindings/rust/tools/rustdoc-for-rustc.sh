#!/bin/sh
# Runs the rustdoc beside $RUSTC when RUSTC names a path (and that rustdoc exists),
# else the rustdoc on PATH. See .cargo/config.toml.
case "$RUSTC" in
*/*)
    d=$(dirname "$RUSTC")
    if [ -x "$d/rustdoc" ]; then exec "$d/rustdoc" "$@"; fi
    ;;
esac
exec rustdoc "$@"
