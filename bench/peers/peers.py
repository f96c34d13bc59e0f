#!/usr/bin/env python3
"""accel's peers in bench_step_overhead: the same training step in PyTorch 2.x eager and in
Accelerate 1.x, written as their users write it.

Both peers train the model bench_step_overhead trains (an MLP of Linear layers with ReLU
between them), with AdamW (lr 3e-3, betas 0.9/0.999, eps 1e-8, weight decay 0.01, PyTorch's
default implementation for CPU tensors), fp32, no gradient accumulation, the gradients set
to None after each step (PyTorch 2's default for zero_grad), the same number of intra-op
threads, on the same data: the digits training split (as examples/c/train_digits.c makes
it) for the small MLP, 4,096 random samples for the wide one. Batches come from a
torch.utils.data.DataLoader over a TensorDataset, shuffled, no worker processes: the loop
every PyTorch tutorial and Accelerate's examples show. For Accelerate, the model, optimizer
and loader go through Accelerator(cpu=True).prepare and the loss through
accelerator.backward.

A step, as on accel's side: the next batch (a new epoch when the loader is exhausted), the
forward, the cross-entropy loss, the backward, the optimizer step and zero_grad.

bench_step_overhead runs this file as a server (--serve) so that blocks of peer steps
interleave with its own in one run: it writes commands on stdin, one per line, and reads
one line back for each.

  run SIDE N   N steps of SIDE (pytorch, accelerate, or pytorch_bf16: PyTorch's loop under
               bf16 autocast); the answer is
               "ok TOTAL_US STEP_US... FETCH_US..." (the block's time, then each step's time,
               then the time each step spent fetching its batch, in microseconds)
  sgemm        the best time of a 1024 x 1024 fp32 matrix product through this torch (its
               BLAS), as "ok BEST_US"
  quit

At start it prints "ready TORCH_VERSION ACCELERATE_VERSION THREADS". Without --serve it
times both peers alone and prints JSON lines (a quick look, not the comparison).
"""
import argparse
import gzip
import os
import sys
import time


def digits(path):
    """The training split of examples/c/train_digits.c: pixels / 16, shuffled with
    xorshift64* seeded 42 (digits_split in examples/c/digits.h), the first 80%."""
    rows = []
    with gzip.open(path, "rt") as f:
        for line in f:
            line = line.strip()
            if line:
                rows.append([int(v) for v in line.split(",")])
    n = len(rows)
    perm = list(range(n))
    s = 42
    mask = (1 << 64) - 1
    for i in range(n - 1, 0, -1):
        s ^= s >> 12
        s ^= (s << 25) & mask
        s ^= s >> 27
        j = ((s * 2685821657736338717) & mask) % (i + 1)
        perm[i], perm[j] = perm[j], perm[i]
    n_test = int(n * 0.2 + 0.5)
    train = [rows[k] for k in perm[: n - n_test]]
    return train


def make_data(torch, sizes, data_path):
    if sizes[0] == 64 and sizes[-1] == 10 and data_path:
        train = digits(data_path)
        x = torch.tensor([r[:64] for r in train], dtype=torch.float32) / 16.0
        y = torch.tensor([r[64] for r in train], dtype=torch.int64)
        return x, y
    g = torch.Generator().manual_seed(7)
    return (torch.randn(4096, sizes[0], generator=g), torch.randint(sizes[-1], (4096,), generator=g))


class Peer:
    """One side: a model, its optimizer and its loader, stepped as its users step it."""

    def __init__(self, torch, sizes, batch, x, y, use_accelerate, bf16=False):
        import torch.nn as nn
        from torch.utils.data import DataLoader, TensorDataset

        self.torch = torch
        self.F = torch.nn.functional
        layers = []
        for i in range(len(sizes) - 1):
            layers.append(nn.Linear(sizes[i], sizes[i + 1]))
            if i + 2 < len(sizes):
                layers.append(nn.ReLU())
        model = nn.Sequential(*layers)
        opt = torch.optim.AdamW(model.parameters(), lr=3e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01)
        loader = DataLoader(TensorDataset(x, y), batch_size=batch, shuffle=True,
                            generator=torch.Generator().manual_seed(42))
        self.accelerator = None
        if use_accelerate:
            from accelerate import Accelerator

            self.accelerator = Accelerator(cpu=True, mixed_precision="no")
            model, opt, loader = self.accelerator.prepare(model, opt, loader)
        self.model, self.opt, self.loader = model, opt, loader
        self.it = iter(loader)
        # bf16 autocast as a PyTorch user writes it on a CPU (the weights and AdamW stay fp32)
        self.autocast = (lambda: torch.autocast("cpu", dtype=torch.bfloat16)) if bf16 else None

    def step(self):
        """One step; returns (step seconds, fetch seconds)."""
        t0 = time.perf_counter()
        try:
            x, y = next(self.it)
        except StopIteration:  # the epoch ended: start the next
            self.it = iter(self.loader)
            x, y = next(self.it)
        t1 = time.perf_counter()
        if self.autocast is not None:
            with self.autocast():
                loss = self.F.cross_entropy(self.model(x), y)
        else:
            loss = self.F.cross_entropy(self.model(x), y)
        if self.accelerator is not None:
            self.accelerator.backward(loss)
        else:
            loss.backward()
        self.opt.step()
        self.opt.zero_grad()
        t2 = time.perf_counter()
        return t2 - t0, t1 - t0


def sgemm_us(torch):
    n = 1024
    a, b, c = torch.randn(n, n), torch.randn(n, n), torch.empty(n, n)
    best = float("inf")
    for i in range(12):
        t = time.perf_counter()
        torch.mm(a, b, out=c)
        d = time.perf_counter() - t
        if i >= 2:
            best = min(best, d)
    return best * 1e6


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", required=True, help="layer sizes, e.g. 64,128,64,10")
    ap.add_argument("--batch", type=int, required=True)
    ap.add_argument("--threads", type=int, required=True)
    ap.add_argument("--data", default="", help="the digits file (examples/data/digits.csv.gz) for a 64-...-10 MLP")
    ap.add_argument("--serve", action="store_true")
    ap.add_argument("--steps", type=int, default=100, help="without --serve: steps timed per peer")
    args = ap.parse_args()

    import torch
    import accelerate

    torch.set_num_threads(args.threads)
    torch.manual_seed(42)
    sizes = [int(v) for v in args.sizes.split(",")]
    x, y = make_data(torch, sizes, args.data)
    peers = {
        "pytorch": Peer(torch, sizes, args.batch, x, y, use_accelerate=False),
        "accelerate": Peer(torch, sizes, args.batch, x, y, use_accelerate=True),
        "pytorch_bf16": Peer(torch, sizes, args.batch, x, y, use_accelerate=False, bf16=True),
    }
    torch.set_num_threads(args.threads)  # after Accelerator(), whatever it set
    threads = torch.get_num_threads()

    if not args.serve:
        name = "mlp-" + "-".join(map(str, sizes))
        for side, peer in peers.items():
            for _ in range(10):
                peer.step()
            t = time.perf_counter()
            for _ in range(args.steps):
                peer.step()
            us = (time.perf_counter() - t) / args.steps * 1e6
            print(f'{{"bench":"peer","side":"{side}","model":"{name}","batch":{args.batch},"threads":{threads},'
                  f'"torch":"{torch.__version__}","step_us":{us:.1f}}}', flush=True)
        return 0

    out = sys.stdout
    out.write(f"ready {torch.__version__} {accelerate.__version__} {threads}\n")
    out.flush()
    for line in sys.stdin:
        cmd = line.split()
        if not cmd:
            continue
        if cmd[0] == "quit":
            break
        if cmd[0] == "sgemm":
            out.write(f"ok {sgemm_us(torch):.1f}\n")
        elif cmd[0] == "run" and len(cmd) == 3 and cmd[1] in peers and cmd[2].isdigit():
            peer, n = peers[cmd[1]], int(cmd[2])
            steps, fetches = [], []
            t = time.perf_counter()
            for _ in range(n):
                s, f = peer.step()
                steps.append(s)
                fetches.append(f)
            total = time.perf_counter() - t
            out.write("ok %.1f %s %s\n" % (total * 1e6, " ".join("%.1f" % (v * 1e6) for v in steps),
                                           " ".join("%.1f" % (v * 1e6) for v in fetches)))
        else:
            out.write(f"error unknown command: {line.strip()}\n")
        out.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
