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

The modules, each importing only those above it in this list (named like the Rust and Go
bindings' files):

    _ffi       the C declarations (cdef) and finding and opening libaccel
    _lib       `lib` (loaded on first use), version(), _NoCopy (objects that own a C handle)
    _errors    Status, accel.Error and its subclasses, error_for, _check
    _util      arguments for C: _cpath, _cstr, _int, _fill (option structs), _overflow
    _options   the enums and _enum (member, int or name), _log_writers, _options (accel_options)
    _memory    estimate_memory, MemoryEstimate
    _tensor    Tensor, tensor(), numpy, the pins that keep a tensor alive during a C call
    _tokenizer Tokenizer, BatchEncoding (tokenizer.json and SentencePiece .model files, chat templates)
    _handle    _Child (the lifetime of objects made from an Accelerator), _Args (one call's arguments)
    _model     Model, CausalLMOutput, StepResult, the optimizers, Scheduler
    _data      DataLoader (tensors, causal-LM tokens, fine-tuning JSONL), token files
    _realtime  Inference, InferenceWeights, TrainResult
    _context   Accelerator, cross_entropy, mse_loss
    sim        sim.run, SimReport, RankOutcome

The modules below _context name Accelerator in annotations only (under TYPE_CHECKING);
_context binds it into them for typing.get_type_hints. _core is kept for pickles made when the
binding was that one module (nothing imports it).
"""

from . import sim
from ._context import Accelerator, cross_entropy, mse_loss
from ._data import DataLoader, read_token_file, write_token_file
from ._errors import (ClosedError, CommunicationError, Error, FormatError, InternalError, InvalidArgumentError,
                      InvalidStateError, NonFiniteError, OutOfMemoryError, Status, UnsupportedError, error_for,
                      status_name)
from ._errors import IOError as IOError, TimeoutError as TimeoutError  # noqa: A004 (not in __all__, see below)
from ._ffi import LibraryNotFoundError, LibraryVersionError, check_version
from ._lib import load_library, version, version_number
from ._memory import MemoryEstimate, estimate_memory
from ._model import (LAMB, SGD, Adafactor, AdamW, CausalLMOutput, Model, Optimizer, Scheduler, StepResult,
                     get_constant_schedule_with_warmup, get_cosine_schedule_with_warmup,
                     get_linear_schedule_with_warmup)
from ._options import (Activation, Attention, Backend, ChatFormat, Device, DType, LogWriter, Loss, Offload,
                       OptimizerKind, Precision, Quantization, ReduceOp, Schedule, Side, SpecialToken, Strategy)
from ._realtime import Inference, InferenceWeights, TrainResult
from ._tensor import Tensor, dtype_size, tensor
from ._tokenizer import BatchEncoding, Tokenizer
from .sim import RankOutcome, SimReport

__version__ = "0.1.0"

# accel.IOError and accel.TimeoutError (subclasses of the builtins OSError and TimeoutError) are
# attributes only: `from accel import *` must not shadow the builtins of the same names.
__all__ = [
    "Accelerator", "Activation", "Adafactor", "AdamW", "Attention", "Backend", "BatchEncoding", "CausalLMOutput", "ChatFormat", "ClosedError", "CommunicationError", "DataLoader", "Device",
    "DType", "Error", "FormatError", "Inference", "InferenceWeights", "InternalError", "InvalidArgumentError",
    "InvalidStateError", "LAMB", "LibraryNotFoundError", "LibraryVersionError", "LogWriter", "Loss", "MemoryEstimate", "Model", "NonFiniteError",
    "Offload", "Optimizer", "OptimizerKind", "OutOfMemoryError", "Precision", "Quantization", "RankOutcome", "ReduceOp", "SGD", "Schedule", "Scheduler", "Side", "SimReport",
    "SpecialToken", "Status", "StepResult", "Strategy", "Tensor", "Tokenizer", "TrainResult", "UnsupportedError", "check_version",
    "cross_entropy", "dtype_size", "error_for", "estimate_memory", "get_constant_schedule_with_warmup",
    "get_cosine_schedule_with_warmup", "get_linear_schedule_with_warmup", "load_library", "mse_loss", "read_token_file", "sim",
    "status_name", "tensor", "version", "version_number", "write_token_file",
]
