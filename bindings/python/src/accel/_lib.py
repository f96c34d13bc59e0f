"""libaccel itself: `lib`, loaded on first use, the library's version, and _NoCopy, the base of
every object that owns one of its handles.

Every C call goes through the module global `lib` as `_lib.lib.accel_xxx(...)` (never a copy of
the name: load_library rebinds it). It loads libaccel on first use (see _ffi.load: ACCEL_LIBRARY,
pkg-config, the system loader; then the major-version check). _NoCopy lives here, below the
errors, because Error.__reduce__ leaves out the attributes that own a handle.
"""

from __future__ import annotations

import threading
from typing import Any, NoReturn

from . import _ffi
from ._ffi import ffi


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
                        "accel_sim_report_destroy", "accel_tokenizer_destroy", "accel_last_error",
                        "accel_status_name")


def version() -> str:
    """The version of the libaccel loaded ("0.1.0")."""
    return str(ffi.string(lib.accel_version_string()).decode())


def version_number() -> int:
    """The version of the libaccel loaded as MAJOR * 10000 + MINOR * 100 + PATCH."""
    return int(lib.accel_version_number())


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
