#!/usr/bin/env bash
# Runs one language binding's digits example against this build's libaccel.
#   check_bindings.sh LANG SOURCE_ROOT BUILD_DIR example
# LANG: python (with the interpreter in $ACCEL_TEST_PYTHON: scripts/test makes a venv with
# cffi and numpy), rust (Debian's rustc 1.63 or newer), go (Debian's golang-go 1.19 or newer).
# The example trains the digits MLP on 2 simulated ranks and must reach an accuracy of 0.95
# (tests/scripts/check_accuracy.sh). Rust's and Go's build outputs go under BUILD_DIR/bindings/.
# The bindings' tests are their READMEs, run as written (tests/scripts/check_readme.py).
set -euo pipefail
lang=$1 src=$(cd "$2" && pwd) build=$(cd "$3" && pwd)
[ "${4:-example}" = example ] || { echo "check_bindings: only 'example' (the tests are the READMEs: tests/scripts/check_readme.py)" >&2; exit 2; }
data="$src/examples/data/digits.csv.gz"
export ACCEL_LIBRARY="$build/libaccel.so" ACCEL_LIB_DIR="$build"
export ACCEL_LAYOUT_PROBE="$build/tests/abi/abi_layout_probe"
export ACCEL_SIM_NCCL_LIBRARY="$build/libaccel-nccl-sim.so"
export ACCEL_TEST_TORCHSCRIPT="$build/tests/digits_model.pt"  # a TorchScript MLP the build makes
accuracy() { "$src/tests/scripts/check_accuracy.sh" 0.95 "$@"; }
need() {
  command -v "$1" >/dev/null || { echo "check_bindings: '$1' is not installed (scripts/setup installs $2)" >&2; exit 1; }
}
case "$lang" in
  python)
    py=${ACCEL_TEST_PYTHON:-}
    if [ -z "$py" ] || ! "$py" -c 'import cffi, numpy, pytest' 2>/dev/null; then
      echo "check_bindings: no Python with cffi, numpy and pytest (scripts/test makes one in build-pytools/; set ACCEL_TEST_PYTHON): skipped" >&2
      exit 77
    fi
    export PYTHONPATH="$src/bindings/python/src" PYTHONDONTWRITEBYTECODE=1
    cd "$src/bindings/python"
    accuracy "$py" examples/train_digits.py --data "$data" ;;
  rust)
    need cargo "cargo and rustc"
    export CARGO_TARGET_DIR="$build/bindings/rust" CARGO_BUILD_JOBS=${CARGO_BUILD_JOBS:-2}
    cd "$src/bindings/rust"
    rustc --version
    cargo build --offline --locked --example train_digits
    accuracy "$CARGO_TARGET_DIR/debug/examples/train_digits" --data "$data" ;;
  go)
    need go golang-go
    # the binding finds libaccel with pkg-config (#cgo pkg-config: accel): the build's
    # accel-uninstalled.pc; the rpath lets the example find it at run time
    export PKG_CONFIG_PATH="$build/meson-uninstalled${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}"
    export CGO_LDFLAGS="-Wl,-rpath,$build"
    export GOPROXY=off GOFLAGS=-mod=mod GOCACHE="$build/bindings/go-cache" GOPATH="$build/bindings/gopath"
    cd "$src/bindings/go"
    go version
    go build -o "$build/bindings/go-train_digits" ./examples/train_digits
    accuracy "$build/bindings/go-train_digits" --data "$data" ;;
  *) echo "check_bindings: unknown language '$lang' (python, rust, go)" >&2; exit 2 ;;
esac
