"""The idiomatic layer over accel's C ABI: errors, tensors, the Accelerator and its objects.

Every C call goes through the module global `lib`, which loads libaccel on first use
(see _ffi.load: ACCEL_LIBRARY, pkg-config, the system loader; then the major-version check).
"""

from __future__ import annotations

import builtins
import contextlib
import enum
import os
import reprlib
import sys
import threading
import weakref
from typing import (Any, Callable, Dict, Iterator, List, Mapping, NamedTuple, NoReturn, Optional, Sequence, Tuple,
                    Type, Union, overload, TYPE_CHECKING)

from . import _ffi
from ._ffi import ffi, LibraryNotFoundError, LibraryVersionError

if TYPE_CHECKING:  # numpy is optional (pip install accel[numpy])
    import numpy as np

# ------------------------------------------------------------------------------------------
# Loading
# ------------------------------------------------------------------------------------------

_load_lock = threading.Lock()


class _LazyLib:
    """Stands in for the library until the first call, which loads it and rebinds `lib`."""

    def __getattr__(self, name: str) -> Any:
        return getattr(load_library(), name)


lib: Any = _LazyLib()


def load_library() -> Any:
    """Loads libaccel now (normally it is loaded by the first call) and returns the cffi library.

    Raises LibraryNotFoundError (an ImportError) listing what was tried, or LibraryVersionError
    when the loaded library's major version is not the one this binding was written for."""
    global lib
    with _load_lock:
        if isinstance(lib, _LazyLib):
            loaded = _ffi.load()
            # cffi resolves a function on its first use, under a lock of its own that is not
            # reentrant: a finalizer (the garbage collector runs them anywhere, also inside cffi
            # parsing a type for ffi.new) that looked one up for the first time would deadlock.
            # The functions finalizers call are resolved now, before any object exists.
            for name in _FINALIZER_FUNCTIONS:
                getattr(loaded, name)
            lib = loaded
    return lib


_FINALIZER_FUNCTIONS = ("accel_tensor_destroy", "accel_destroy", "accel_model_destroy", "accel_optimizer_destroy",
                        "accel_scheduler_destroy", "accel_dataloader_destroy", "accel_inference_destroy",
                        "accel_sim_report_destroy", "accel_last_error", "accel_status_name")


def version() -> str:
    """The version of the libaccel loaded ("0.1.0")."""
    return str(ffi.string(lib.accel_version_string()).decode())


def version_number() -> int:
    """The version of the libaccel loaded as MAJOR * 10000 + MINOR * 100 + PATCH."""
    return int(lib.accel_version_number())


# ------------------------------------------------------------------------------------------
# Enums
# ------------------------------------------------------------------------------------------


class Status(enum.IntEnum):
    """accel_status: OK and the error codes (negative)."""

    OK = 0
    INVALID_ARGUMENT = -1
    INVALID_STATE = -2
    OUT_OF_MEMORY = -3
    COMMUNICATION = -4
    TIMEOUT = -5
    IO = -6
    FORMAT = -7
    UNSUPPORTED = -8
    INTERNAL = -9
    NON_FINITE = -10


class DType(enum.IntEnum):
    """accel_dtype: a tensor's element type."""

    FLOAT32 = 0
    FLOAT16 = 1
    BFLOAT16 = 2
    INT64 = 3
    INT32 = 4
    UINT8 = 5
    FLOAT64 = 6
    INT8 = 7


class Precision(enum.IntEnum):
    """accel_precision: mixed_precision="no" | "bf16" | "fp16" | "auto" (bf16 where the device
    computes it natively, else no; resolved when the Accelerator is made)."""

    NO = 0
    BF16 = 1
    FP16 = 2
    AUTO = 3


class Device(enum.IntEnum):
    """accel_device: AUTO (CUDA when available, else the CPU), CPU, CUDA."""

    AUTO = 0
    CPU = 1
    CUDA = 2


class Strategy(enum.IntEnum):
    """accel_strategy: how several processes share the work (DDP, ZeRO 1-3; FSDP's aliases)."""

    NO = 0
    DDP = 1
    ZERO1 = 2
    ZERO2 = 3
    ZERO3 = 4
    SHARD_GRAD_OP = 3  # FSDP's names (aliases)
    FULL_SHARD = 4


class Backend(enum.IntEnum):
    """accel_backend: how the processes of a launched world talk."""

    AUTO = 0
    GLOO = 1
    NCCL = 2
    SIM = 3


class Activation(enum.IntEnum):
    """accel_activation: the MLP's activation between linear layers."""

    RELU = 0
    GELU = 1
    TANH = 2
    SIGMOID = 3


class Schedule(enum.IntEnum):
    """accel_schedule: the learning-rate schedule's shape after warm-up."""

    CONSTANT = 0
    LINEAR = 1
    COSINE = 2


class ReduceOp(enum.IntEnum):
    """accel_reduce_op: the element-wise reduction of Accelerator.reduce."""

    SUM = 0
    MEAN = 1
    MAX = 2
    MIN = 3
    PROD = 4


class OptimizerKind(enum.IntEnum):
    """accel_optimizer_kind: the optimizer estimate_memory assumes (its state per parameter)."""

    SGD = 0
    SGD_MOMENTUM = 1
    ADAMW = 2
    ADAFACTOR = 3
    LAMB = 4


class Attention(enum.IntEnum):
    """The attention kernel estimate_memory assumes (accel_memory_estimate_options.attention):
    AUTO (this build's: fused with libtorch >= 2.1, else eager), EAGER (the T x T
    probabilities are saved for backward), FUSED (a GPU's flash or memory-efficient attention)."""

    AUTO = 0
    EAGER = 1
    FUSED = 2


class LogWriter(enum.IntFlag):
    """accel_log_writer: the files init_trackers writes (flags: LogWriter.JSONL | LogWriter.CSV)."""

    JSONL = 1        # LOG_DIR/metrics.jsonl, appended to
    CSV = 2          # LOG_DIR/metrics.csv, appended to
    TENSORBOARD = 4  # LOG_DIR/events.out.tfevents.TIME.HOST.PID, new for each init_trackers


class Loss(enum.IntEnum):
    """accel_loss: the loss Accelerator.train_micro_batches computes for each micro-batch."""

    MSE = 0            # mse_loss(model(x), y)
    CROSS_ENTROPY = 1  # cross_entropy(model(x), y)
    CAUSAL_LM = 2      # a causal LM's next-token loss; labels: the batch's targets, else its inputs


_ALIASES = {"fp32": "no", "none": "no", "float32": "no", "bfloat16": "bf16", "float16": "fp16",
            "f32": "float32", "f16": "float16", "bf16": "bfloat16", "f64": "float64", "double": "float64",
            "float": "float32", "half": "float16", "long": "int64", "int": "int32"}


def _enum(cls: Any, value: Any, what: str) -> Any:
    """An enum member from a member, an int or a case-insensitive name ("bf16", "ddp")."""
    if isinstance(value, cls):
        return value
    if isinstance(value, str):
        key = value.strip().lower()
        names = {m.lower(): m for m in cls.__members__}
        if key not in names and key in _ALIASES:
            key = _ALIASES[key]
        if key in names:
            return cls[names[key]]
        raise InvalidArgumentError(Status.INVALID_ARGUMENT,
                                   f"{what} must be one of {', '.join(n.lower() for n in cls.__members__)}; got {value!r}")
    if isinstance(value, int) and not isinstance(value, bool):
        try:
            return cls(value)
        except ValueError:
            pass
    raise InvalidArgumentError(Status.INVALID_ARGUMENT, f"{what}: {value!r} is no {cls.__name__}")


# ------------------------------------------------------------------------------------------
# Errors
# ------------------------------------------------------------------------------------------


class Error(Exception):
    """An accel error: `status` (Status, or the int for a code this binding does not know) and
    `message` (the library's message, which names the function and the argument at fault)."""

    status: Union[Status, int]
    message: str

    def __init__(self, status: Union[Status, int], message: str) -> None:
        try:
            status = Status(status)
        except ValueError:
            pass
        self.status = status
        self.message = message
        if isinstance(self, OSError):  # IOError: OSError's own fields (errno, strerror) stay None
            OSError.__init__(self, message)
        else:
            Exception.__init__(self, message)

    def __str__(self) -> str:
        name = self.status.name if isinstance(self.status, Status) else f"status {self.status}"
        return f"{self.message} [{name}]"

    def __reduce__(self) -> Tuple[Any, ...]:
        """Pickles as the class, its constructor's arguments (status, message) and the attributes
        set on it (sim.run's .rank; not .report, which holds a C handle), so an error crosses
        multiprocessing and process pools as the same class with the same status and message."""
        state = {k: v for k, v in self.__dict__.items()
                 if k not in ("status", "message") and not isinstance(v, _NoCopy)}
        return (type(self), self._init_args(), state)

    def _init_args(self) -> Tuple[Any, ...]:
        """What the constructor takes to make this error again (a subclass with another signature
        overrides it)."""
        return (int(self.status), self.message)


class InvalidArgumentError(Error, ValueError):
    """ACCEL_ERR_INVALID_ARGUMENT: a NULL, a bad value, a shape or dtype mismatch (also a ValueError)."""


class InvalidStateError(Error):
    """ACCEL_ERR_INVALID_STATE: a call at the wrong time (e.g. step before prepare)."""


class ClosedError(InvalidStateError):
    """An object (or the Accelerator it was made from) was used after close()."""

    def __init__(self, message: str) -> None:
        super().__init__(Status.INVALID_STATE, message)

    def _init_args(self) -> Tuple[Any, ...]:
        return (self.message,)


class OutOfMemoryError(Error, MemoryError):
    """ACCEL_ERR_OUT_OF_MEMORY: a host or (simulated) device allocation failed (also a MemoryError)."""


class CommunicationError(Error):
    """ACCEL_ERR_COMMUNICATION: a collective or a peer failed."""


class TimeoutError(Error, builtins.TimeoutError):  # noqa: A001 (accel.TimeoutError)
    """ACCEL_ERR_TIMEOUT: an operation did not complete in time (also the builtin TimeoutError)."""


class IOError(Error, OSError):  # noqa: A001 (accel.IOError)
    """ACCEL_ERR_IO: a file is missing, unreadable or unwritable (also an OSError)."""


class FormatError(Error):
    """ACCEL_ERR_FORMAT: a file or value has the wrong format."""


class UnsupportedError(Error):
    """ACCEL_ERR_UNSUPPORTED: the build or machine lacks a capability."""


class InternalError(Error):
    """ACCEL_ERR_INTERNAL: a bug in accel or libtorch (or a simulated rank's Python exception)."""


class NonFiniteError(Error):
    """ACCEL_ERR_NON_FINITE: a loss or value is NaN or infinite."""


_ERRORS: Dict[int, Type[Error]] = {
    -1: InvalidArgumentError, -2: InvalidStateError, -3: OutOfMemoryError, -4: CommunicationError,
    -5: TimeoutError, -6: IOError, -7: FormatError, -8: UnsupportedError, -9: InternalError,
    -10: NonFiniteError,
}


def error_for(status: int, message: str) -> Error:
    """The exception for a status (accel.Error itself for a code this binding does not know)."""
    return _ERRORS.get(int(status), Error)(status, message)


def status_name(status: int) -> str:
    """The library's name for a status code ("ACCEL_ERR_IO"; "ACCEL_ERR_UNKNOWN" if unknown)."""
    return str(ffi.string(lib.accel_status_name(int(status))).decode())


def _fail(status: int, ctx: Any = ffi.NULL) -> Any:
    """Raises the error of a failed call. Must run on the thread that made the call, right after
    it: accel_last_error(NULL) is thread-local."""
    message = ffi.string(lib.accel_last_error(ctx)).decode("utf-8", "replace")
    if not message:
        message = f"{status_name(status)} (the library gave no message)"
    raise error_for(status, message)


def _check(status: int, ctx: Any = ffi.NULL) -> None:
    """Raises the error of a call that returned `status` (nothing for ACCEL_OK); ctx as for _fail."""
    if status:
        _fail(status, ctx)


def _cpath(path: Union[str, bytes, "os.PathLike[Any]"], what: str = "path") -> bytes:
    """A path for C: refuses an embedded NUL byte (C would silently use a shorter path)."""
    raw = os.fsencode(path)
    if b"\0" in raw:
        raise InvalidArgumentError(Status.INVALID_ARGUMENT, f"{what} contains a NUL byte: {path!r}")
    return raw


def _cstr(text: Union[str, bytes], what: str) -> bytes:
    """A string for C (UTF-8): refuses an embedded NUL byte (C would silently see a shorter string)."""
    raw = text.encode("utf-8") if isinstance(text, str) else bytes(text)
    if b"\0" in raw:
        raise InvalidArgumentError(Status.INVALID_ARGUMENT, f"{what} contains a NUL byte: {text!r}")
    return raw


def _int(value: Any, what: str) -> int:
    """int(value) for a C integer argument; InvalidArgumentError (not a builtin OverflowError or
    ValueError) when it is not a number (infinity, NaN, "x"). The range is checked where C gets it."""
    try:
        return int(value)
    except (OverflowError, ValueError) as exc:
        raise InvalidArgumentError(Status.INVALID_ARGUMENT,
                                   f"{what}: {reprlib.repr(value)} is not an integer ({exc})") from None


_FIELD_KINDS: Dict[str, Dict[str, Tuple[str, str]]] = {}


def _fill(opts: Any, **fields: Any) -> None:
    """Sets fields of an options struct (an `accel_xxx *`), converting each value as its C type
    wants (int() for integers and enums, float() for floating point); a value C cannot hold
    (seed=-1 for a uint64_t, 2**64, infinity for an integer) is InvalidArgumentError naming the
    struct and the field, never a builtin OverflowError."""
    ctype = ffi.typeof(opts).item
    kinds = _FIELD_KINDS.get(ctype.cname)
    if kinds is None:
        kinds = {}
        for name, field in ctype.fields:
            t = field.type
            if t.kind == "primitive" and t.cname in ("float", "double"):
                kinds[name] = ("float", t.cname)
            elif t.kind in ("primitive", "enum"):
                kinds[name] = ("int", t.cname)
            else:
                kinds[name] = ("", t.cname)
        _FIELD_KINDS[ctype.cname] = kinds
    for name, value in fields.items():
        kind, cname = kinds[name]
        try:
            if kind == "float":
                value = float(value)
            elif kind == "int":
                value = int(value)
            setattr(opts, name, value)
        except (OverflowError, ValueError) as exc:
            raise InvalidArgumentError(
                Status.INVALID_ARGUMENT,
                f"{ctype.cname}.{name}: {reprlib.repr(value)} does not fit in {cname} ({exc})") from None


def _overflow(fn: Any, exc: BaseException) -> InvalidArgumentError:
    """The error for an integer argument C cannot hold (cffi's OverflowError at the call)."""
    name = next((k for k, v in vars(lib).items() if v is fn), "accel")
    return InvalidArgumentError(Status.INVALID_ARGUMENT, f"{name}: an integer argument is out of range ({exc})")


def _log_writers(writers: Union[LogWriter, int, str, Sequence[Union[LogWriter, int, str]], None]) -> int:
    """accel_tracker_options.writers from None (0: ACCEL_LOG_WITH, else jsonl), a LogWriter or
    int of flags, a name ("jsonl", "csv", "tensorboard", "all"; comma-separated as in
    ACCEL_LOG_WITH) or an iterable of names and flags."""
    if writers is None:
        return 0
    if isinstance(writers, (str, int)):
        items: List[Any] = [writers]
    elif isinstance(writers, (bytes, bytearray)) or not hasattr(writers, "__iter__"):
        items = [writers]  # refused below
    else:
        items = list(writers)
    flags = 0
    for item in items:
        if isinstance(item, str):
            for name in item.split(","):
                key = name.strip().lower()
                if key == "all":
                    flags |= int(LogWriter.JSONL | LogWriter.CSV | LogWriter.TENSORBOARD)
                elif key.upper() in LogWriter.__members__:
                    flags |= int(LogWriter[key.upper()])
                else:
                    raise InvalidArgumentError(Status.INVALID_ARGUMENT,
                                               f"writers: {name.strip()!r} is not one of jsonl, csv, tensorboard, all")
        elif isinstance(item, int) and not isinstance(item, bool) and 0 <= item <= 0xFFFFFFFF:
            flags |= int(item)  # bits outside the three: the library names them
        else:
            raise InvalidArgumentError(Status.INVALID_ARGUMENT, f"writers: {item!r} is no LogWriter")
    if not flags:
        raise InvalidArgumentError(Status.INVALID_ARGUMENT,
                                   f"writers: {writers!r} names no writer (None: ACCEL_LOG_WITH, else jsonl)")
    return flags


# ------------------------------------------------------------------------------------------
# numpy (optional) and buffers
# ------------------------------------------------------------------------------------------

_numpy: Any = None
_pin_lock = threading.Lock()  # guards every Tensor's pin count (held only for a few bytecodes)


def _np(required_for: Optional[str] = None) -> Any:
    """numpy, imported on first need; None when it is not installed and not required."""
    global _numpy
    if _numpy is None:
        try:
            import numpy
        except ImportError:
            if required_for is None:
                return None
            raise ImportError(f"{required_for} needs numpy: pip install 'accel[numpy]'") from None
        _numpy = numpy
    return _numpy


_NP_NAMES = {DType.FLOAT32: "float32", DType.FLOAT16: "float16", DType.INT64: "int64", DType.INT32: "int32",
             DType.UINT8: "uint8", DType.FLOAT64: "float64", DType.INT8: "int8"}
_SIZES = {DType.FLOAT32: 4, DType.FLOAT16: 2, DType.BFLOAT16: 2, DType.INT64: 8, DType.INT32: 4,
          DType.UINT8: 1, DType.FLOAT64: 8, DType.INT8: 1}
# struct-module format characters (buffer protocol) -> dtype, by (char, itemsize)
_FORMATS = {("f", 4): DType.FLOAT32, ("d", 8): DType.FLOAT64, ("e", 2): DType.FLOAT16,
            ("q", 8): DType.INT64, ("l", 8): DType.INT64, ("i", 4): DType.INT32, ("l", 4): DType.INT32,
            ("B", 1): DType.UINT8, ("c", 1): DType.UINT8, ("b", 1): DType.INT8}


def dtype_size(dtype: Union[DType, str, int]) -> int:
    """Bytes per element of a dtype (accel_dtype_size)."""
    return int(lib.accel_dtype_size(_enum(DType, dtype, "dtype")))


def _dtype_of_numpy(dt: Any) -> DType:
    for code, name in _NP_NAMES.items():
        if dt == _numpy.dtype(name):
            return code
    raise InvalidArgumentError(Status.INVALID_ARGUMENT,
                               f"numpy dtype {dt} has no accel dtype (float32, float16, float64, int64, int32, uint8, int8)")


def _to_bfloat16_bits(arr: Any) -> Any:
    """float array -> uint16 bfloat16 bits, rounded to nearest even (NaN kept NaN)."""
    np = _numpy
    f = np.ascontiguousarray(arr, dtype=np.float32)
    u = f.view(np.uint32).astype(np.uint64)
    rounded = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
    nan = np.isnan(f)
    if nan.any():
        rounded[nan] = 0x7FC0
    return rounded


ShapeLike = Sequence[int]
ArrayLike = Any  # a Tensor, a numpy array, a buffer (memoryview, bytes, array.array), a scalar or a list


# ------------------------------------------------------------------------------------------
# Tensors
# ------------------------------------------------------------------------------------------


class _NoCopy:
    """For the objects that own a C handle and cannot be duplicated (a context, a model, ...):
    copy.copy, copy.deepcopy and pickle raise a TypeError naming the alternative, instead of
    duplicating the handle (which would free it twice)."""

    __slots__ = ()
    _copy_hint = ""

    def _refuse_copy(self) -> NoReturn:
        raise TypeError(f"accel.{type(self).__name__} cannot be copied or pickled (it owns a C handle): "
                        f"{self._copy_hint}")

    def __copy__(self) -> NoReturn:
        self._refuse_copy()

    def __deepcopy__(self, memo: Any) -> NoReturn:
        self._refuse_copy()

    def __reduce_ex__(self, protocol: Any) -> NoReturn:
        self._refuse_copy()

    def __reduce__(self) -> NoReturn:
        self._refuse_copy()


class Tensor:
    """A typed n-dimensional array owned by accel (host or device memory).

    Tensors are independent of any Accelerator; one that came out of a model, a loss or a loader
    remembers its Accelerator so that accel.cross_entropy(logits, y) needs no accelerator=.
    Release with close() / `with` (or let it be garbage-collected).

    copy.copy(t) and copy.deepcopy(t) are new tensors holding a copy of the data (same dtype,
    shape and bytes); pickle stores the bytes, dtype and shape (unpickled: a host tensor)."""

    __slots__ = ("_h", "_acc", "_shape", "_pins", "_closing", "__weakref__")
    _h: Any
    _acc: Optional["Accelerator"]
    _shape: Optional[Tuple[int, ...]]
    _pins: int
    _closing: bool

    def __init__(self) -> None:
        raise TypeError("make tensors with accel.tensor(data, dtype=None, shape=None)")

    @classmethod
    def _wrap(cls, handle: Any, acc: Optional["Accelerator"] = None) -> "Tensor":
        t = object.__new__(cls)
        t._h = handle
        t._acc = acc
        t._shape = None
        t._pins = 0
        t._closing = False
        return t

    def _call(self, fn: Callable[..., int], *args: Any) -> None:
        """fn(handle, *args) with the tensor pinned (_pin_all); raises the error (thread-local message)."""
        one = (self,)
        h = _pin_all(one)[0]
        try:
            st = fn(h, *args)
        finally:
            _unpin_all(one)
        _check(st)

    def close(self) -> None:
        """Releases the tensor (accel_tensor_destroy). Idempotent. While another thread's call
        is using it, the release happens when that call returns."""
        if self._h is None:  # already released (e.g. the finalizer after close())
            return
        with _pin_lock:
            if self._pins:
                self._closing = True
                return
            h, self._h = self._h, None
        if h is not None:
            lib.accel_tensor_destroy(h)

    def __del__(self) -> None:
        try:
            self.close()
        except BaseException:  # never raise from a finalizer (e.g. at interpreter shutdown)
            pass

    def __enter__(self) -> "Tensor":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    @property
    def closed(self) -> bool:
        """True once close() was called."""
        return self._h is None or self._closing

    def _get(self, fn: Callable[..., int], ctype: str) -> Any:
        out = ffi.new(ctype)
        self._call(fn, out)
        return out[0]

    @property
    def dtype(self) -> DType:
        """The element type (accel_tensor_dtype)."""
        return DType(self._get(lib.accel_tensor_dtype, "accel_dtype *"))

    @property
    def ndim(self) -> int:
        """The number of dimensions (accel_tensor_ndim)."""
        return int(self._get(lib.accel_tensor_ndim, "size_t *"))

    @property
    def shape(self) -> Tuple[int, ...]:
        """The shape as a tuple (accel_tensor_shape)."""
        if self._shape is None:
            n = self.ndim
            out = ffi.new("int64_t[]", max(n, 1))
            self._call(lib.accel_tensor_shape, out, n)
            self._shape = tuple(int(out[i]) for i in range(n))
        return self._shape

    @property
    def numel(self) -> int:
        """The number of elements (accel_tensor_numel)."""
        return int(self._get(lib.accel_tensor_numel, "int64_t *"))

    @property
    def nbytes(self) -> int:
        """The number of bytes numpy()/copy_to() write (accel_tensor_nbytes)."""
        return int(self._get(lib.accel_tensor_nbytes, "size_t *"))

    def __len__(self) -> int:
        """The size of the first dimension (TypeError for a 0-d tensor)."""
        shape = self.shape
        if not shape:
            raise TypeError("len() of a 0-d tensor")
        return shape[0]

    def item(self) -> float:
        """The single element as a Python float (accel_tensor_item)."""
        return float(self._get(lib.accel_tensor_item, "double *"))

    def numpy(self, dtype: Union[DType, str, None] = None) -> "np.ndarray":
        """A new numpy array that accel writes straight into (no intermediate copy).

        dtype=None keeps the tensor's dtype, except bfloat16 (numpy has none): read as float32.
        Another dtype converts in C (accel_tensor_copy_to_host_as)."""
        numpy = _np("Tensor.numpy()")
        own = self.dtype
        want = (DType.FLOAT32 if own == DType.BFLOAT16 else own) if dtype is None else _enum(DType, dtype, "dtype")
        if want == DType.BFLOAT16:
            raise InvalidArgumentError(Status.INVALID_ARGUMENT,
                                       "numpy has no bfloat16: read the tensor as float32 (the default)")
        arr: "np.ndarray" = numpy.empty(self.shape, dtype=_NP_NAMES[want])
        dst = ffi.from_buffer(arr, require_writable=True)
        if want == own:
            self._call(lib.accel_tensor_copy_to_host, dst, arr.nbytes)
        else:
            self._call(lib.accel_tensor_copy_to_host_as, int(want), dst, arr.nbytes)
        return arr

    def copy_to(self, buffer: Any, dtype: Union[DType, str, None] = None) -> None:
        """Copies the elements (row-major) into a writable buffer (bytearray, memoryview, array.array,
        numpy array) of exactly numel * dtype size bytes; dtype converts (default: the tensor's)."""
        try:
            dst = ffi.from_buffer(buffer, require_writable=True)
        except TypeError as exc:
            raise InvalidArgumentError(Status.INVALID_ARGUMENT, f"copy_to: {exc}") from None
        size = ffi.sizeof(dst)
        if dtype is None:
            self._call(lib.accel_tensor_copy_to_host, dst, size)
        else:
            self._call(lib.accel_tensor_copy_to_host_as, int(_enum(DType, dtype, "dtype")), dst, size)

    def __array__(self, dtype: Any = None, copy: Optional[bool] = None) -> "np.ndarray":
        """numpy's protocol: np.asarray(tensor) is tensor.numpy() (converted to `dtype` if given)."""
        arr = self.numpy()
        return arr if dtype is None else arr.astype(dtype, copy=False)

    def tolist(self) -> Any:
        """The elements as nested Python lists (through numpy)."""
        return self.numpy().tolist()

    def __float__(self) -> float:
        return self.item()

    def _raw(self) -> Tuple[DType, Tuple[int, ...], bytearray]:
        """(dtype, shape, a copy of the bytes), read as one pinned use of the tensor."""
        one = (self,)
        h = _pin_all(one)[0]
        try:
            dtype_out = ffi.new("accel_dtype *")
            _check(lib.accel_tensor_dtype(h, dtype_out))
            ndim = ffi.new("size_t *")
            _check(lib.accel_tensor_ndim(h, ndim))
            dims = ffi.new("int64_t[]", max(int(ndim[0]), 1))
            _check(lib.accel_tensor_shape(h, dims, ndim[0]))
            nbytes = ffi.new("size_t *")
            _check(lib.accel_tensor_nbytes(h, nbytes))
            data = bytearray(int(nbytes[0]))
            if data:
                _check(lib.accel_tensor_copy_to_host(h, ffi.from_buffer(data, require_writable=True), len(data)))
        finally:
            _unpin_all(one)
        return DType(dtype_out[0]), tuple(int(dims[i]) for i in range(int(ndim[0]))), data

    def _clone(self) -> "Tensor":
        dtype, shape, data = self._raw()
        t = _tensor_from_raw(data, dtype, shape)
        t._acc = self._acc
        return t

    def __copy__(self) -> "Tensor":
        """A new tensor with a copy of the data (tensors are values: a copy never shares the handle)."""
        return self._clone()

    def __deepcopy__(self, memo: Any) -> "Tensor":
        """A new tensor with a copy of the data."""
        return self._clone()

    def __reduce__(self) -> Tuple[Any, ...]:
        """Pickles as (bytes, dtype, shape): unpickling makes a host tensor with the same data."""
        dtype, shape, data = self._raw()
        return (_tensor_from_raw, (bytes(data), int(dtype), shape))

    def __repr__(self) -> str:
        if self._h is None:
            return "<accel.Tensor closed>"
        return f"<accel.Tensor shape={self.shape} dtype={self.dtype.name.lower()}>"


def _tensor_from_raw(data: Union[bytes, bytearray], dtype: Union[DType, int], shape: Sequence[int]) -> Tensor:
    """A host tensor of `dtype` and `shape` holding `data`'s bytes (Tensor copies and unpickling);
    the size is checked before C reads anything."""
    code = _enum(DType, dtype, "dtype")
    shp = tuple(_int(d, "shape") for d in shape)
    if any(d < 0 for d in shp) or len(data) != _shape_numel(shp) * _SIZES[code]:
        raise InvalidArgumentError(Status.INVALID_ARGUMENT,
                                   f"{len(data)} bytes are not a {code.name.lower()} tensor of shape {shp}")
    c_shape = ffi.new("int64_t[]", list(shp) or [0])
    out = ffi.new("accel_tensor **")
    _check(lib.accel_tensor_create(int(code), c_shape, len(shp), ffi.from_buffer(data) if data else ffi.NULL, out))
    return Tensor._wrap(out[0])


def _byteswap(data: bytes, itemsize: int) -> bytearray:
    """`data` with the bytes of each `itemsize`-byte element reversed (byte order conversion)."""
    out = bytearray(len(data))
    for j in range(itemsize):
        out[j::itemsize] = data[itemsize - 1 - j::itemsize]
    return out


def _shape_numel(shape: Sequence[int]) -> int:
    n = 1
    for d in shape:
        n *= int(d)
    return n


def tensor(data: ArrayLike, dtype: Union[DType, str, None] = None, shape: Optional[ShapeLike] = None) -> Tensor:
    """A new host tensor holding a copy of `data` (accel_tensor_create copies).

    data: a numpy array (non-contiguous ones are made contiguous), any buffer-protocol object
    (memoryview, bytes, bytearray, array.array), a Python scalar or list, or a Tensor.
    dtype: inferred from the numpy dtype or the buffer's format when None; with numpy, other
    dtypes are converted (bfloat16 rounds to nearest even); a raw byte buffer (format 'B') given
    another dtype is reinterpreted. shape: defaults to the data's shape; it must hold as many
    elements as the data."""
    if isinstance(data, Tensor):
        data = data.numpy()  # a copy (bfloat16 goes through float32)
    want = None if dtype is None else _enum(DType, dtype, "dtype")
    np = _np()
    buf: Any
    if np is not None and not isinstance(data, (bytes, bytearray, memoryview)) and (
            isinstance(data, (np.ndarray, np.generic, list, tuple, int, float))):
        arr = np.asarray(data)
        if not isinstance(data, (np.ndarray, np.generic)):  # Python numbers: torch's defaults
            if arr.dtype.kind == "f":
                arr = arr.astype(np.float32)
            elif arr.dtype.kind in "iub":
                arr = arr.astype(np.int64)
        if arr.dtype == np.bool_:
            arr = arr.astype(np.uint8)
        elif not arr.dtype.isnative:  # another byte order (">f4" on x86): converted to the machine's
            arr = arr.astype(arr.dtype.newbyteorder("="))
        code = _dtype_of_numpy(arr.dtype) if want is None else want
        if code == DType.BFLOAT16:
            buf = _to_bfloat16_bits(arr)
        else:
            buf = np.ascontiguousarray(arr, dtype=_NP_NAMES[code])
        shp = tuple(arr.shape)
    else:
        numbers_shape: Optional[Tuple[int, ...]] = None
        if isinstance(data, (int, float)) or (isinstance(data, (list, tuple)) and
                                              all(isinstance(v, (int, float)) for v in data)):
            import array  # Python numbers without numpy: through array.array
            values = [data] if isinstance(data, (int, float)) else list(data)
            numbers_shape = () if isinstance(data, (int, float)) else (len(values),)
            is_float = any(isinstance(v, float) for v in values)
            if want is None:
                want = DType.FLOAT32 if is_float else DType.INT64
            typecode = {DType.FLOAT32: "f", DType.FLOAT64: "d", DType.INT64: "q", DType.INT32: "i",
                        DType.UINT8: "B", DType.INT8: "b"}.get(want)
            if typecode is None:
                raise InvalidArgumentError(Status.INVALID_ARGUMENT,
                                           f"converting Python numbers to {want.name.lower()} needs numpy")
            data = array.array(typecode, values)
        try:
            mv = memoryview(data)
        except TypeError:
            raise InvalidArgumentError(
                Status.INVALID_ARGUMENT,
                f"cannot make a tensor from {type(data).__name__}: pass a numpy array (pip install 'accel[numpy]'), "
                "a flat list of numbers or a buffer (memoryview, bytes, array.array)") from None
        form, itemsize, elem_shape = mv.format, mv.itemsize, tuple(mv.shape or ())
        fmt = form.lstrip("@=<>!")
        code_of_fmt = _FORMATS.get((fmt, itemsize))
        if form.startswith((">", "!") if sys.byteorder == "little" else ("<",)):  # another byte order
            if code_of_fmt is None:
                raise InvalidArgumentError(Status.INVALID_ARGUMENT, f"buffer format {form!r} has no accel dtype")
            mv = memoryview(_byteswap(mv.tobytes(), itemsize))  # the machine's order, flat, row-major
        elif not mv.c_contiguous:
            mv = memoryview(mv.tobytes())  # a contiguous copy (flat bytes, row-major)
        if want is None:
            if code_of_fmt is None:
                raise InvalidArgumentError(Status.INVALID_ARGUMENT,
                                           f"buffer format {form!r} has no accel dtype: pass dtype=")
            want = code_of_fmt
        if code_of_fmt == want:
            shp = elem_shape if numbers_shape is None else numbers_shape
        elif fmt in ("B", "c", "b") or code_of_fmt is None or (want == DType.BFLOAT16 and itemsize == 2):
            # raw bytes reinterpreted as `want` (e.g. bfloat16 bits in a uint16 buffer)
            if mv.nbytes % _SIZES[want]:
                raise InvalidArgumentError(Status.INVALID_ARGUMENT,
                                           f"{mv.nbytes} bytes are not a whole number of {want.name.lower()} elements")
            shp = (mv.nbytes // _SIZES[want],)
        else:
            raise InvalidArgumentError(Status.INVALID_ARGUMENT,
                                       f"a buffer of format {form!r} cannot be converted to {want.name.lower()} "
                                       "without numpy (pip install 'accel[numpy]')")
        buf = mv
        code = want
    if shape is not None:
        new = tuple(_int(d, "shape") for d in shape)
        if any(d < 0 for d in new):
            raise InvalidArgumentError(Status.INVALID_ARGUMENT, f"shape {new} has a negative dimension")
        if _shape_numel(new) != _shape_numel(shp):
            raise InvalidArgumentError(
                Status.INVALID_ARGUMENT,
                f"shape {new} holds {_shape_numel(new)} elements, the data has {_shape_numel(shp)}")
        shp = new
    nbytes = _shape_numel(shp) * _SIZES[code]
    src = ffi.from_buffer(buf) if nbytes else ffi.NULL
    if nbytes and ffi.sizeof(src) != nbytes:  # never let C read past the data
        raise InvalidArgumentError(Status.INVALID_ARGUMENT,
                                   f"the data has {ffi.sizeof(src)} bytes, shape {shp} of {code.name.lower()} needs {nbytes}")
    try:
        c_shape = ffi.new("int64_t[]", list(shp) or [0])
    except OverflowError as exc:
        raise InvalidArgumentError(Status.INVALID_ARGUMENT, f"shape {shp} does not fit int64_t ({exc})") from None
    out = ffi.new("accel_tensor **")
    _check(lib.accel_tensor_create(int(code), c_shape, len(shp), src, out))
    return Tensor._wrap(out[0])


def _pin_all(tensors: Sequence[Tensor]) -> List[Any]:
    """The tensors' handles, each pinned for a C call (one acquisition of the pin lock for all):
    a close() from another thread meanwhile is deferred until _unpin_all (the ABI: a tensor must
    not be destroyed while another thread uses it). ClosedError, nothing pinned, when one is
    closed."""
    with _pin_lock:
        for t in tensors:
            if t._h is None or t._closing:
                raise ClosedError("this Tensor is closed")
        for t in tensors:
            t._pins += 1
        return [t._h for t in tensors]


def _unpin_all(tensors: Sequence[Tensor]) -> None:
    doomed = []
    with _pin_lock:
        for t in tensors:
            t._pins -= 1
            if t._closing and t._pins == 0 and t._h is not None:
                doomed.append(t._h)
                t._h = None
    for h in doomed:  # closed by another thread during the call: released now
        lib.accel_tensor_destroy(h)


class _Args:
    """The arguments of one C call, as `with _Args(args) as c_args:`. Tensors become their handles,
    pinned for the call (see _pin_all); array-likes in the positions listed in `convert` become
    temporary tensors, released afterwards; Model/Optimizer/Scheduler/DataLoader become their
    handles (checked open: the caller holds their Accelerator's lock); the rest pass as they are."""

    __slots__ = ("values", "_pinned", "_temps")

    def __init__(self, args: Sequence[Any], convert: Sequence[int] = ()) -> None:
        self._pinned: List[Tensor] = []
        self._temps: List[Tensor] = []
        values: List[Any] = []
        self.values = values
        try:
            tensors = []
            for i, a in enumerate(args):
                if convert and i in convert and not isinstance(a, Tensor):
                    a = tensor(a)
                    self._temps.append(a)
                if isinstance(a, Tensor):
                    tensors.append((len(values), a))
                    values.append(None)
                elif isinstance(a, _Child):
                    values.append(a._p()[1])
                else:
                    values.append(a)
            if tensors:
                handles = _pin_all([t for _, t in tensors])
                self._pinned = [t for _, t in tensors]
                for (i, _), h in zip(tensors, handles):
                    values[i] = h
        except BaseException:
            self.__exit__()
            raise

    def __enter__(self) -> List[Any]:
        return self.values

    def __exit__(self, *exc: Any) -> None:
        if self._pinned:
            _unpin_all(self._pinned)
        for t in self._temps:
            t.close()


# ------------------------------------------------------------------------------------------
# Objects made from an Accelerator
# ------------------------------------------------------------------------------------------


def _destroy_handle(kind: str, handle: Any) -> None:
    if kind == "model":
        lib.accel_model_destroy(handle)
    elif kind == "optimizer":
        lib.accel_optimizer_destroy(handle)
    elif kind == "scheduler":
        lib.accel_scheduler_destroy(handle)
    elif kind == "dataloader":
        lib.accel_dataloader_destroy(handle)


class _Child(_NoCopy):
    """Shared lifetime rules of Model, Optimizer, Scheduler and DataLoader.

    - close() is idempotent; use after close, or after the Accelerator was closed, is ClosedError.
    - accel_prepare borrows the object: closing it while its Accelerator is open raises
      InvalidStateError (close the Accelerator first; it releases what it prepared).
    - An object another open object depends on (a model with an optimizer, an optimizer with a
      scheduler) refuses close() the same way: close the dependent first.
    - A finalizer never destroys something the C context may still use: it leaves it to the
      Accelerator's close()."""

    _order: int = 0  # release order when the Accelerator closes: schedulers, optimizers, loaders, models
    _destroy: str = ""
    _copy_hint = ("make a new one from the Accelerator; acc.save_state(dir) and acc.load_state(dir) carry the "
                  "training state (models, optimizers, schedulers, loaders' positions) to new objects")

    def __init__(self, acc: "Accelerator", create: Callable[..., int], *args: Any,
                 parent: Optional["_Child"] = None) -> None:
        """Creates the C object with create(ctx, *args, out) (parent: the object it uses, whose
        handle is among args) and registers it with the Accelerator."""
        self._h: Any = None
        self._acc = acc
        self._parent = parent
        self._prepared = False
        self._deps = 0
        out = ffi.new(f"accel_{self._destroy} **")
        with acc._lock:
            acc._call(create, *args, out)
            self._h = out[0]
            if parent is not None:
                parent._deps += 1
            self._key = acc._adopt(self)

    def _p(self) -> Tuple[Any, Any]:
        """(context, handle); ClosedError when either is closed. Call it holding the lock."""
        acc = self._acc
        if acc._ctx is None and acc._owned:
            raise ClosedError(f"the Accelerator this {type(self).__name__} was made from is closed")
        ctx = acc._c()
        if self._h is None:
            raise ClosedError(f"this {type(self).__name__} is closed")
        return ctx, self._h

    def _call(self, fn: Callable[..., int], *args: Any, with_ctx: bool = True) -> None:
        """fn(ctx, handle, *args) (or fn(handle, *args) for a function that takes no context),
        holding the Accelerator's lock; raises the error of a failure."""
        with self._acc._lock:
            ctx, h = self._p()
            with _Args(args) as c_args:
                try:
                    st = fn(ctx, h, *c_args) if with_ctx else fn(h, *c_args)
                except OverflowError as exc:  # an int C cannot hold: refused by cffi before the call
                    raise _overflow(fn, exc) from None
            _check(st, ctx if with_ctx else ffi.NULL)

    def _get(self, fn: Callable[..., int], ctype: str) -> Any:
        """out[0] of fn(handle, out), a function that takes no context."""
        out = ffi.new(ctype)
        self._call(fn, out, with_ctx=False)
        return out[0]

    @property
    def closed(self) -> bool:
        """True once this object or its Accelerator was closed."""
        return self._h is None or self._acc._ctx is None

    @property
    def accelerator(self) -> "Accelerator":
        """The Accelerator this object was made from."""
        return self._acc

    def close(self) -> None:
        """Releases the object. Idempotent. Refused (InvalidStateError) while its Accelerator is
        open and has prepared it, or while an open optimizer/scheduler made from it exists.
        Waits for a call another thread is making on the same Accelerator."""
        with self._acc._lock:
            if self._h is None:
                return
            if self._acc._ctx is not None:
                name = type(self).__name__
                if self._prepared:
                    raise InvalidStateError(
                        Status.INVALID_STATE,
                        f"{name}.close: the Accelerator prepared this {name} and borrows it: close the "
                        "Accelerator first (it releases everything it prepared)")
                if self._deps:
                    raise InvalidStateError(
                        Status.INVALID_STATE,
                        f"{name}.close: an open {'optimizer' if isinstance(self, Model) else 'scheduler'} "
                        f"uses this {name}: close it first")
            self._release()

    def _release(self) -> None:
        h, self._h = self._h, None
        if h is None:
            return
        if self._acc._records.pop(self._key, None) is not None:
            _destroy_handle(self._destroy, h)
        if self._parent is not None:
            self._parent._deps -= 1

    def __del__(self) -> None:
        try:
            if self._h is None:
                return
            acc = self._acc
            if not acc._lock.acquire(blocking=False):
                return  # another thread is using the context: the Accelerator releases it when it closes
            try:
                if acc._ctx is not None and (self._prepared or self._deps or
                                             threading.get_ident() != acc._thread):
                    return  # the Accelerator releases it when it closes
                self._release()
            finally:
                acc._lock.release()
        except BaseException:
            pass

    def __enter__(self) -> Any:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


class Model(_Child):
    """A model: the built-in MLP (Model.mlp) or a TorchScript module (Model.load_torchscript).
    Callable: `logits = model(x)` runs the forward (x: a Tensor or anything accel.tensor takes)."""

    _order = 3
    _destroy = "model"
    _copy_hint = ("save it with acc.save_state(dir) and load that into a new model with acc.load_state(dir); "
                  "acc.save_model(model, path) writes its weights (a causal LM: model.save_pretrained(dir), "
                  "loaded by accel.Model.from_pretrained(acc, dir)); acc.inference(model) makes an inference copy")

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        raise TypeError("use accel.Model.mlp(accelerator, layer_sizes), accel.Model.load_torchscript(accelerator, path), "
                        "accel.Model.from_pretrained(accelerator, dir) or accel.Model.from_config(accelerator, config)")

    @classmethod
    def mlp(cls, accelerator: "Accelerator", layer_sizes: Sequence[int], *,
            activation: Union[Activation, str] = "relu", dropout: float = 0.0, bias: bool = True) -> "Model":
        """The built-in multi-layer perceptron (accel_model_create_mlp): Linear layers of the given
        sizes (input, hidden..., output) with `activation` (and dropout) between them."""
        opts = ffi.new("accel_mlp_options *")
        _check(lib.accel_mlp_options_init(opts, lib.ACCEL_MLP_OPTIONS_VERSION))
        values = [_int(s, "layer_sizes") for s in layer_sizes]
        try:
            sizes = ffi.new("int64_t[]", values or [0])
        except OverflowError as exc:
            raise InvalidArgumentError(Status.INVALID_ARGUMENT, f"layer_sizes: {values} do not fit int64_t ({exc})") from None
        opts.layer_sizes = sizes
        opts.num_layer_sizes = len(layer_sizes)
        _fill(opts, activation=_enum(Activation, activation, "activation"))
        _fill(opts, dropout=dropout)
        opts.bias = 1 if bias else 0
        return cls._make(accelerator, lib.accel_model_create_mlp, opts)

    @classmethod
    def load_torchscript(cls, accelerator: "Accelerator", path: Union[str, "os.PathLike[str]"]) -> "Model":
        """Loads a module saved by torch.jit.save (accel_model_load_torchscript)."""
        return cls._make(accelerator, lib.accel_model_load_torchscript, _cpath(path))

    @staticmethod
    def _lm_options(dtype: Union[DType, str], gradient_checkpointing: bool) -> Any:
        opts = ffi.new("accel_lm_options *")
        _check(lib.accel_lm_options_init(opts, lib.ACCEL_LM_OPTIONS_VERSION))
        _fill(opts, dtype=_enum(DType, dtype, "dtype"))
        opts.gradient_checkpointing = 1 if gradient_checkpointing else 0
        return opts

    @classmethod
    def from_pretrained(cls, accelerator: "Accelerator", directory: Union[str, "os.PathLike[str]"], *,
                        dtype: Union[DType, str] = "float32", gradient_checkpointing: bool = False) -> "Model":
        """A GPT-2 or Llama causal LM from a Hugging Face directory (config.json and
        model.safetensors or a sharded index), as transformers' from_pretrained
        (accel_model_load_pretrained). dtype: "float32" or "bfloat16" parameters."""
        opts = cls._lm_options(dtype, gradient_checkpointing)
        return cls._make(accelerator, lib.accel_model_load_pretrained, _cpath(directory, "directory"), opts)

    @classmethod
    def from_config(cls, accelerator: "Accelerator", config: Union[str, "os.PathLike[str]"], *,
                    dtype: Union[DType, str] = "float32", gradient_checkpointing: bool = False) -> "Model":
        """A causal LM with random weights from a config.json (the file or its directory), drawn
        from the Accelerator's seed as transformers initialises them (accel_model_create_lm)."""
        opts = cls._lm_options(dtype, gradient_checkpointing)
        return cls._make(accelerator, lib.accel_model_create_lm, _cpath(config, "config"), opts)

    @classmethod
    def _make(cls, acc: "Accelerator", create: Callable[..., int], *args: Any) -> "Model":
        m = object.__new__(cls)
        _Child.__init__(m, acc, create, *args)
        m._training = True
        return m

    @overload
    def __call__(self, *inputs: ArrayLike) -> Tensor: ...
    @overload
    def __call__(self, *, input_ids: ArrayLike, attention_mask: Optional[ArrayLike] = None,
                 labels: Optional[ArrayLike] = None) -> "CausalLMOutput": ...

    def __call__(self, *inputs: Any, **kwargs: Any) -> Any:
        """model(x): the forward (see forward). A causal LM also takes transformers' keywords:
        model(input_ids=..., attention_mask=..., labels=...) returns a CausalLMOutput (see lm)."""
        if kwargs:
            if inputs:
                raise TypeError("pass the inputs either positionally or as input_ids=, attention_mask=, labels=")
            return self.lm(**kwargs)
        return self.forward(*inputs)

    def lm(self, input_ids: ArrayLike, attention_mask: Optional[ArrayLike] = None,
           labels: Optional[ArrayLike] = None) -> "CausalLMOutput":
        """A causal LM's forward and loss (accel_lm_forward): logits [batch, seq, vocab]; with
        labels (input_ids with -100 where padded; shifted here, as in transformers) the mean
        loss over the real targets and their number. Backpropagated with
        Accelerator.backward, the loss is a token mean: the step's gradients are those of the
        mean over every real target of the global batch (all micro-batches, all processes)."""
        acc = self._acc
        logits = ffi.new("accel_tensor **")
        loss = ffi.new("accel_tensor **")
        tokens = ffi.new("int64_t *")
        args = [input_ids, attention_mask, labels]
        with acc._lock:
            ctx, h = self._p()
            with _Args([a for a in args if a is not None], convert=range(3)) as handles:
                it = iter(handles)
                c = [next(it) if a is not None else ffi.NULL for a in args]
                st = lib.accel_lm_forward(ctx, h, c[0], c[1], c[2], logits,
                                          loss if labels is not None else ffi.NULL,
                                          tokens if labels is not None else ffi.NULL)
            _check(st, ctx)
            out_logits = Tensor._wrap(logits[0], acc)
            if labels is None:
                return CausalLMOutput(None, out_logits, 0)
            return CausalLMOutput(Tensor._wrap(loss[0], acc), out_logits, int(tokens[0]))

    def generate(self, input_ids: ArrayLike, max_new_tokens: int = 32, temperature: float = 0.0, top_k: int = 0,
                 eos_token_id: Optional[int] = None, seed: int = 0, use_cache: bool = True) -> Tensor:
        """Continues the prompts input_ids ([batch, seq], no padding) with a causal LM
        (accel_lm_generate): greedy with temperature 0, else sampling (top_k: among the k most
        likely). Returns the prompts followed by the new tokens. Call eval() first (dropout)."""
        opts = ffi.new("accel_generate_options *")
        _check(lib.accel_generate_options_init(opts, lib.ACCEL_GENERATE_OPTIONS_VERSION))
        _fill(opts, max_new_tokens=max_new_tokens)
        _fill(opts, temperature=temperature)
        _fill(opts, top_k=top_k)
        _fill(opts, eos_token_id=-1 if eos_token_id is None else eos_token_id)
        _fill(opts, seed=seed)
        opts.use_cache = 1 if use_cache else 0
        out = ffi.new("accel_tensor **")
        acc = self._acc
        with acc._lock:
            ctx, h = self._p()
            with _Args((input_ids,), convert=(0,)) as (ids,):
                st = lib.accel_lm_generate(ctx, h, ids, opts, out)
            _check(st, ctx)
            return Tensor._wrap(out[0])

    def add_lora(self, r: int = 8, lora_alpha: float = 8.0, lora_dropout: float = 0.0,
                 target_modules: Union[str, Sequence[str], None] = None, use_rslora: bool = False) -> "Model":
        """Adds LoRA adapters (accel_model_add_lora; PEFT's LoraConfig names): the base weights
        freeze and the model's parameters become the adapters. target_modules: names such as
        ["q_proj", "v_proj"], or "all-linear"; None: PEFT's default for the family. Call it
        before making the optimizer and before prepare. Returns the model."""
        opts = ffi.new("accel_lora_options *")
        _check(lib.accel_lora_options_init(opts, lib.ACCEL_LORA_OPTIONS_VERSION))
        _fill(opts, r=r)
        _fill(opts, alpha=lora_alpha)
        _fill(opts, dropout=lora_dropout)
        opts.use_rslora = 1 if use_rslora else 0
        keep = ffi.NULL
        if target_modules is not None:
            names = [target_modules] if isinstance(target_modules, str) else list(target_modules)
            keep = ffi.new("char[]", _cpath(",".join(names), "target_modules"))
        opts.target_modules = keep
        self._call(lib.accel_model_add_lora, opts)
        return self

    def load_adapter(self, directory: Union[str, "os.PathLike[str]"]) -> "Model":
        """Loads a PEFT LoRA adapter directory onto this base model (accel_model_load_adapter),
        as peft.PeftModel.from_pretrained(base, directory). Returns the model."""
        self._call(lib.accel_model_load_adapter, _cpath(directory, "directory"))
        return self

    def save_adapter(self, save_directory: Union[str, "os.PathLike[str]"]) -> str:
        """Writes the LoRA adapters as a PEFT adapter directory (accel_save_adapter; every
        process calls it). Returns the path."""
        path = os.fspath(save_directory)
        self._call(lib.accel_save_adapter, _cpath(path))
        return path

    def save_pretrained(self, save_directory: Union[str, "os.PathLike[str]"]) -> str:
        """Writes a causal LM as a Hugging Face directory (config.json, model.safetensors) that
        transformers loads (accel_save_pretrained; every process calls it). Returns the path."""
        return self._acc.save_pretrained(self, save_directory)

    def forward(self, *inputs: ArrayLike) -> Tensor:
        """accel_model_forward; the output remembers this model's Accelerator (for the losses)."""
        acc = self._acc
        with acc._lock:
            ctx, h = self._p()
            out = acc._out_a
            if len(inputs) == 1 and type(inputs[0]) is Tensor:  # the training loop's case, kept lean
                arr = acc._in_1
                arr[0] = _pin_all(inputs)[0]
                try:
                    st = lib.accel_model_forward(ctx, h, arr, 1, out)
                finally:
                    _unpin_all(inputs)
            else:
                with _Args(inputs, convert=range(len(inputs))) as handles:
                    arr = ffi.new("accel_tensor *[]", handles or [ffi.NULL])
                    st = lib.accel_model_forward(ctx, h, arr, len(handles), out)
            _check(st, ctx)
            return Tensor._wrap(out[0], acc)

    def train(self, mode: bool = True) -> "Model":
        """Training mode (dropout on, graphs recorded) or, with mode=False, evaluation mode."""
        self._call(lib.accel_model_set_training, 1 if mode else 0)
        self._training = bool(mode)
        return self

    def eval(self) -> "Model":
        """Evaluation mode (dropout off, no graph recorded): train(False)."""
        return self.train(False)

    @property
    def training(self) -> bool:
        """True in training mode (models start in it)."""
        return self._training

    def _counts(self) -> Tuple[int, int]:
        nt = ffi.new("size_t *")
        ne = ffi.new("int64_t *")
        self._call(lib.accel_model_num_parameters, nt, ne, with_ctx=False)
        return int(nt[0]), int(ne[0])

    @property
    def num_parameters(self) -> int:
        """The number of scalar parameters."""
        return self._counts()[1]

    @property
    def num_parameter_tensors(self) -> int:
        """The number of parameter tensors."""
        return self._counts()[0]

    def parameter_names(self) -> List[str]:
        """The parameters' names in order ("layers.0.weight", ...)."""
        out = ffi.new("const char **")
        names = []
        for i in range(self.num_parameter_tensors):
            self._call(lib.accel_model_parameter_name, i, out, with_ctx=False)
            names.append(ffi.string(out[0]).decode())
        return names

    def parameter(self, index: int) -> Tensor:
        """A host copy of parameter `index` (fp32 master weights). Under ZeRO a collective."""
        out = ffi.new("accel_tensor **")
        self._call(lib.accel_model_parameter, _int(index, "index"), out)
        return Tensor._wrap(out[0])

    def named_parameters(self) -> List[Tuple[str, "np.ndarray"]]:
        """(name, numpy copy) for every parameter tensor, e.g. ("layers.0.weight", array)."""
        result = []
        for i, name in enumerate(self.parameter_names()):
            with self.parameter(i) as t:
                result.append((name, t.numpy()))
        return result

    def parameters(self) -> List["np.ndarray"]:
        """numpy copies of the parameters (reading, not training: the optimizer owns them)."""
        return [a for _, a in self.named_parameters()]

    def save(self, path: Union[str, "os.PathLike[str]"]) -> str:
        """Writes the weights as safetensors (or TorchScript for a path ending in .pt)."""
        return self._acc.save_model(self, path)


class CausalLMOutput(NamedTuple):
    """What Model.lm returns (transformers' CausalLMOutput fields)."""
    loss: Optional[Tensor]   # the mean over the real targets (None without labels)
    logits: Tensor           # [batch, seq, vocab], fp32
    num_tokens: int          # the real targets the loss averages (0 without labels)


class StepResult(NamedTuple):
    """What accel_step did (accel_step_result)."""
    stepped: bool          # the optimizer really stepped
    skipped: bool          # an fp16 step skipped for inf/NaN gradients
    sync_step: bool        # a gradient-synchronising (real or skipped) step
    loss_scale: float      # the loss scale after the call (1 unless fp16)
    optimizer_steps: int   # real optimizer steps so far
    micro_steps: int       # backward calls counted so far


class Optimizer(_Child):
    """An optimizer over all the parameters of a model. Make one with accel.SGD, accel.AdamW or
    accel.LAMB. step() calls accel_step; zero_grad() is a no-op (accel_step zeroes the gradients)."""

    _order = 1
    _destroy = "optimizer"

    def _create(self, model: Model, kind: str, fields: Dict[str, float]) -> None:
        if not isinstance(model, Model):
            raise TypeError(f"an optimizer takes an accel.Model, got {type(model).__name__}")
        opts = ffi.new(f"accel_{kind}_options *")
        init = {"sgd": lib.accel_sgd_options_init, "adamw": lib.accel_adamw_options_init,
                "lamb": lib.accel_lamb_options_init, "adafactor": lib.accel_adafactor_options_init,}[kind]
        create = {"sgd": lib.accel_optimizer_create_sgd, "adamw": lib.accel_optimizer_create_adamw,
                  "lamb": lib.accel_optimizer_create_lamb, "adafactor": lib.accel_optimizer_create_adafactor,}[kind]
        _check(init(opts, getattr(lib, f"ACCEL_{kind.upper()}_OPTIONS_VERSION")))
        _fill(opts, **fields)
        _Child.__init__(self, model._acc, create, model, opts, parent=model)
        self.model = model

    def step(self) -> StepResult:
        """accel_step (Accelerator.step): ends a micro-batch; on a real step the optimizer steps,
        the scheduler advances and the gradients are zeroed."""
        with self._acc._lock:
            self._p()
            return self._acc.step()

    def zero_grad(self, set_to_none: bool = True) -> None:
        """A no-op, accepted for Accelerate/torch code: accel_step already zeroes the gradients."""

    @property
    def lr(self) -> float:
        """The current learning rate (accel_optimizer_lr)."""
        return float(self._get(lib.accel_optimizer_lr, "double *"))


class SGD(Optimizer):
    """torch.optim.SGD's arguments (accel_optimizer_create_sgd)."""

    def __init__(self, model: Model, lr: float = 0.01, momentum: float = 0.0, dampening: float = 0.0,
                 weight_decay: float = 0.0, nesterov: bool = False) -> None:
        self._create(model, "sgd", {"lr": lr, "momentum": momentum, "dampening": dampening,
                                    "weight_decay": weight_decay, "nesterov": 1 if nesterov else 0})


class AdamW(Optimizer):
    """torch.optim.AdamW's arguments (accel_optimizer_create_adamw); weight decay is decoupled."""

    def __init__(self, model: Model, lr: float = 1e-3, betas: Tuple[float, float] = (0.9, 0.999),
                 eps: float = 1e-8, weight_decay: float = 0.01) -> None:
        self._create(model, "adamw", {"lr": lr, "beta1": betas[0], "beta2": betas[1],
                                      "eps": eps, "weight_decay": weight_decay})


class LAMB(Optimizer):
    """LAMB (accel_optimizer_create_lamb): AdamW's update rescaled per tensor by the trust ratio.
    Not under ZeRO (prepare raises UnsupportedError)."""

    def __init__(self, model: Model, lr: float = 1e-3, betas: Tuple[float, float] = (0.9, 0.999),
                 eps: float = 1e-6, weight_decay: float = 0.01) -> None:
        self._create(model, "lamb", {"lr": lr, "beta1": betas[0], "beta2": betas[1],
                                     "eps": eps, "weight_decay": weight_decay})


class Adafactor(Optimizer):
    """Adafactor (accel_optimizer_create_adafactor) with transformers' Adafactor arguments and
    defaults: factored second moments, relative step sizes unless lr is given with
    relative_step=False. Not under ZeRO (prepare raises UnsupportedError)."""

    def __init__(self, model: Model, lr: Optional[float] = None, eps: Tuple[float, float] = (1e-30, 1e-3),
                 clip_threshold: float = 1.0, decay_rate: float = -0.8, beta1: Optional[float] = None,
                 weight_decay: float = 0.0, scale_parameter: bool = True, relative_step: bool = True,
                 warmup_init: bool = False) -> None:
        self._create(model, "adafactor", {
            "lr": 0.0 if lr is None else lr, "eps1": eps[0], "eps2": eps[1],
            "clip_threshold": clip_threshold, "decay_rate": decay_rate,
            "beta1": 0.0 if beta1 is None else float(beta1), "weight_decay": weight_decay,
            "scale_parameter": 1 if scale_parameter else 0, "relative_step": 1 if relative_step else 0,
            "warmup_init": 1 if warmup_init else 0})


class Scheduler(_Child):
    """A learning-rate schedule (constant, linear or cosine, with linear warm-up) driving an
    optimizer. It advances inside accel_step on real optimizer steps: step() is a no-op."""

    _order = 0
    _destroy = "scheduler"

    def __init__(self, optimizer: Optimizer, kind: Union[Schedule, str] = "constant", warmup_steps: int = 0,
                 total_steps: int = 0, min_lr_ratio: float = 0.0) -> None:
        if not isinstance(optimizer, Optimizer):
            raise TypeError(f"a scheduler takes an accel.Optimizer, got {type(optimizer).__name__}")
        opts = ffi.new("accel_scheduler_options *")
        _check(lib.accel_scheduler_options_init(opts, lib.ACCEL_SCHEDULER_OPTIONS_VERSION))
        _fill(opts, kind=_enum(Schedule, kind, "kind"))
        _fill(opts, warmup_steps=warmup_steps)
        _fill(opts, total_steps=total_steps)
        _fill(opts, min_lr_ratio=min_lr_ratio)
        _Child.__init__(self, optimizer._acc, lib.accel_scheduler_create, optimizer, opts, parent=optimizer)
        self.optimizer = optimizer

    def step(self) -> None:
        """A no-op, accepted for Accelerate/transformers code: accel_step advances the scheduler."""

    @property
    def steps(self) -> int:
        """Real optimizer steps taken (accel_scheduler_steps)."""
        return int(self._get(lib.accel_scheduler_steps, "int64_t *"))

    def get_last_lr(self) -> List[float]:
        """[the optimizer's current lr], as torch's schedulers return it."""
        return [self.optimizer.lr]


def get_constant_schedule_with_warmup(optimizer: Optimizer, num_warmup_steps: int = 0) -> Scheduler:
    """transformers' function of the same name: linear warm-up, then the base lr."""
    return Scheduler(optimizer, "constant", num_warmup_steps, 0)


def get_linear_schedule_with_warmup(optimizer: Optimizer, num_warmup_steps: int, num_training_steps: int,
                                    min_lr_ratio: float = 0.0) -> Scheduler:
    """transformers' function of the same name: linear warm-up, then linear decay to min_lr_ratio * lr."""
    return Scheduler(optimizer, "linear", num_warmup_steps, num_training_steps, min_lr_ratio)


def get_cosine_schedule_with_warmup(optimizer: Optimizer, num_warmup_steps: int, num_training_steps: int,
                                    min_lr_ratio: float = 0.0) -> Scheduler:
    """transformers' function of the same name: linear warm-up, then half a cosine to min_lr_ratio * lr."""
    return Scheduler(optimizer, "cosine", num_warmup_steps, num_training_steps, min_lr_ratio)


class DataLoader(_Child):
    """Batches of an in-memory dataset (inputs[i], targets[i]); both are copied at creation.

    Iterating runs ONE epoch: `for x, y in loader:` (or `for x in loader:` without targets);
    the next iteration is the next epoch. Breaking out leaves the position where it was."""

    _order = 2
    _destroy = "dataloader"

    def __init__(self, accelerator: "Accelerator", inputs: ArrayLike, targets: Optional[ArrayLike] = None, *,
                 batch_size: int = 1, shuffle: bool = False, seed: int = 0, drop_last: bool = False,
                 even_batches: Optional[bool] = None, split_batches: Optional[bool] = None,
                 iterable: bool = False) -> None:
        """even_batches/split_batches left at None take the Accelerator's (Accelerate's arguments).
        iterable=True reads the samples as a stream, in their order, sharded as Accelerate shards
        an IterableDataset (IterableDatasetShard); it needs shuffle=False."""
        opts = self._options(accelerator, batch_size, shuffle, seed, drop_last, even_batches, split_batches,
                             iterable)
        with _Args((inputs, ffi.NULL if targets is None else targets), 
                   convert=(0,) if targets is None else (0, 1)) as (x, y):
            _Child.__init__(self, accelerator, lib.accel_dataloader_create, x, y, opts)
        self._has_targets = targets is not None
        self.batch_size = int(batch_size)

    @staticmethod
    def _options(accelerator: "Accelerator", batch_size: int, shuffle: bool, seed: int, drop_last: bool,
                 even_batches: Optional[bool], split_batches: Optional[bool], iterable: bool = False) -> Any:
        opts = ffi.new("accel_dataloader_options *")
        _check(lib.accel_dataloader_options_init(opts, lib.ACCEL_DATALOADER_OPTIONS_VERSION))
        _fill(opts, batch_size=batch_size)
        opts.shuffle = 1 if shuffle else 0
        _fill(opts, seed=seed)
        opts.drop_last = 1 if drop_last else 0
        opts.even_batches = 1 if (accelerator.even_batches if even_batches is None else even_batches) else 0
        opts.split_batches = 1 if (accelerator.split_batches if split_batches is None else split_batches) else 0
        opts.iterable = 1 if iterable else 0
        return opts

    @classmethod
    def for_lm(cls, accelerator: "Accelerator", tokens: ArrayLike, offsets: Optional[ArrayLike] = None, *,
               block_size: int = 0, max_length: int = 0, pad_id: int = 0, pad_to_multiple_of: int = 0,
               group_by_length: bool = False, batch_size: int = 1, shuffle: bool = False, seed: int = 0,
               drop_last: bool = False, even_batches: Optional[bool] = None,
               split_batches: Optional[bool] = None, iterable: bool = False) -> "DataLoader":
        """Causal-LM batches (accel_lm_dataloader_create) over a 1-D token array: without
        offsets, fixed blocks of block_size tokens; with offsets ([sequences + 1], from 0 to
        len(tokens)), one sequence each, cut to max_length and batched with dynamic padding
        (to the longest of the batch, or a multiple of pad_to_multiple_of). Yields
        (input_ids, labels): labels are -100 at padding; pass both to model(input_ids=...,
        labels=...) (right padding needs no attention mask). iterable=True: the sequences (or
        blocks) as a stream, as DataLoader's iterable (no shuffle, no group_by_length)."""
        lm = ffi.new("accel_lm_data_options *")
        _check(lib.accel_lm_data_options_init(lm, lib.ACCEL_LM_DATA_OPTIONS_VERSION))
        _fill(lm, block_size=block_size)
        _fill(lm, max_length=max_length)
        _fill(lm, pad_id=pad_id)
        _fill(lm, pad_to_multiple_of=pad_to_multiple_of)
        lm.group_by_length = 1 if group_by_length else 0
        opts = cls._options(accelerator, batch_size, shuffle, seed, drop_last, even_batches, split_batches,
                            iterable)
        loader = object.__new__(cls)
        with _Args((tokens, ffi.NULL if offsets is None else offsets),
                   convert=(0,) if offsets is None else (0, 1)) as (t, o):
            _Child.__init__(loader, accelerator, lib.accel_lm_dataloader_create, t, o, lm, opts)
        loader._has_targets = True
        loader.batch_size = int(batch_size)
        return loader

    def next_batch(self) -> Any:
        """The next batch of the epoch ((x, y), or x without targets), or None at the end of the
        epoch (the loader then moves to the next epoch)."""
        acc = self._acc
        with acc._lock:
            ctx, h = self._p()
            xo, yo = acc._out_a, acc._out_b
            _check(lib.accel_dataloader_next(ctx, h, xo, yo), ctx)
            if xo[0] == ffi.NULL:
                return None
            x = Tensor._wrap(xo[0], acc)
            if not self._has_targets:
                return x
            return x, Tensor._wrap(yo[0], acc)

    def __iter__(self) -> Iterator[Any]:
        """One epoch of batches: (x, y), or x for a loader without targets."""
        self._p()
        while True:
            batch = self.next_batch()
            if batch is None:
                return
            yield batch

    def __len__(self) -> int:
        """Batches per epoch (this process's share once prepared)."""
        return int(self._get(lib.accel_dataloader_num_batches, "int64_t *"))

    @property
    def epoch(self) -> int:
        """The current epoch, 0-based (accel_dataloader_epoch)."""
        return int(self._get(lib.accel_dataloader_epoch, "int64_t *"))

    def set_epoch(self, epoch: int) -> None:
        """Sets the epoch (>= 0) and rewinds to its first batch."""
        self._call(lib.accel_dataloader_set_epoch, _int(epoch, "epoch"), with_ctx=False)


# ------------------------------------------------------------------------------------------
# The Accelerator
# ------------------------------------------------------------------------------------------


def _options(mixed_precision: Union[Precision, str, None] = None, gradient_accumulation_steps: int = 1,
             cpu: bool = False, seed: int = 0, strategy: Union[Strategy, str, None] = None,
             backend: Union[Backend, str, None] = None, timeout: Optional[float] = None, num_threads: int = 0,
             device: Union[Device, str, None] = None, device_index: int = 0,
             loss_scale_init: Optional[float] = None, loss_scale_growth_factor: Optional[float] = None,
             loss_scale_backoff_factor: Optional[float] = None, loss_scale_growth_interval: Optional[int] = None,
             bucket_bytes: Optional[int] = None) -> Any:
    """An accel_options filled by accel_options_init, then the arguments that were given."""
    opts = ffi.new("accel_options *")
    _check(lib.accel_options_init(opts, lib.ACCEL_OPTIONS_VERSION))
    if mixed_precision is not None:
        _fill(opts, mixed_precision=_enum(Precision, mixed_precision, "mixed_precision"))
    _fill(opts, gradient_accumulation_steps=gradient_accumulation_steps)
    _fill(opts, seed=seed)
    if cpu:
        opts.device = lib.ACCEL_DEVICE_CPU
    elif device is not None:
        _fill(opts, device=_enum(Device, device, "device"))
    _fill(opts, device_index=device_index)
    if loss_scale_init is not None:
        _fill(opts, loss_scale_init=loss_scale_init)
    if loss_scale_growth_factor is not None:
        _fill(opts, loss_scale_growth_factor=loss_scale_growth_factor)
    if loss_scale_backoff_factor is not None:
        _fill(opts, loss_scale_backoff_factor=loss_scale_backoff_factor)
    if loss_scale_growth_interval is not None:
        _fill(opts, loss_scale_growth_interval=loss_scale_growth_interval)
    _fill(opts, num_threads=num_threads)
    if strategy is not None:
        _fill(opts, strategy=_enum(Strategy, strategy, "strategy"))
    if bucket_bytes is not None:
        _fill(opts, bucket_bytes=bucket_bytes)
    if backend is not None:
        _fill(opts, backend=_enum(Backend, backend, "backend"))
    if timeout is not None:
        _fill(opts, timeout_seconds=timeout)
    return opts


class _RankLock:
    """The lock of a simulated rank's Accelerator: only the rank's own thread may use it, so it
    refuses other threads at once (waiting could hang: the rank may be blocked in a collective
    until they act) and needs no locking otherwise."""

    __slots__ = ("_acc",)

    def __init__(self, acc: "Accelerator") -> None:
        self._acc = weakref.ref(acc)

    def acquire(self, blocking: bool = True) -> bool:
        acc = self._acc()
        return acc is not None and threading.get_ident() == acc._thread

    def release(self) -> None:
        pass

    def __enter__(self) -> None:
        acc = self._acc()
        if acc is not None:
            acc._c()  # ClosedError, or InvalidStateError on another thread

    def __exit__(self, *exc: Any) -> None:
        pass


class Accelerator(_NoCopy):
    """The context (accel_context): device, precision, accumulation, processes, checkpoints.

        acc = accel.Accelerator(mixed_precision="bf16", gradient_accumulation_steps=4)

    Arguments left at None keep the library's default, which for mixed_precision, strategy,
    backend and timeout is the ACCEL_MIXED_PRECISION / ACCEL_STRATEGY / ACCEL_BACKEND /
    ACCEL_TIMEOUT environment variable when set. Calls from several threads are serialised (a lock).

    It cannot be copied or pickled (TypeError): it owns the C context (a device, a process group)."""

    _copy_hint = ("make another with accel.Accelerator(...); acc.save_state(dir) and acc.load_state(dir) "
                  "carry the training state from one to the other")

    def __init__(self, mixed_precision: Union[Precision, str, None] = None, gradient_accumulation_steps: int = 1,
                 cpu: bool = False, seed: int = 0, strategy: Union[Strategy, str, None] = None,
                 backend: Union[Backend, str, None] = None, timeout: Optional[float] = None,
                 num_threads: int = 0, *, device: Union[Device, str, None] = None, device_index: int = 0,
                 loss_scale_init: Optional[float] = None, loss_scale_growth_factor: Optional[float] = None,
                 loss_scale_backoff_factor: Optional[float] = None,
                 loss_scale_growth_interval: Optional[int] = None, bucket_bytes: Optional[int] = None,
                 split_batches: bool = False, even_batches: bool = True) -> None:
        """Creates the context (accel_init). split_batches/even_batches are the defaults of the
        DataLoaders made from it (Accelerate's arguments of the same names)."""
        self._ctx: Any = None
        self._owned = True
        self._records: Dict[int, List[Any]] = {}
        opts = _options(mixed_precision, gradient_accumulation_steps, cpu, seed, strategy, backend, timeout,
                        num_threads, device, device_index, loss_scale_init, loss_scale_growth_factor,
                        loss_scale_backoff_factor, loss_scale_growth_interval, bucket_bytes)
        out = ffi.new("accel_context **")
        _check(lib.accel_init(opts, out))  # accel_last_error(NULL): there is no context yet
        self._setup(out[0], owned=True, accumulation=int(gradient_accumulation_steps),
                    split_batches=split_batches, even_batches=even_batches)

    def _setup(self, ctx: Any, owned: bool, accumulation: int, split_batches: bool = False,
               even_batches: bool = True) -> None:
        self._ctx = ctx
        self._owned = owned
        self._thread = threading.get_ident()
        # held during every C call on the context and its objects
        self._lock: Any = threading.RLock() if owned else _RankLock(self)
        self.split_batches = bool(split_batches)
        self.even_batches = bool(even_batches)
        self._records = {}
        self._next_key = 0
        self._prepared: List[_Child] = []
        self._step_out = ffi.new("accel_step_result *")
        # out-parameters of the hot calls, reused: only used holding self._lock, and read at once
        self._out_a = ffi.new("accel_tensor **")
        self._out_b = ffi.new("accel_tensor **")
        self._in_1 = ffi.new("accel_tensor *[1]")
        self._pending_backward = False
        self._project_dir: Optional[str] = None
        self.gradient_accumulation_steps = accumulation

    @classmethod
    def _bind(cls, ctx: Any, accumulation: int = 1, split_batches: bool = False,
              even_batches: bool = True) -> "Accelerator":
        """An Accelerator over a context it does not own (a simulated rank's), usable only on the
        calling thread (the rank's)."""
        acc = object.__new__(cls)
        acc._setup(ctx, owned=False, accumulation=accumulation, split_batches=split_batches,
                   even_batches=even_batches)
        return acc

    def _adopt(self, child: _Child) -> int:
        key = self._next_key
        self._next_key += 1
        self._records[key] = [child._order, child._h, child._destroy, weakref.ref(child)]
        return key

    def _c(self) -> Any:
        """The context; ClosedError when closed, or when a simulated rank's Accelerator is used from
        another thread (another rank's: that rank may be inside a collective on it)."""
        ctx = self._ctx
        if ctx is None:
            raise ClosedError("this Accelerator is closed" if self._owned
                              else "this Accelerator belonged to a simulated rank whose function has returned")
        if not self._owned and threading.get_ident() != self._thread:
            raise InvalidStateError(Status.INVALID_STATE,
                                    "this Accelerator belongs to another simulated rank (another thread): "
                                    "use the one your function received")
        return ctx

    def _call(self, fn: Callable[..., int], *args: Any) -> None:
        """fn(ctx, *args) holding the lock (tensors pinned, objects checked open; see _Args);
        raises the error of a failure with accel_last_error(ctx)."""
        with self._lock:
            ctx = self._c()
            with _Args(args) as c_args:
                try:
                    st = fn(ctx, *c_args)
                except OverflowError as exc:  # an int C cannot hold: refused by cffi before the call
                    raise _overflow(fn, exc) from None
            _check(st, ctx)

    def _get(self, fn: Callable[..., int], ctype: str) -> Any:
        """out[0] of fn(ctx, out)."""
        out = ffi.new(ctype)
        self._call(fn, out)
        return out[0]

    # -- lifetime --------------------------------------------------------------------------

    def close(self) -> None:
        """Releases everything made from this Accelerator that is still open (schedulers, optimizers,
        loaders, models), then the context (accel_destroy). Idempotent; afterwards every use of it
        or of its objects raises ClosedError (tensors stay usable: they are independent).
        Waits for a call another thread is making on it."""
        with self._lock:
            self._close()

    def _close(self) -> None:
        ctx = self._ctx
        if ctx is None:
            return
        records = sorted(self._records.values(), key=lambda r: r[0])
        self._records = {}
        for order, handle, destroy, ref in records:
            child = ref()
            if child is not None:
                child._h = None
            _destroy_handle(destroy, handle)
        self._prepared = []
        self._ctx = None
        if self._owned:
            lib.accel_destroy(ctx)

    def __del__(self) -> None:
        try:
            if getattr(self, "_ctx", None) is not None and getattr(self, "_owned", False):
                self.close()
        except BaseException:
            pass

    def __enter__(self) -> "Accelerator":
        self._c()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    @property
    def closed(self) -> bool:
        """True once close() was called (for a simulated rank's: once its function returned)."""
        return self._ctx is None

    # -- the training loop -----------------------------------------------------------------

    def prepare(self, *objects: Any) -> Any:
        """Binds models, optimizers, schedulers and data loaders to this Accelerator (accel_prepare),
        in any order, any subset, several loaders. Returns the same objects (one, or a tuple)."""
        groups: Dict[Type[_Child], List[_Child]] = {Model: [], Optimizer: [], Scheduler: [], DataLoader: []}
        for obj in objects:
            for kind in groups:
                if isinstance(obj, kind):
                    if obj._acc is not self:
                        raise InvalidArgumentError(Status.INVALID_ARGUMENT,
                                                   f"prepare: this {kind.__name__} was made from another Accelerator")
                    groups[kind].append(obj)
                    break
            else:
                raise TypeError(f"prepare takes accel Model, Optimizer, Scheduler and DataLoader objects, "
                                f"not {type(obj).__name__}")
        rounds = max((len(g) for g in groups.values()), default=0)
        with self._lock:
            self._c()
            for obj in objects:
                obj._p()
            for i in range(rounds):
                pick = [g[i] if i < len(g) else None for g in groups.values()]
                self._call(lib.accel_prepare, *(ffi.NULL if o is None else o for o in pick))
                for o in pick:
                    if o is not None and not o._prepared:
                        o._prepared = True
                        self._prepared.append(o)  # borrowed by C: kept alive until close()
        return objects[0] if len(objects) == 1 else objects

    def unwrap_model(self, model: Model) -> Model:
        """The model itself (accel does not wrap models)."""
        return model

    def backward(self, loss: Tensor) -> None:
        """accel_backward: backpropagates a scalar loss, scaled for accumulation and fp16."""
        if not isinstance(loss, Tensor):
            raise TypeError(f"backward takes an accel.Tensor (a loss), got {type(loss).__name__}")
        with self._lock:
            ctx = self._c()
            one = (loss,)
            h = _pin_all(one)[0]
            try:
                st = lib.accel_backward(ctx, h)
            finally:
                _unpin_all(one)
            _check(st, ctx)
            self._pending_backward = True

    def step(self) -> StepResult:
        """accel_step: ends a micro-batch (what optimizer.step() calls)."""
        with self._lock:
            ctx = self._c()
            r = self._step_out
            _check(lib.accel_step(ctx, r), ctx)
            self._pending_backward = False
            return StepResult(bool(r.stepped), bool(r.skipped), bool(r.sync_step), r.loss_scale,
                              r.optimizer_steps, r.micro_steps)

    @contextlib.contextmanager
    def accumulate(self, *models: Model) -> Iterator[None]:
        """Accelerate's accumulate(): accel_step already counts micro-batches and steps for real every
        gradient_accumulation_steps; if the block did a backward but no optimizer.step(), the step
        is taken when the block ends."""
        self._c()
        self._pending_backward = False
        yield
        if self._pending_backward and self._ctx is not None:
            self.step()

    @property
    def sync_gradients(self) -> bool:
        """True when the next step is a real optimizer step (accel_sync_gradients)."""
        return bool(self._get(lib.accel_sync_gradients, "int *"))

    def clip_grad_norm_(self, parameters: Any = None, max_norm: Optional[float] = None,
                        norm_type: float = 2.0) -> float:
        """Clips the global L2 gradient norm to max_norm; returns the norm before clipping (NaN on an
        accumulation micro-step). Accelerate's signature: clip_grad_norm_(model.parameters(), 1.0)
        works, and so does clip_grad_norm_(1.0); the parameters are always all of the model's."""
        if max_norm is None:
            if not isinstance(parameters, (int, float)):
                raise InvalidArgumentError(Status.INVALID_ARGUMENT, "clip_grad_norm_: max_norm is required")
            max_norm = float(parameters)
        if norm_type != 2.0:
            raise UnsupportedError(Status.UNSUPPORTED, f"clip_grad_norm_: only norm_type=2 is supported, got {norm_type}")
        out = ffi.new("double *")
        self._call(lib.accel_clip_grad_norm, float(max_norm), out)
        return float(out[0])

    @property
    def loss_scale(self) -> float:
        """The current fp16 loss scale (1 unless fp16)."""
        return float(self._get(lib.accel_loss_scale, "double *"))

    @property
    def device(self) -> str:
        """"cpu" or "cuda" (accel_device_kind)."""
        return Device(self._get(lib.accel_device_kind, "accel_device *")).name.lower()

    @property
    def mixed_precision(self) -> Precision:
        """The precision this Accelerator trains in (accel_mixed_precision): Precision.NO, BF16
        or FP16, with "auto" resolved for the device (BF16 or NO; never AUTO)."""
        return Precision(self._get(lib.accel_mixed_precision, "accel_precision *"))

    def cross_entropy(self, logits: Tensor, targets: ArrayLike) -> Tensor:
        """accel.cross_entropy(logits, targets, accelerator=self)."""
        return cross_entropy(logits, targets, accelerator=self)

    def mse_loss(self, input: Tensor, target: ArrayLike) -> Tensor:
        """accel.mse_loss(input, target, accelerator=self)."""
        return mse_loss(input, target, accelerator=self)

    # -- processes -------------------------------------------------------------------------

    @property
    def process_index(self) -> int:
        """This process's (rank's) index, 0-based."""
        return int(self._get(lib.accel_process_index, "int32_t *"))

    @property
    def num_processes(self) -> int:
        """The number of processes (ranks) in the world."""
        return int(self._get(lib.accel_num_processes, "int32_t *"))

    @property
    def local_process_index(self) -> int:
        """This process's index on its node."""
        return int(self._get(lib.accel_local_process_index, "int32_t *"))

    @property
    def is_main_process(self) -> bool:
        """True on process 0."""
        return bool(self._get(lib.accel_is_main_process, "int *"))

    @property
    def is_local_main_process(self) -> bool:
        """True on the main process of each node."""
        return bool(self._get(lib.accel_is_local_main_process, "int *"))

    def wait_for_everyone(self) -> None:
        """A barrier across the processes (accel_barrier)."""
        with self._lock:
            ctx = self._c()
            _check(lib.accel_barrier(ctx), ctx)

    def _collective(self, fn: Callable[..., int], x: ArrayLike, *args: Any) -> Tensor:
        out = ffi.new("accel_tensor **")
        with self._lock:
            ctx = self._c()
            with _Args((x,) + args, convert=(0,)) as c_args:
                try:
                    st = fn(ctx, *c_args, out)
                except OverflowError as exc:
                    raise _overflow(fn, exc) from None
            _check(st, ctx)
        return Tensor._wrap(out[0])

    def reduce(self, tensor: ArrayLike, reduction: Union[str, ReduceOp] = "sum") -> Tensor:
        """Element-wise reduction across processes ("sum", "mean", "max", "min", "prod")."""
        return self._collective(lib.accel_reduce, tensor, int(_enum(ReduceOp, reduction, "reduction")))

    def broadcast(self, tensor: ArrayLike, from_process: int = 0) -> Tensor:
        """Every process receives process `from_process`'s tensor (accel_broadcast)."""
        return self._collective(lib.accel_broadcast, tensor, _int(from_process, "from_process"))

    def gather(self, tensor: ArrayLike) -> Tensor:
        """Concatenates every process's tensor along dimension 0, in process order."""
        return self._collective(lib.accel_gather, tensor)

    def gather_for_metrics(self, input_data: ArrayLike) -> Tensor:
        """gather() minus the rows even_batches duplicated in the last batch."""
        return self._collective(lib.accel_gather_for_metrics, input_data)

    def pad_across_processes(self, tensor: ArrayLike, dim: int = 0, pad_index: float = 0,
                             pad_first: bool = False) -> Tensor:
        """Pads dimension `dim` of every process's tensor to the largest size with pad_index."""
        return self._collective(lib.accel_pad_across_processes, tensor, _int(dim, "dim"), float(pad_index),
                                1 if pad_first else 0)

    def print(self, *args: Any, sep: str = " ") -> None:
        """Prints on the main process only (accel_print)."""
        sys.stdout.flush()
        self._call(lib.accel_print, _cstr(sep.join(str(a) for a in args), "print: the text"))

    def set_seed(self, seed: int, device_specific: bool = False) -> None:
        """Reseeds the generators (plus the process index when device_specific)."""
        self._call(lib.accel_set_seed, _int(seed, "seed"), 1 if device_specific else 0)

    def charge_compute(self, seconds: float, label: Optional[str] = None) -> None:
        """Simulator: charges compute time to this rank's virtual clock (a no-op outside it)."""
        self._call(lib.accel_sim_charge_compute, float(seconds), ffi.NULL if label is None else _cstr(label, "charge_compute: label"))

    # -- checkpoints -----------------------------------------------------------------------

    def set_project(self, project_dir: Union[str, "os.PathLike[str]"], total_limit: int = 0) -> None:
        """Where save_state()/load_state() without a directory go: <project_dir>/checkpoints/checkpoint_N,
        keeping the newest `total_limit` (0: all)."""
        opts = ffi.new("accel_project_options *")
        _check(lib.accel_project_options_init(opts, lib.ACCEL_PROJECT_OPTIONS_VERSION))
        path = ffi.new("char[]", _cpath(project_dir, "project_dir"))
        opts.project_dir = path
        _fill(opts, total_limit=total_limit)
        self._call(lib.accel_set_project, opts)
        self._project_dir = os.fspath(project_dir)

    @property
    def project_dir(self) -> Optional[str]:
        """The directory set_project() set (None before)."""
        return self._project_dir

    def _checkpoint(self, fn: Callable[..., int], path: Union[str, "os.PathLike[str]", None]) -> str:
        with self._lock:
            self._call(fn, ffi.NULL if path is None else _cpath(path))
            return self.last_checkpoint

    def save_state(self, output_dir: Union[str, "os.PathLike[str]", None] = None) -> str:
        """Saves the whole training state (accel_save_state); None: the project's next checkpoint.
        Refuses to overwrite anything that is not an earlier accel checkpoint. Returns the directory."""
        return self._checkpoint(lib.accel_save_state, output_dir)

    def load_state(self, input_dir: Union[str, "os.PathLike[str]", None] = None) -> str:
        """Restores a saved state (None: the project's newest checkpoint). Returns the directory."""
        return self._checkpoint(lib.accel_load_state, input_dir)

    @property
    def last_checkpoint(self) -> str:
        """The directory of the last successful save_state/load_state ("" before either)."""
        with self._lock:  # the string belongs to the context: copied before the next call
            return os.fsdecode(ffi.string(self._get(lib.accel_last_checkpoint, "const char **")))

    def save_pretrained(self, model: Model, save_directory: Union[str, "os.PathLike[str]"]) -> str:
        """Writes a causal LM as a Hugging Face directory (accel_save_pretrained): config.json and
        model.safetensors, in the parameters' dtype. A collective under several processes."""
        if not isinstance(model, Model) or model._acc is not self:
            raise InvalidArgumentError(Status.INVALID_ARGUMENT, "save_pretrained: pass a Model made from this Accelerator")
        path = os.fspath(save_directory)
        self._call(lib.accel_save_pretrained, model, _cpath(path))
        return path

    def save_model(self, model: Model, save_directory: Union[str, "os.PathLike[str]"]) -> str:
        """Writes the model's fp32 weights as safetensors (accel_save_model). A path ending in
        .safetensors (or .pt: TorchScript) is the file; any other path is a directory, created if
        needed, that receives model.safetensors. Returns the file's path."""
        if not isinstance(model, Model) or model._acc is not self:
            raise InvalidArgumentError(Status.INVALID_ARGUMENT, "save_model: pass a Model made from this Accelerator")
        path = os.fspath(save_directory)
        if not path.endswith((".safetensors", ".pt")):
            os.makedirs(path, exist_ok=True)
            path = os.path.join(path, "model.safetensors")
        self._call(lib.accel_save_model, model, _cpath(path))
        return path

    # -- trackers --------------------------------------------------------------------------

    def init_trackers(self, log_dir: Union[str, "os.PathLike[str]"], *,
                      writers: Union[LogWriter, int, str, Sequence[Union[LogWriter, int, str]], None] = None,
                      all_processes: bool = False) -> None:
        """Opens the trackers (accel_init_trackers) that log() writes to, in log_dir (created where
        missing): "jsonl" (metrics.jsonl), "csv" (metrics.csv: wall_time,step,name,value) and
        "tensorboard" (an events.out.tfevents.* file), as a name, "all", an iterable of names or
        LogWriter flags; None: the ACCEL_LOG_WITH environment variable, else jsonl. The main
        process alone writes, unless all_processes (each into log_dir/process-RANK); every
        process calls it. InvalidStateError when they are already open (end_training() first)."""
        opts = ffi.new("accel_tracker_options *")
        _check(lib.accel_tracker_options_init(opts, lib.ACCEL_TRACKER_OPTIONS_VERSION))
        path = ffi.new("char[]", _cpath(log_dir, "log_dir"))
        opts.log_dir = path
        opts.writers = _log_writers(writers)
        opts.all_processes = 1 if all_processes else 0
        self._call(lib.accel_init_trackers, opts)

    def log(self, values: Mapping[str, float], step: int) -> None:
        """Logs named scalars at `step` (accel_log), in the dict's order: {"loss": 0.5, "lr": 1e-3}.
        A value is anything float() takes (a Python or numpy number, a one-element Tensor); one
        that is not finite is null in metrics.jsonl. Written and flushed before it returns.
        InvalidStateError before init_trackers() or after end_training()."""
        keep: List[Any] = []
        nums: List[float] = []
        for name, value in values.items():
            if not isinstance(name, str):
                raise InvalidArgumentError(Status.INVALID_ARGUMENT, f"log: the name {name!r} is not a str")
            raw = name.encode("utf-8")
            if b"\0" in raw:
                raise InvalidArgumentError(Status.INVALID_ARGUMENT, f"log: the name {name!r} contains a NUL byte")
            try:
                nums.append(float(value))
            except (TypeError, ValueError):
                raise InvalidArgumentError(Status.INVALID_ARGUMENT,
                                           f"log: the value of {name!r} is not a number: {value!r}") from None
            keep.append(ffi.new("char[]", raw))
        names = ffi.new("const char *[]", keep)
        self._call(lib.accel_log, _int(step, "step"), names, ffi.new("double[]", nums), len(nums))

    def end_training(self) -> None:
        """Flushes and closes the trackers (accel_end_training; close() does too); nothing when
        none are open. init_trackers() may open them again (a new event file)."""
        with self._lock:
            ctx = self._c()
            _check(lib.accel_end_training(ctx), ctx)

    # -- real time: inference beside training ----------------------------------------------

    def _own_model(self, model: Any, what: str) -> None:
        if not isinstance(model, Model) or model._acc is not self:
            raise InvalidArgumentError(Status.INVALID_ARGUMENT, f"{what}: pass a Model made from this Accelerator")

    def inference(self, model: Model, num_threads: int = 1) -> "Inference":
        """An inference copy of `model` (accel_inference_create): the same structure on this
        Accelerator's device, in evaluation mode, without autograd, starting with the model's
        current weights (published as publish_weights does: version 1 for the first). Its
        run() picks up the latest published weights and never waits for training; it may run
        on another thread (one at a time) and keeps working after the model and this
        Accelerator are closed. num_threads: the intra-op threads of the thread that runs it,
        in [1, 4096]. Under ZeRO every process calls it."""
        self._own_model(model, "inference")
        opts = ffi.new("accel_inference_options *")
        _check(lib.accel_inference_options_init(opts, lib.ACCEL_INFERENCE_OPTIONS_VERSION))
        _fill(opts, num_threads=num_threads)
        out = ffi.new("accel_inference **")
        self._call(lib.accel_inference_create, model, opts, out)
        return Inference._wrap(out[0], self)

    def publish_weights(self, model: Model) -> int:
        """Publishes the model's current trained weights to every inference copy of it
        (accel_publish_weights) and returns their version (1 was the first copy's, then 2,
        3, ...). Each copy's next run uses them; a run in progress finishes with the weights
        it started with. The weights are copied: training goes on at once. Under ZeRO a
        collective (every process calls it)."""
        self._own_model(model, "publish_weights")
        out = ffi.new("uint64_t *")
        self._call(lib.accel_publish_weights, model, out)
        return int(out[0])

    def train_micro_batches(self, model: Model, loader: "DataLoader", loss: Union[Loss, str],
                            max_micro_batches: int, max_seconds: float = 0.0) -> "TrainResult":
        """Trains at most max_micro_batches (>= 1) micro-batches of `loader` on the prepared model
        and optimizer in one C call (accel_train_micro_batches): for each, the next batch, the
        forward, the loss ("mse", "cross_entropy" or "causal_lm"; a Loss), backward and step,
        exactly as that loop written with model(x), accel.mse_loss/cross_entropy, backward and
        opt.step() does. Stops early at the end of the loader's epoch (epoch_ended; the next
        call starts the next epoch) and, when max_seconds > 0, before a micro-batch that would
        end past max_seconds (judged by the mean time of this call's micro-batches; at least
        one runs). max_seconds must be 0 with several processes. Raises the error of the
        failing micro-batch (those before it stay trained)."""
        self._own_model(model, "train_micro_batches")
        if not isinstance(loader, DataLoader) or loader._acc is not self:
            raise InvalidArgumentError(Status.INVALID_ARGUMENT,
                                       "train_micro_batches: pass a DataLoader made from this Accelerator")
        kind = _enum(Loss, loss, "loss")
        out = ffi.new("accel_train_result *")
        out.version = lib.ACCEL_TRAIN_RESULT_VERSION
        with self._lock:
            self._call(lib.accel_train_micro_batches, model, loader, int(kind), _int(max_micro_batches, "max_micro_batches"),
                       float(max_seconds), out)
            if out.micro_batches:
                self._pending_backward = False  # each micro-batch ended with accel_step
        return TrainResult(int(out.micro_batches), int(out.optimizer_steps), int(out.skipped_steps),
                           bool(out.epoch_ended), float(out.mean_loss), float(out.seconds))

    def __repr__(self) -> str:
        if self._ctx is None:
            return "<accel.Accelerator closed>"
        return f"<accel.Accelerator process {self.process_index}/{self.num_processes} on {self.device}>"


# ------------------------------------------------------------------------------------------
# Real time: inference beside training
# ------------------------------------------------------------------------------------------


class TrainResult(NamedTuple):
    """What Accelerator.train_micro_batches did (accel_train_result)."""
    micro_batches: int     # micro-batches trained by the call
    optimizer_steps: int   # real optimizer steps taken by the call
    skipped_steps: int     # fp16 steps skipped for inf/NaN gradients by the call
    epoch_ended: bool      # the call stopped at the end of the loader's epoch
    mean_loss: float       # the mean of the micro-batches' losses (NaN when none ran)
    seconds: float         # the call's wall time


class InferenceWeights(NamedTuple):
    """Inference.weights (accel_inference_weights): the weights the copy's last run used."""
    version: int         # 1, 2, ... (publish_weights' numbers); before any run, those it was created with
    age_seconds: float   # how long ago they were published


class Inference(_NoCopy):
    """An inference copy of a model (Accelerator.inference; accel_inference_*): `y = inf.run(x)`
    (or `inf(x)`) is the model's forward in evaluation mode, without autograd, with the latest
    weights the trainer published (Accelerator.publish_weights) when the run starts. It never
    waits for the trainer.

    It is independent of the Accelerator: it keeps working after its model and its Accelerator
    are closed (it holds what it needs; nothing closes it but close(), `with` or the garbage
    collector), and it may run on any thread, also while another thread trains on the
    Accelerator. One thread at a time: calls from several threads run one after the other, and
    a close() from another thread waits for the running call. Several copies run in parallel."""

    __slots__ = ("_h", "_lock", "_acc_ref", "_out", "_in_1", "__weakref__")
    _copy_hint = "make another inference copy with accelerator.inference(model)"
    _h: Any
    _lock: threading.Lock
    _acc_ref: "weakref.ref[Accelerator]"
    _out: Any
    _in_1: Any

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        raise TypeError("use accelerator.inference(model, num_threads=1)")

    @classmethod
    def _wrap(cls, handle: Any, acc: "Accelerator") -> "Inference":
        inf = object.__new__(cls)
        inf._h = handle
        inf._lock = threading.Lock()  # held during every C call on the copy
        # a weak reference: an inference copy must not keep its Accelerator (and so its context) alive
        inf._acc_ref = weakref.ref(acc)
        inf._out = ffi.new("accel_tensor **")
        inf._in_1 = ffi.new("accel_tensor *[1]")
        return inf

    def _handle(self) -> Any:
        """The handle; ClosedError once closed. Call it holding the lock."""
        if self._h is None:
            raise ClosedError("this Inference is closed")
        return self._h

    def run(self, *inputs: ArrayLike) -> Tensor:
        """The forward on `inputs` (Tensors or anything accel.tensor takes, as for model(x);
        copied to the copy's device) with the latest published weights (accel_inference_run).
        Returns a new tensor without a graph, usable anywhere, also as a loss's input (it
        remembers the Accelerator while that is open)."""
        with self._lock:
            h = self._handle()
            out = self._out
            if len(inputs) == 1 and type(inputs[0]) is Tensor:  # the real-time loop's case, kept lean
                arr = self._in_1
                arr[0] = _pin_all(inputs)[0]
                try:
                    st = lib.accel_inference_run(h, arr, 1, out)
                finally:
                    _unpin_all(inputs)
            else:
                with _Args(inputs, convert=range(len(inputs))) as handles:
                    arr = ffi.new("accel_tensor *[]", handles or [ffi.NULL])
                    st = lib.accel_inference_run(h, arr, len(handles), out)
            _check(st)  # accel_last_error(NULL), on this thread
            result = out[0]
        acc = self._acc_ref()
        return Tensor._wrap(result, acc if acc is not None and acc._ctx is not None else None)

    __call__ = run

    @property
    def weights(self) -> InferenceWeights:
        """(version, age_seconds) of the weights the last run used (before any run: those the
        copy was created with), accel_inference_weights."""
        version = ffi.new("uint64_t *")
        age = ffi.new("double *")
        with self._lock:
            _check(lib.accel_inference_weights(self._handle(), version, age))
        return InferenceWeights(int(version[0]), float(age[0]))

    @property
    def version(self) -> int:
        """weights.version: the version of the weights the last run used."""
        return self.weights.version

    @property
    def closed(self) -> bool:
        """True once close() was called."""
        return self._h is None

    def close(self) -> None:
        """Releases the copy (accel_inference_destroy). Idempotent; any thread; waits for a run
        another thread is making on it. Not needed before or after closing the Accelerator."""
        with self._lock:
            h, self._h = self._h, None
            if h is not None:
                lib.accel_inference_destroy(h)

    def __del__(self) -> None:
        try:
            if getattr(self, "_h", None) is None:
                return
            if not self._lock.acquire(blocking=False):
                return  # cannot happen: a running call holds a reference to the copy
            try:
                h, self._h = self._h, None
                if h is not None:
                    lib.accel_inference_destroy(h)
            finally:
                self._lock.release()
        except BaseException:  # never raise from a finalizer (e.g. at interpreter shutdown)
            pass

    def __enter__(self) -> "Inference":
        with self._lock:
            self._handle()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        if self._h is None:
            return "<accel.Inference closed>"
        return f"<accel.Inference weights version {self.version}>"


def write_token_file(path: Union[str, "os.PathLike[str]"], tokens: ArrayLike, token_bytes: int = 2) -> None:
    """Writes a packed token file (accel_token_file_write): int64/int32 tokens as 2- or 4-byte
    unsigned integers after a small header. Replaces only nothing or an earlier token file."""
    with _Args((tokens,), convert=(0,)) as (t,):
        try:
            st = lib.accel_token_file_write(_cpath(path), t, _int(token_bytes, "token_bytes"))
        except OverflowError as exc:
            raise _overflow(lib.accel_token_file_write, exc) from None
        _check(st)


def read_token_file(path: Union[str, "os.PathLike[str]"]) -> Tensor:
    """Reads a packed token file (accel_token_file_read) into an int64 host tensor."""
    out = ffi.new("accel_tensor **")
    _check(lib.accel_token_file_read(_cpath(path), out))
    return Tensor._wrap(out[0])


# ------------------------------------------------------------------------------------------
# Memory estimates
# ------------------------------------------------------------------------------------------


class MemoryEstimate(NamedTuple):
    """What estimate_memory returns (accel_memory_estimate): bytes per GPU."""
    parameters: int            # the model's parameters
    trainable_parameters: int  # those trained (the adapters under LoRA)
    seq_len: int               # the sequence length used
    attention: Union[Attention, int]  # the attention kernel assumed (EAGER or FUSED)
    weights: int               # working weights, ZeRO's master shards, a LoRA base
    gradients: int             # the gradients the strategy holds at the step
    optimizer_state: int       # the optimizer's state on this GPU
    activations: int           # saved for backward at the end of the forward
    temporaries: int           # the rest of the peak (logits' gradient, recomputed block, ...)
    total: int                 # the peak of a training step


def estimate_memory(model: Union[str, "os.PathLike[str]"], *, mixed_precision: Union[Precision, str] = "no",
                    weights_dtype: Union[DType, str] = "float32", optimizer: Union[OptimizerKind, str] = "adamw",
                    strategy: Union[Strategy, str] = "no", world_size: int = 1, micro_batch: int = 1,
                    seq_len: int = 0, gradient_checkpointing: bool = False, lora_rank: int = 0,
                    lora_target_modules: Union[str, Sequence[str], None] = None,
                    attention: Union[Attention, str, None] = None) -> MemoryEstimate:
    """The memory per GPU of training a causal LM (accel_estimate_memory; no Accelerator
    needed): weights, gradients, optimizer state, activations and the peak, in bytes.

    model: a named shape ("gpt2", "gpt2-medium", "gpt2-large", "gpt2-xl", "llama-7b",
    "llama-13b", "llama-70b", "tiny-llama"), a config.json or a directory holding one.
    mixed_precision: "no", "bf16" or "fp16" ("auto" depends on a device: InvalidArgumentError).
    optimizer: "sgd", "sgd_momentum", "adamw", "adafactor" or "lamb". world_size > 1 needs a
    strategy. seq_len 0: min(1024, max_position_embeddings). lora_rank > 0: LoRA adapters of
    that rank on lora_target_modules (None: PEFT's default for the family). attention:
    "eager", "fused" or None (this build's kernel). Raises IOError for a model that is
    neither a named shape nor a readable config, InvalidArgumentError for a bad option,
    UnsupportedError for what prepare refuses (LAMB under ZeRO, ...)."""
    opts = ffi.new("accel_memory_estimate_options *")
    _check(lib.accel_memory_estimate_options_init(opts, lib.ACCEL_MEMORY_ESTIMATE_OPTIONS_VERSION))
    _fill(opts, mixed_precision=_enum(Precision, mixed_precision, "mixed_precision"))
    _fill(opts, weights_dtype=_enum(DType, weights_dtype, "weights_dtype"))
    _fill(opts, optimizer=_enum(OptimizerKind, optimizer, "optimizer"))
    _fill(opts, strategy=_enum(Strategy, strategy, "strategy"))
    _fill(opts, world_size=world_size)
    _fill(opts, micro_batch=micro_batch)
    _fill(opts, seq_len=seq_len)
    opts.gradient_checkpointing = 1 if gradient_checkpointing else 0
    _fill(opts, lora_rank=lora_rank)
    keep = ffi.NULL
    if lora_target_modules is not None:
        names = [lora_target_modules] if isinstance(lora_target_modules, str) else list(lora_target_modules)
        keep = ffi.new("char[]", _cpath(",".join(names), "lora_target_modules"))
    opts.lora_target_modules = keep
    _fill(opts, attention=Attention.AUTO if attention is None else _enum(Attention, attention, "attention"))
    out = ffi.new("accel_memory_estimate *")
    out.version = lib.ACCEL_MEMORY_ESTIMATE_VERSION
    _check(lib.accel_estimate_memory(_cpath(model, "model"), opts, out))  # accel_last_error(NULL)
    try:
        kernel: Union[Attention, int] = Attention(out.attention)
    except ValueError:  # a kernel this binding does not know
        kernel = int(out.attention)
    return MemoryEstimate(int(out.parameters), int(out.trainable_parameters), int(out.seq_len), kernel,
                          int(out.weights), int(out.gradients), int(out.optimizer_state), int(out.activations),
                          int(out.temporaries), int(out.total))


# ------------------------------------------------------------------------------------------
# Losses
# ------------------------------------------------------------------------------------------


def _loss(fn: Callable[..., int], name: str, a: Tensor, b: ArrayLike, accelerator: Optional[Accelerator]) -> Tensor:
    acc = accelerator or getattr(a, "_acc", None) or getattr(b, "_acc", None)
    if acc is None:
        raise InvalidArgumentError(Status.INVALID_ARGUMENT,
                                   f"{name}: neither tensor came from a model: pass accelerator=")
    if not isinstance(a, Tensor):
        raise TypeError(f"{name}: the first argument must be an accel.Tensor (a model's output)")
    with acc._lock:
        ctx = acc._c()
        out = acc._out_a
        if type(b) is Tensor:  # the training loop's case, kept lean
            pair = (a, b)
            ha, hb = _pin_all(pair)
            try:
                st = fn(ctx, ha, hb, out)
            finally:
                _unpin_all(pair)
        else:
            with _Args((a, b), convert=(1,)) as (ha, hb):
                st = fn(ctx, ha, hb, out)
        _check(st, ctx)
        return Tensor._wrap(out[0], acc)


def cross_entropy(logits: Tensor, targets: ArrayLike, *, accelerator: Optional[Accelerator] = None) -> Tensor:
    """Mean cross-entropy of logits [batch, classes] against int64/int32 class indices [batch]."""
    return _loss(lib.accel_loss_cross_entropy, "cross_entropy", logits, targets, accelerator)


def mse_loss(input: Tensor, target: ArrayLike, *, accelerator: Optional[Accelerator] = None) -> Tensor:
    """Mean squared error of input against a float target of the same shape."""
    return _loss(lib.accel_loss_mse, "mse_loss", input, target, accelerator)
