"""accel: Python binding of the accel training runtime's C ABI (cffi, ABI mode).

    import accel
    acc = accel.Accelerator(mixed_precision="bf16", gradient_accumulation_steps=4)
    model = accel.Model.mlp(acc, [64, 128, 64, 10])
    opt = accel.AdamW(model, lr=3e-3)
    loader = accel.DataLoader(acc, x, y, batch_size=32, shuffle=True)
    model, opt, loader = acc.prepare(model, opt, loader)
    for x, y in loader:
        loss = accel.cross_entropy(model(x), y)
        acc.backward(loss)
        opt.step()

libaccel is loaded on first use (ACCEL_LIBRARY, then pkg-config, then the system loader).
"""

from . import sim
from ._core import (Accelerator, Activation, Adafactor, AdamW, Attention, Backend, CausalLMOutput, ClosedError, CommunicationError, DataLoader,
                    Device, DType, Error, FormatError, Inference, InferenceWeights, InternalError, InvalidArgumentError,
                    InvalidStateError, LAMB, LogWriter, Loss, MemoryEstimate,
                    Model, NonFiniteError, Optimizer, OptimizerKind, OutOfMemoryError, Precision, ReduceOp, Schedule, Scheduler,
                    SGD, Status, StepResult, Strategy, Tensor, TrainResult, UnsupportedError, cross_entropy, dtype_size, error_for,
                    estimate_memory, get_constant_schedule_with_warmup, get_cosine_schedule_with_warmup,
                    get_linear_schedule_with_warmup, load_library, mse_loss, read_token_file, status_name, tensor, version,
                    version_number, write_token_file)
from ._core import IOError as IOError, TimeoutError as TimeoutError  # noqa: A004 (not in __all__, see below)
from ._ffi import LibraryNotFoundError, LibraryVersionError, check_version
from .sim import RankOutcome, SimReport

__version__ = "0.1.0"

# accel.IOError and accel.TimeoutError (subclasses of the builtins OSError and TimeoutError) are
# attributes only: `from accel import *` must not shadow the builtins of the same names.
__all__ = [
    "Accelerator", "Activation", "Adafactor", "AdamW", "Attention", "Backend", "CausalLMOutput", "ClosedError", "CommunicationError", "DataLoader", "Device",
    "DType", "Error", "FormatError", "Inference", "InferenceWeights", "InternalError", "InvalidArgumentError",
    "InvalidStateError", "LAMB", "LibraryNotFoundError", "LibraryVersionError", "LogWriter", "Loss", "MemoryEstimate", "Model", "NonFiniteError",
    "Optimizer", "OptimizerKind", "OutOfMemoryError", "Precision", "RankOutcome", "ReduceOp", "SGD", "Schedule", "Scheduler", "SimReport",
    "Status", "StepResult", "Strategy", "Tensor", "TrainResult", "UnsupportedError", "check_version",
    "cross_entropy", "dtype_size", "error_for", "estimate_memory", "get_constant_schedule_with_warmup",
    "get_cosine_schedule_with_warmup", "get_linear_schedule_with_warmup", "load_library", "mse_loss", "read_token_file", "sim",
    "status_name", "tensor", "version", "version_number", "write_token_file",
]
