"""Pickle compatibility only: the binding was one module, accel._core, until it was split into
the modules named in accel/__init__.py. A pickle stores the module path of what it references
(an error's or enum's class, the function that rebuilds a Tensor, a NamedTuple's class), so
pickles made by those versions name accel._core; this module keeps every such name resolvable.
Nothing imports it: new code uses the package (accel.X) or the modules themselves."""

from ._context import Accelerator, cross_entropy, mse_loss
from ._data import DataLoader, read_token_file, write_token_file
from ._errors import (ClosedError, CommunicationError, Error, FormatError, InternalError, InvalidArgumentError,
                      InvalidStateError, IOError, NonFiniteError, OutOfMemoryError, Status, TimeoutError,
                      UnsupportedError, error_for, status_name)
from ._lib import load_library, version, version_number
from ._memory import MemoryEstimate, estimate_memory
from ._model import (LAMB, SGD, Adafactor, AdamW, CausalLMOutput, Model, Optimizer, Scheduler, StepResult,
                     get_constant_schedule_with_warmup, get_cosine_schedule_with_warmup,
                     get_linear_schedule_with_warmup)
from ._options import (Activation, Attention, Backend, Device, DType, LogWriter, Loss, OptimizerKind, Precision,
                       ReduceOp, Schedule, Strategy)
from ._realtime import Inference, InferenceWeights, TrainResult
from ._tensor import Tensor, _tensor_from_raw, dtype_size, tensor

__all__ = [
    "Accelerator", "Activation", "Adafactor", "AdamW", "Attention", "Backend", "CausalLMOutput", "ClosedError",
    "CommunicationError", "DType", "DataLoader", "Device", "Error", "FormatError", "IOError", "Inference",
    "InferenceWeights", "InternalError", "InvalidArgumentError", "InvalidStateError", "LAMB", "LogWriter", "Loss",
    "MemoryEstimate", "Model", "NonFiniteError", "Optimizer", "OptimizerKind", "OutOfMemoryError", "Precision",
    "ReduceOp", "SGD", "Schedule", "Scheduler", "Status", "StepResult", "Strategy", "Tensor", "TimeoutError",
    "TrainResult", "UnsupportedError", "_tensor_from_raw", "cross_entropy", "dtype_size", "error_for",
    "estimate_memory", "get_constant_schedule_with_warmup", "get_cosine_schedule_with_warmup",
    "get_linear_schedule_with_warmup", "load_library", "mse_loss", "read_token_file", "status_name", "tensor",
    "version", "version_number", "write_token_file",
]
