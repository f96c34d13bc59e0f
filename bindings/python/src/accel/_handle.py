"""The handles of the objects made from an Accelerator: _Child, the lifetime rules Model,
Optimizer, Scheduler and DataLoader share (the Accelerator's lock, close order, what a
finalizer may release), and _Args, the arguments of one C call (tensors pinned, array-likes
converted, objects checked open)."""

from __future__ import annotations

import threading
from typing import Any, Callable, List, Optional, Sequence, Tuple, TYPE_CHECKING

from . import _lib
from ._errors import ClosedError, InvalidStateError, Status, _check
from ._ffi import ffi
from ._lib import _NoCopy
from ._tensor import Tensor, _pin_all, _unpin_all, tensor
from ._util import _overflow

if TYPE_CHECKING:
    from ._context import Accelerator  # bound at run time by _context (annotations only)


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


def _destroy_handle(kind: str, handle: Any) -> None:
    if kind == "model":
        _lib.lib.accel_model_destroy(handle)
    elif kind == "optimizer":
        _lib.lib.accel_optimizer_destroy(handle)
    elif kind == "scheduler":
        _lib.lib.accel_scheduler_destroy(handle)
    elif kind == "dataloader":
        _lib.lib.accel_dataloader_destroy(handle)


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
                        f"{name}.close: an open {'optimizer' if self._destroy == 'model' else 'scheduler'} "
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
