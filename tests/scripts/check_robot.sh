#!/usr/bin/env bash
# The real-time example end to end: examples/robot's cart-pole runs its 500 Hz loop with the
# trainer off, then on, and its dynamics network must learn online: the prediction error of
# the last second at most MAX_FRACTION of the first weights' error. The latency figures are
# printed, not judged (a shared CI machine's scheduling is not the library's).
#   check_robot.sh MAX_FRACTION CARTPOLE [ARGS...]
set -euo pipefail
max=$1; shift
out=$("$@" --json)
echo "$out"
python3 - "$max" "$out" <<'PYEOF'
import json, math, sys
limit, line = float(sys.argv[1]), sys.argv[2].strip().splitlines()[-1]
r = json.loads(line)
assert r["bench"] == "realtime", r
first, last = r["error_first"], r["error_last"]
print(f"prediction error {first:.4f} -> {last:.4f} (at most {limit:g} x {first:.4f} = {limit * first:.4f}); "
      f"{r['publishes']} publications, weights version {r['weights_version']}, "
      f"p99 tick {r['p99_off_us']:.0f} us off, {r['p99_on_us']:.0f} us on")
ok = math.isfinite(first) and math.isfinite(last) and first > 0 and last <= limit * first
# the loop ran on published weights: version 1 is accel_inference_create's, then one per publication
ok = ok and r["publishes"] > 0 and 1 < r["weights_version"] <= r["publishes"] + 1
sys.exit(0 if ok else 1)
PYEOF
