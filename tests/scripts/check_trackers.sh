#!/usr/bin/env bash
# Runs tests/scripts/check_trackers.py with the test Python ($ACCEL_TEST_PYTHON, scripts/pytools).
# Usage: check_trackers.sh PROBE. Exit 77 (skipped) without a Python that has tensorboard.
py=${ACCEL_TEST_PYTHON:-python3}
exec "$py" "$(dirname "$0")/check_trackers.py" "$@"
