import os
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.path.join(os.path.dirname(HERE), "src")
if SRC not in sys.path:
    sys.path.insert(0, SRC)

import accel  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.dirname(HERE)))
DIGITS = os.path.join(REPO, "examples", "data", "digits.csv.gz")


@pytest.fixture
def acc():
    with accel.Accelerator(seed=42, num_threads=1, cpu=True) as a:
        yield a
