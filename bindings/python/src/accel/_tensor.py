"""Tensors: Tensor, accel.tensor (from numpy arrays, buffers and Python numbers), the optional
numpy, and the pin count that keeps a tensor alive during another thread's C call
(_pin_all / _unpin_all)."""

from __future__ import annotations

import sys
import threading
from typing import Any, Callable, List, Optional, Sequence, Tuple, Union, TYPE_CHECKING

from . import _lib
from ._errors import ClosedError, InvalidArgumentError, Status, _check
from ._ffi import ffi
from ._options import DType, _enum
from ._util import _int

if TYPE_CHECKING:  # numpy is optional (pip install accel[numpy])
    import numpy as np
    from ._context import Accelerator  # bound at run time by _context (annotations only)


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
    return int(_lib.lib.accel_dtype_size(_enum(DType, dtype, "dtype")))


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
            _lib.lib.accel_tensor_destroy(h)

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
        return DType(self._get(_lib.lib.accel_tensor_dtype, "accel_dtype *"))

    @property
    def ndim(self) -> int:
        """The number of dimensions (accel_tensor_ndim)."""
        return int(self._get(_lib.lib.accel_tensor_ndim, "size_t *"))

    @property
    def shape(self) -> Tuple[int, ...]:
        """The shape as a tuple (accel_tensor_shape)."""
        if self._shape is None:
            n = self.ndim
            out = ffi.new("int64_t[]", max(n, 1))
            self._call(_lib.lib.accel_tensor_shape, out, n)
            self._shape = tuple(int(out[i]) for i in range(n))
        return self._shape

    @property
    def numel(self) -> int:
        """The number of elements (accel_tensor_numel)."""
        return int(self._get(_lib.lib.accel_tensor_numel, "int64_t *"))

    @property
    def nbytes(self) -> int:
        """The number of bytes numpy()/copy_to() write (accel_tensor_nbytes)."""
        return int(self._get(_lib.lib.accel_tensor_nbytes, "size_t *"))

    def __len__(self) -> int:
        """The size of the first dimension (TypeError for a 0-d tensor)."""
        shape = self.shape
        if not shape:
            raise TypeError("len() of a 0-d tensor")
        return shape[0]

    def item(self) -> float:
        """The single element as a Python float (accel_tensor_item)."""
        return float(self._get(_lib.lib.accel_tensor_item, "double *"))

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
            self._call(_lib.lib.accel_tensor_copy_to_host, dst, arr.nbytes)
        else:
            self._call(_lib.lib.accel_tensor_copy_to_host_as, int(want), dst, arr.nbytes)
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
            self._call(_lib.lib.accel_tensor_copy_to_host, dst, size)
        else:
            self._call(_lib.lib.accel_tensor_copy_to_host_as, int(_enum(DType, dtype, "dtype")), dst, size)

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
            _check(_lib.lib.accel_tensor_dtype(h, dtype_out))
            ndim = ffi.new("size_t *")
            _check(_lib.lib.accel_tensor_ndim(h, ndim))
            dims = ffi.new("int64_t[]", max(int(ndim[0]), 1))
            _check(_lib.lib.accel_tensor_shape(h, dims, ndim[0]))
            nbytes = ffi.new("size_t *")
            _check(_lib.lib.accel_tensor_nbytes(h, nbytes))
            data = bytearray(int(nbytes[0]))
            if data:
                _check(_lib.lib.accel_tensor_copy_to_host(h, ffi.from_buffer(data, require_writable=True), len(data)))
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
    _check(_lib.lib.accel_tensor_create(int(code), c_shape, len(shp), ffi.from_buffer(data) if data else ffi.NULL, out))
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
    _check(_lib.lib.accel_tensor_create(int(code), c_shape, len(shp), src, out))
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
        _lib.lib.accel_tensor_destroy(h)
