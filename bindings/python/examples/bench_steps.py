"""Per-step overhead of the binding, the same loop as every language's bench_steps:
one step = next batch -> forward -> cross-entropy -> backward -> step -> release the 4 tensors.

    python bench_steps.py [--data PATH] [--warmup 200] [--steps 2000]
prints one line: {"lang":"python","steps":2000,"us_per_step":123.4}
"""

import argparse
import json
import time

import accel
import _digits

parser = argparse.ArgumentParser()
parser.add_argument("--data", default=_digits.DEFAULT)
parser.add_argument("--warmup", type=int, default=200)
parser.add_argument("--steps", type=int, default=2000)
args = parser.parse_args()

x, y = _digits.load(args.data)  # all 1,797 samples, no split
with accel.Accelerator(num_threads=1, seed=42) as acc:
    model = accel.Model.mlp(acc, [64, 128, 64, 10])
    opt = accel.AdamW(model, lr=3e-3)
    loader = accel.DataLoader(acc, x, y, batch_size=32, shuffle=True, seed=42)
    model, opt, loader = acc.prepare(model, opt, loader)

    def steps(n):
        done = 0
        while done < n:
            for inputs, targets in loader:  # one epoch; the next pass is the next epoch
                logits = model(inputs)
                loss = accel.cross_entropy(logits, targets)
                acc.backward(loss)
                opt.step()
                inputs.close()
                targets.close()
                logits.close()
                loss.close()
                done += 1
                if done == n:
                    break

    steps(args.warmup)
    t0 = time.perf_counter()
    steps(args.steps)
    elapsed = time.perf_counter() - t0
print(json.dumps({"lang": "python", "steps": args.steps, "us_per_step": round(elapsed / args.steps * 1e6, 1)},
                 separators=(",", ":")))
