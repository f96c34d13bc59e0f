#!/usr/bin/env python3
"""Compares two checkpoint directories (accel_save_state) by their contents, not their bytes.

    compare_checkpoints.py SAVED LOADED_AND_SAVED_AGAIN

Every tensor of every safetensors file of SAVED (weights, optimizer state, RNG states) must
be in the file of the same name in the second directory with the same dtype, shape and bytes;
every field of each rank-N.json (step counters, loss scale, growth tracker, data loaders'
epoch and position, shard pieces) must be equal, except the per-file sizes and checksums,
which belong to the files and not to the state (and the manifest's writer version and format
version, which belong to the library that wrote it). Fields the second directory adds (a newer
format) are allowed. Prints one line per file and exits 1 on the first difference of any.
Standard library only: the suite runs it with the system's python3.
"""
import json
import os
import struct
import sys


def tensors(path):
    """name -> (dtype, shape, bytes) of a safetensors file."""
    with open(path, "rb") as f:
        blob = f.read()
    if len(blob) < 8:
        raise ValueError(f"{path}: {len(blob)} bytes, not a safetensors file")
    (n,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8 : 8 + n])
    data = blob[8 + n :]
    out = {}
    for name, t in header.items():
        if name == "__metadata__":
            continue
        a, b = t["data_offsets"]
        out[name] = (t["dtype"], tuple(t["shape"]), data[a:b])
    return out


def compare_json(a, b, where, skip=("files", "accel_version", "format_version")):
    problems = []
    for k, v in a.items():
        if k in skip:
            continue
        if k not in b:
            problems.append(f"{where}: field '{k}' is missing")
        elif b[k] != v:
            problems.append(f"{where}: field '{k}' is {json.dumps(b[k])[:200]}, was {json.dumps(v)[:200]}")
    return problems


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    old, new = sys.argv[1:]
    problems, checked = [], 0
    for name in sorted(os.listdir(old)):
        p, q = os.path.join(old, name), os.path.join(new, name)
        if not os.path.exists(q):
            problems.append(f"{name}: not in {new}")
            continue
        if name.endswith(".safetensors"):
            a, b = tensors(p), tensors(q)
            for t, (dtype, shape, data) in a.items():
                if t not in b:
                    problems.append(f"{name}: tensor '{t}' is missing")
                    continue
                d2, s2, data2 = b[t]
                if (d2, s2) != (dtype, shape):
                    problems.append(f"{name}: '{t}' is {d2}{list(s2)}, was {dtype}{list(shape)}")
                elif data2 != data:
                    diff = sum(1 for x, y in zip(data, data2) if x != y)
                    problems.append(f"{name}: '{t}' ({dtype}{list(shape)}) differs in {diff} of {len(data)} bytes")
            checked += len(a)
            print(f"{name}: {len(a)} tensors, {sum(len(v[2]) for v in a.values())} bytes: "
                  f"{'equal' if not any(x.startswith(name + ':') for x in problems) else 'DIFFERENT'}")
        elif name.endswith(".json"):
            with open(p) as f:
                a = json.load(f)
            with open(q) as f:
                b = json.load(f)
            before = len(problems)
            problems += compare_json(a, b, name)
            print(f"{name}: {'equal' if len(problems) == before else 'DIFFERENT'}")
    for p in problems:
        print("DIFFERENT " + p)
    if problems:
        sys.exit(1)
    print(f"{checked} tensors and every state field equal")


if __name__ == "__main__":
    main()
