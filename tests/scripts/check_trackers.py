"""Reads back what tests/capi/tracker_probe.c wrote, with TensorBoard's own event reader (its
EventAccumulator), csv and json: the same steps and values in all three (TensorBoard's as
float32). Usage: check_trackers.py PROBE. Exit 77 (skipped) without the tensorboard package."""
import csv, glob, json, math, os, subprocess, sys, tempfile

try:
    from tensorboard.backend.event_processing import event_accumulator
except ImportError:
    print("check_trackers: no tensorboard package in this Python (scripts/pytools installs it): skipped")
    sys.exit(77)

import struct


def expected():
    rows = []
    for step in range(10):
        rows.append((step, "loss", 1.0 / (step + 1)))
        rows.append((step, "lr", 0.001 * step))
        if step % 2:
            rows.append((step, "accuracy", math.nan if step == 5 else 0.5 + 0.05 * step))
    rows.append((9, 'name, with "quotes"', -2.5))
    return rows


def same(a, b, tol=0.0):
    if math.isnan(b):
        return a is None or (isinstance(a, float) and math.isnan(a))
    return a is not None and abs(a - b) <= tol * max(1.0, abs(b))


def main():
    probe = sys.argv[1]
    failures = []
    with tempfile.TemporaryDirectory() as d:
        subprocess.run([probe, d], check=True)
        want = expected()
        # JSON lines: a line per call, the values exact (NaN as null)
        lines = [json.loads(l) for l in open(os.path.join(d, "metrics.jsonl"))]
        got = [(l["step"], k, v) for l in lines for k, v in l["values"].items()]
        if len(got) != len(want):
            failures.append(f"jsonl: {len(got)} scalars, expected {len(want)}")
        for (s, n, v), (ws, wn, wv) in zip(got, want):
            if (s, n) != (ws, wn) or not same(v, wv):
                failures.append(f"jsonl: {s} {n} {v}, expected {ws} {wn} {wv}")
        # CSV: a row per scalar, exact (%.17g)
        with open(os.path.join(d, "metrics.csv"), newline="") as f:
            rows = list(csv.DictReader(f))
        got = [(int(r["step"]), r["name"], float(r["value"])) for r in rows]
        for (s, n, v), (ws, wn, wv) in zip(got, want):
            if (s, n) != (ws, wn) or not same(v, wv):
                failures.append(f"csv: {s} {n} {v}, expected {ws} {wn} {wv}")
        if len(got) != len(want):
            failures.append(f"csv: {len(got)} rows, expected {len(want)}")
        # TensorBoard: its reader checks every record's masked CRC-32C and parses the protos
        files = glob.glob(os.path.join(d, "events.out.tfevents.*"))
        if len(files) != 1:
            failures.append(f"tensorboard: {len(files)} event files")
        acc = event_accumulator.EventAccumulator(d, size_guidance={event_accumulator.SCALARS: 0})
        acc.Reload()
        tags = sorted(acc.Tags()["scalars"])
        if tags != sorted({n for _, n, _ in want}):
            failures.append(f"tensorboard: tags {tags}")
        for tag in tags:
            events = [(e.step, e.value) for e in acc.Scalars(tag)]
            exp = [(s, v) for s, n, v in want if n == tag]
            if len(events) != len(exp):
                failures.append(f"tensorboard: {tag}: {len(events)} points, expected {len(exp)}")
            for (s, v), (ws, wv) in zip(events, exp):
                f32 = struct.unpack("f", struct.pack("f", wv))[0]
                if s != ws or not same(v, f32):
                    failures.append(f"tensorboard: {tag} step {s} = {v}, expected {ws} {f32}")
        # a damaged record: TensorBoard's reader stops at it (the CRC is checked)
        data = open(files[0], "rb").read()
        bad = bytearray(data)
        bad[-5] ^= 0x01  # inside the last record's data
        with open(files[0], "wb") as f:
            f.write(bad)
        acc2 = event_accumulator.EventAccumulator(d, size_guidance={event_accumulator.SCALARS: 0})
        acc2.Reload()
        n2 = sum(len(acc2.Scalars(t)) for t in acc2.Tags()["scalars"])
        if n2 >= len(want):
            failures.append(f"tensorboard: a damaged last record still read ({n2} points): the CRC is not checked")
        points = sum(len(acc.Scalars(t)) for t in tags)
    for f in failures:
        print("FAIL", f)
    if failures:
        return 1
    print(f"check_trackers: {len(want)} scalars agree in metrics.jsonl, metrics.csv and the event file "
          f"(read by tensorboard's EventAccumulator: {points} points, {len(tags)} tags); a damaged record is refused")
    return 0


if __name__ == "__main__":
    sys.exit(main())
