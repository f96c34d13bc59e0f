import os
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.path.join(os.path.dirname(HERE), "src")
if SRC not in sys.path:
    sys.path.insert(0, SRC)

REPO = os.path.dirname(os.path.dirname(os.path.dirname(HERE)))
DIGITS = os.path.join(REPO, "examples", "data", "digits.csv.gz")

# What the tests need from the build, found in the checkout's build/ (scripts/build's) unless the
# environment names it (ACCEL_BUILD_DIR: another build directory; each variable: that file).
BUILD = os.environ.get("ACCEL_BUILD_DIR") or os.path.join(REPO, "build")
for _var, _rel in (("ACCEL_LIBRARY", "libaccel.so"), ("ACCEL_LAYOUT_PROBE", "tests/abi/abi_layout_probe"),
                   ("ACCEL_TEST_TORCHSCRIPT", "tests/digits_model.pt"),
                   ("ACCEL_SIM_NCCL_LIBRARY", "libaccel-nccl-sim.so")):
    if not os.environ.get(_var) and os.path.exists(os.path.join(BUILD, _rel)):
        os.environ[_var] = os.path.join(BUILD, _rel)

import accel  # noqa: E402


@pytest.fixture
def acc():
    with accel.Accelerator(seed=42, num_threads=1, cpu=True) as a:
        yield a
