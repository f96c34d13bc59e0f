#!/usr/bin/env python3
"""accel's peers in bench_ddp_processes: PyTorch 2.x DistributedDataParallel and FSDP2
(torch.distributed.fsdp.fully_shard with reshard_after_forward=False, its ZeRO-2) on the Gloo
backend, one of 2 processes, written as their users write them.

bench_ddp_processes starts 2 of these with torchrun's variables (RANK, WORLD_SIZE,
LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT) and 1 intra-op thread each
(torch.set_num_threads, OMP_NUM_THREADS), and times blocks of their steps interleaved with
its own. Both sides train what accel's workers train: an MLP of Linear layers with ReLU
between them, AdamW (lr 1e-3, betas 0.9/0.999, eps 1e-8, weight decay 0.01: accel's
AdamWConfig defaults, PyTorch's default implementation for CPU tensors), fp32, the
gradients set to None after each step (zero_grad's default), the micro-batch B per
process, on random data made as accel's (a fixed seed, 50 global batches: randn inputs,
randint labels), shuffled and split between the processes by a DistributedSampler, a new
epoch (set_epoch) when the loader is exhausted.

  ddp   DistributedDataParallel(model) with its defaults (25 MiB buckets)
  fsdp  fully_shard on each Linear, then on the root, reshard_after_forward=False: the
        parameters stay gathered between forward and backward (FSDP's SHARD_GRAD_OP, ZeRO-2);
        the gradients are reduce-scattered, each process steps its shard of AdamW, and the
        parameters are all-gathered before the next forward

A step, as on accel's side: the next batch, the forward, the cross-entropy loss, the
backward, the optimizer step and zero_grad.

Commands on stdin, one per line (the same from the bench to both processes):

  run SIDE K   a barrier, K steps of SIDE (ddp or fsdp), a barrier; the answer is
               "result SECONDS" (this process's time for the block), or "error MESSAGE"
  quit         a barrier, then exit

At start each process prints "ready TORCH_VERSION THREADS FSDP", FSDP being "ok" or the
error that setting FSDP2 up raised on this build (percent-encoded spaces: one word).
"""
import argparse
import os
import sys
import time
import traceback


def one_word(s):
    return s.strip().replace("%", "%25").replace(" ", "%20").replace("\n", "%0A") or "error"


class Side:
    """One model, its optimizer and its sharded loader, stepped as its users step them."""

    def __init__(self, torch, sizes, batch, x, y, wrap):
        import torch.nn as nn
        from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

        self.torch = torch
        self.F = torch.nn.functional
        torch.manual_seed(1)
        layers = []
        for i in range(len(sizes) - 1):
            layers.append(nn.Linear(sizes[i], sizes[i + 1]))
            if i + 2 < len(sizes):
                layers.append(nn.ReLU())
        model = wrap(nn.Sequential(*layers))
        self.opt = torch.optim.AdamW(model.parameters(), lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01)
        self.sampler = DistributedSampler(TensorDataset(x, y), shuffle=True, seed=3)
        self.loader = DataLoader(TensorDataset(x, y), batch_size=batch, sampler=self.sampler)
        self.model = model
        self.epoch = 0
        self.it = iter(self.loader)

    def step(self):
        try:
            x, y = next(self.it)
        except StopIteration:  # the epoch ended: start the next
            self.epoch += 1
            self.sampler.set_epoch(self.epoch)
            self.it = iter(self.loader)
            x, y = next(self.it)
        loss = self.F.cross_entropy(self.model(x), y)
        loss.backward()
        self.opt.step()
        self.opt.zero_grad()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", required=True, help="layer sizes, e.g. 64,128,64,10")
    ap.add_argument("--batch", type=int, required=True, help="the micro-batch of each process")
    ap.add_argument("--batches", type=int, default=50, help="global batches in the data set")
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()

    import torch
    import torch.distributed as dist

    torch.set_num_threads(args.threads)
    dist.init_process_group("gloo")
    world = dist.get_world_size()
    sizes = [int(v) for v in args.sizes.split(",")]
    n = args.batch * world * args.batches
    g = torch.Generator().manual_seed(7)
    x = torch.randn(n, sizes[0], generator=g)
    y = torch.randint(0, sizes[-1], (n,), generator=g)

    from torch.nn.parallel import DistributedDataParallel

    sides = {"ddp": Side(torch, sizes, args.batch, x, y, lambda m: DistributedDataParallel(m))}
    fsdp_status = "ok"
    try:
        from torch.distributed.fsdp import fully_shard

        def fsdp2(m):
            for layer in m:
                if isinstance(layer, torch.nn.Linear):
                    fully_shard(layer, reshard_after_forward=False)
            fully_shard(m, reshard_after_forward=False)
            return m

        s = Side(torch, sizes, args.batch, x, y, fsdp2)
        s.step()  # FSDP2's first step is where CPU/Gloo support fails, if it does
        sides["fsdp"] = s
    except Exception as e:  # noqa: BLE001 - reported, not fatal: the DDP peer still runs
        fsdp_status = one_word(f"{type(e).__name__}: {e}".splitlines()[0])
        traceback.print_exc(file=sys.stderr)
    for s in sides.values():  # warm-up, as accel's workers
        for _ in range(3):
            s.step()

    out = sys.stdout
    out.write(f"ready {torch.__version__} {torch.get_num_threads()} {fsdp_status}\n")
    out.flush()
    for line in sys.stdin:
        cmd = line.split()
        if not cmd:
            continue
        if cmd[0] == "quit":
            dist.barrier()
            break
        if cmd[0] == "run" and len(cmd) == 3 and cmd[2].isdigit():
            side = sides.get(cmd[1])
            if side is None:
                out.write(f"error no {cmd[1]} side (FSDP2: {fsdp_status})\n")
            else:
                k = int(cmd[2])
                dist.barrier()
                t = time.perf_counter()
                for _ in range(k):
                    side.step()
                dist.barrier()
                out.write("result %.9f\n" % (time.perf_counter() - t))
        else:
            out.write(f"error unknown command: {line.strip()}\n")
        out.flush()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
