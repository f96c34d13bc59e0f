"""Trains accel's MLP [64, 128, 64, 10] on the digits on 2 simulated GPUs with DDP, the four
Accelerate-like steps, and prints `accuracy: 0.9xxx` last.

    ACCEL_LIBRARY=/path/to/libaccel.so python train_digits.py [--data PATH] [--epochs N]
"""

import argparse
import sys

import numpy as np

import accel
import _digits

parser = argparse.ArgumentParser()
parser.add_argument("--data", default=_digits.DEFAULT)
parser.add_argument("--epochs", type=int, default=20)
args = parser.parse_args()

(train_x, train_y), (test_x, test_y) = _digits.split(*_digits.load(args.data))
print(f"digits: {len(train_x)} training samples, {len(test_x)} held out", flush=True)


def evaluate(model):
    model.eval()
    logits = model(test_x).numpy()  # bf16 logits would be read as float32
    model.train()
    return float((logits.argmax(axis=1) == test_y).mean())


def train(acc):
    model = accel.Model.mlp(acc, [64, 128, 64, 10])
    opt = accel.AdamW(model, lr=3e-3 * acc.num_processes)  # scaled with the ranks, as the C example does
    loader = accel.DataLoader(acc, train_x, train_y, batch_size=32, shuffle=True, seed=42)
    loader = acc.prepare(loader)  # shards the batches: len(loader) is this rank's share
    total = args.epochs * len(loader)
    sched = accel.get_cosine_schedule_with_warmup(opt, num_warmup_steps=total // 20, num_training_steps=total)
    model, opt, sched = acc.prepare(model, opt, sched)
    accuracy = 0.0
    for epoch in range(args.epochs):
        losses = []
        for x, y in loader:
            loss = accel.cross_entropy(model(x), y)
            losses.append(loss.item())
            acc.backward(loss)
            opt.step()
        mean = acc.reduce(np.array([np.mean(losses)]), "mean").item()
        accuracy = evaluate(model)
        acc.print(f"epoch {epoch + 1:2d}/{args.epochs}  loss {mean:.4f}  lr {opt.lr:.2e}  "
                  f"steps {sched.steps}  test-accuracy {accuracy:.4f}")
    return accuracy


report = accel.sim.run(train, world_size=2, strategy="ddp", seed=42)
for rank in report.ranks:
    print(f"rank {rank.rank} peak device memory {rank.peak_bytes / 1024:.1f} KiB")
print(f"predicted on 8xH100: {report.predicted_seconds * 1e3:.3f} ms for the run")
accuracy = report.results[0]
report.close()
print(f"accuracy: {accuracy:.4f}")
sys.exit(0 if accuracy >= 0.95 else 1)
