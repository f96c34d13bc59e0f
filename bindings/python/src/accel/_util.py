"""Arguments for C: paths and strings (refused with a NUL byte), integers, the fields of an
options struct (_fill), and the error for an integer a C call cannot hold (_overflow); each
refusal is an InvalidArgumentError naming what was wrong."""

from __future__ import annotations

import os
import reprlib
from typing import Any, Dict, Tuple, Union

from . import _lib
from ._errors import InvalidArgumentError, Status
from ._ffi import ffi


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
    name = next((k for k, v in vars(_lib.lib).items() if v is fn), "accel")
    return InvalidArgumentError(Status.INVALID_ARGUMENT, f"{name}: an integer argument is out of range ({exc})")
