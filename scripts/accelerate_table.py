#!/usr/bin/env python3
"""What Accelerate's sharded loaders yield, per process and batch, over a grid (issue 18,
item 5): the table accel's loader is tested against (tests/fixtures/accelerate/).

Run through scripts/accelerate_table (the lm venv plus accelerate from PyPI). Accelerate
itself is called, not re-implemented: accelerate.data_loader.prepare_data_loader(loader,
num_processes=P, process_index=r, split_batches, even_batches), once per process, on a torch
DataLoader(dataset, batch_size=b, drop_last) over range(N): a map-style dataset
(TensorDataset) and an iterable one (IterableDataset; prepare_data_loader then shards it with
IterableDatasetShard, the path Accelerate takes without dispatch_batches), then iterated.

Grid: dataset sizes 0-40, batch sizes 1-8, 1-4 processes, drop_last, even_batches (map-style
only: iterable shards have no such option) and split_batches. A configuration Accelerate
refuses is recorded with its exception's type and message.

Output (gzipped JSON, deterministic): {"accelerate": version, "torch": version, "rows": [
  [kind, N, b, P, drop_last, even_batches, split_batches, result], ...]}
kind "map" or "iterable"; result: a list over processes of that process's batches (lists
of sample indices), or {"error": "ValueError: ..."}.

Usage: accelerate_table.py --out tests/fixtures/accelerate/loader_table.json.gz [--check]
"""

import argparse
import gzip
import io
import json
import sys

import torch
from torch.utils.data import DataLoader, IterableDataset, TensorDataset

import accelerate
from accelerate.data_loader import prepare_data_loader


class Range(IterableDataset):
    def __init__(self, n):
        self.n = n

    def __iter__(self):
        return iter(range(self.n))


def shards(dataset, b, p, drop_last, even, split):
    out = []
    for r in range(p):
        loader = DataLoader(dataset, batch_size=b, drop_last=drop_last)
        prepared = prepare_data_loader(loader, device=None, num_processes=p, process_index=r, split_batches=split,
                                       put_on_device=False, even_batches=even)
        batches = []
        for batch in prepared:
            t = batch[0] if isinstance(batch, (list, tuple)) else batch
            batches.append([int(x) for x in t])
        out.append(batches)
    return out


def attempt(fn, *args):
    try:
        return fn(*args)
    except Exception as e:  # Accelerate's refusal is part of the table
        return {"error": f"{type(e).__name__}: {e}"}


def table():
    rows = []
    for n in range(0, 41):
        for b in range(1, 9):
            for p in range(1, 5):
                for drop_last in (False, True):
                    for split in (False, True):
                        for even in (True, False):
                            rows.append(["map", n, b, p, drop_last, even, split,
                                         attempt(shards, TensorDataset(torch.arange(n)), b, p, drop_last, even, split)])
                        # even_batches does not apply to iterable datasets (IterableDatasetShard
                        # always completes the last round unless drop_last)
                        rows.append(["iterable", n, b, p, drop_last, True, split,
                                     attempt(shards, Range(n), b, p, drop_last, True, split)])
    return {"accelerate": accelerate.__version__, "torch": torch.__version__.split("+")[0], "rows": rows}


def encode(t):
    raw = json.dumps(t, separators=(",", ":"), sort_keys=True).encode()
    buf = io.BytesIO()
    with gzip.GzipFile(fileobj=buf, mode="wb", mtime=0, compresslevel=9) as f:  # mtime 0: byte-identical reruns
        f.write(raw)
    return buf.getvalue()


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--check", action="store_true", help="fail unless --out already holds exactly this table")
    a = ap.parse_args()
    data = encode(table())
    if a.check:
        with open(a.out, "rb") as f:
            same = f.read() == data
        print(f"accelerate_table: {a.out} {'matches' if same else 'DIFFERS from'} Accelerate {accelerate.__version__}")
        return 0 if same else 1
    with open(a.out, "wb") as f:
        f.write(data)
    rows = len(json.loads(gzip.decompress(data))["rows"])
    print(f"accelerate_table: {rows} configurations from Accelerate {accelerate.__version__} -> {a.out} "
          f"({len(data)} bytes)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
