"""The UCI digits as the C examples read them (examples/c/digits.h): pixels / 16 as float32,
labels int64, and digits_split's xorshift64* shuffle with seed 42 (last 20% held out)."""

import gzip
import os
from typing import Tuple

import numpy as np

DEFAULT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "examples", "data",
                       "digits.csv.gz")
MASK = (1 << 64) - 1


def load(path: str = DEFAULT) -> Tuple[np.ndarray, np.ndarray]:
    with gzip.open(path, "rt") as f:
        rows = [line.strip().split(",") for line in f if line.strip()]
    data = np.array(rows, dtype=np.int64)
    return (data[:, :64].astype(np.float32) / np.float32(16.0)), data[:, 64].copy()


def split(x: np.ndarray, y: np.ndarray, test_fraction: float = 0.2, seed: int = 42):
    n = len(x)
    n_test = int(n * test_fraction + 0.5)
    perm = list(range(n))
    s = seed or 88172645463325252
    for i in range(n - 1, 0, -1):
        s ^= s >> 12
        s ^= (s << 25) & MASK
        s ^= s >> 27
        j = ((s * 2685821657736338717) & MASK) % (i + 1)
        perm[i], perm[j] = perm[j], perm[i]
    p = np.array(perm)
    n_train = n - n_test
    return (x[p[:n_train]], y[p[:n_train]]), (x[p[n_train:]], y[p[n_train:]])
