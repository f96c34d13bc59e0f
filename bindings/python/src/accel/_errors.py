"""Errors: Status, accel.Error and its subclasses (one per status), error_for, and _check,
which raises the error of a failed C call."""

from __future__ import annotations

import builtins
import enum
from typing import Any, Dict, Tuple, Type, Union

from . import _lib
from ._ffi import ffi
from ._lib import _NoCopy


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
    return str(ffi.string(_lib.lib.accel_status_name(int(status))).decode())


def _fail(status: int, ctx: Any = ffi.NULL) -> Any:
    """Raises the error of a failed call. Must run on the thread that made the call, right after
    it: accel_last_error(NULL) is thread-local."""
    message = ffi.string(_lib.lib.accel_last_error(ctx)).decode("utf-8", "replace")
    if not message:
        message = f"{status_name(status)} (the library gave no message)"
    raise error_for(status, message)


def _check(status: int, ctx: Any = ffi.NULL) -> None:
    """Raises the error of a call that returned `status` (nothing for ACCEL_OK); ctx as for _fail."""
    if status:
        _fail(status, ctx)
