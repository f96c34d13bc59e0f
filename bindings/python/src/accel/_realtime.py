"""Real time: inference beside training. Inference (an inference copy of a model that picks up
the weights the trainer publishes) and what Accelerator.train_micro_batches returns."""

from __future__ import annotations

import threading
import weakref
from typing import Any, NamedTuple, TYPE_CHECKING

from . import _lib
from ._errors import ClosedError, _check
from ._ffi import ffi
from ._handle import _Args
from ._lib import _NoCopy
from ._tensor import ArrayLike, Tensor, _pin_all, _unpin_all

if TYPE_CHECKING:
    from ._context import Accelerator  # bound at run time by _context (annotations only)


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
                    st = _lib.lib.accel_inference_run(h, arr, 1, out)
                finally:
                    _unpin_all(inputs)
            else:
                with _Args(inputs, convert=range(len(inputs))) as handles:
                    arr = ffi.new("accel_tensor *[]", handles or [ffi.NULL])
                    st = _lib.lib.accel_inference_run(h, arr, len(handles), out)
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
            _check(_lib.lib.accel_inference_weights(self._handle(), version, age))
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
                _lib.lib.accel_inference_destroy(h)

    def __del__(self) -> None:
        try:
            if getattr(self, "_h", None) is None:
                return
            if not self._lock.acquire(blocking=False):
                return  # cannot happen: a running call holds a reference to the copy
            try:
                h, self._h = self._h, None
                if h is not None:
                    _lib.lib.accel_inference_destroy(h)
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
