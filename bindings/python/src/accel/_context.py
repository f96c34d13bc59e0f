"""The Accelerator (accel_context): device, precision, accumulation, processes, checkpoints,
trackers, inference copies; and the losses, computed on an Accelerator's context."""

from __future__ import annotations

import contextlib
import os
import sys
import threading
import weakref
from typing import Any, Callable, Dict, Iterator, List, Mapping, Optional, Sequence, Type, Union

from . import _data, _handle, _lib, _model, _realtime, _tensor
from ._data import DataLoader
from ._errors import ClosedError, InvalidArgumentError, InvalidStateError, Status, UnsupportedError, _check
from ._ffi import ffi
from ._handle import _Args, _Child, _destroy_handle
from ._lib import _NoCopy
from ._model import Model, Optimizer, Scheduler, StepResult
from ._options import (Backend, Device, LogWriter, Loss, Offload, Precision, ReduceOp, Strategy, _enum, _log_writers,
                       _options)
from ._realtime import Inference, TrainResult
from ._tensor import ArrayLike, Tensor, _pin_all, _unpin_all
from ._util import _cpath, _cstr, _fill, _int, _overflow


# ------------------------------------------------------------------------------------------
# The Accelerator
# ------------------------------------------------------------------------------------------


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
    backend, timeout and offload is the ACCEL_MIXED_PRECISION / ACCEL_STRATEGY / ACCEL_BACKEND /
    ACCEL_TIMEOUT / ACCEL_OFFLOAD environment variable when set. offload="optimizer" keeps the
    optimizer's state and the fp32 master weights in host memory (ZeRO-Offload; the same
    weights, bit for bit, as offload="none"). Calls from several threads are serialised (a lock).

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
                 offload: Union[Offload, str, None] = None, split_batches: bool = False,
                 even_batches: bool = True) -> None:
        """Creates the context (accel_init). split_batches/even_batches are the defaults of the
        DataLoaders made from it (Accelerate's arguments of the same names)."""
        self._ctx: Any = None
        self._owned = True
        self._records: Dict[int, List[Any]] = {}
        opts = _options(mixed_precision, gradient_accumulation_steps, cpu, seed, strategy, backend, timeout,
                        num_threads, device, device_index, loss_scale_init, loss_scale_growth_factor,
                        loss_scale_backoff_factor, loss_scale_growth_interval, bucket_bytes, offload)
        out = ffi.new("accel_context **")
        _check(_lib.lib.accel_init(opts, out))  # accel_last_error(NULL): there is no context yet
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
            _lib.lib.accel_destroy(ctx)

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
                self._call(_lib.lib.accel_prepare, *(ffi.NULL if o is None else o for o in pick))
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
                st = _lib.lib.accel_backward(ctx, h)
            finally:
                _unpin_all(one)
            _check(st, ctx)
            self._pending_backward = True

    def step(self) -> StepResult:
        """accel_step: ends a micro-batch (what optimizer.step() calls)."""
        with self._lock:
            ctx = self._c()
            r = self._step_out
            _check(_lib.lib.accel_step(ctx, r), ctx)
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
        return bool(self._get(_lib.lib.accel_sync_gradients, "int *"))

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
        self._call(_lib.lib.accel_clip_grad_norm, float(max_norm), out)
        return float(out[0])

    @property
    def loss_scale(self) -> float:
        """The current fp16 loss scale (1 unless fp16)."""
        return float(self._get(_lib.lib.accel_loss_scale, "double *"))

    @property
    def device(self) -> str:
        """"cpu" or "cuda" (accel_device_kind)."""
        return Device(self._get(_lib.lib.accel_device_kind, "accel_device *")).name.lower()

    @property
    def mixed_precision(self) -> Precision:
        """The precision this Accelerator trains in (accel_mixed_precision): Precision.NO, BF16
        or FP16, with "auto" resolved for the device (BF16 or NO; never AUTO)."""
        return Precision(self._get(_lib.lib.accel_mixed_precision, "accel_precision *"))

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
        return int(self._get(_lib.lib.accel_process_index, "int32_t *"))

    @property
    def num_processes(self) -> int:
        """The number of processes (ranks) in the world."""
        return int(self._get(_lib.lib.accel_num_processes, "int32_t *"))

    @property
    def local_process_index(self) -> int:
        """This process's index on its node."""
        return int(self._get(_lib.lib.accel_local_process_index, "int32_t *"))

    @property
    def is_main_process(self) -> bool:
        """True on process 0."""
        return bool(self._get(_lib.lib.accel_is_main_process, "int *"))

    @property
    def is_local_main_process(self) -> bool:
        """True on the main process of each node."""
        return bool(self._get(_lib.lib.accel_is_local_main_process, "int *"))

    def wait_for_everyone(self) -> None:
        """A barrier across the processes (accel_barrier)."""
        with self._lock:
            ctx = self._c()
            _check(_lib.lib.accel_barrier(ctx), ctx)

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
        return self._collective(_lib.lib.accel_reduce, tensor, int(_enum(ReduceOp, reduction, "reduction")))

    def broadcast(self, tensor: ArrayLike, from_process: int = 0) -> Tensor:
        """Every process receives process `from_process`'s tensor (accel_broadcast)."""
        return self._collective(_lib.lib.accel_broadcast, tensor, _int(from_process, "from_process"))

    def gather(self, tensor: ArrayLike) -> Tensor:
        """Concatenates every process's tensor along dimension 0, in process order."""
        return self._collective(_lib.lib.accel_gather, tensor)

    def gather_for_metrics(self, input_data: ArrayLike) -> Tensor:
        """gather() minus the rows even_batches duplicated in the last batch."""
        return self._collective(_lib.lib.accel_gather_for_metrics, input_data)

    def pad_across_processes(self, tensor: ArrayLike, dim: int = 0, pad_index: float = 0,
                             pad_first: bool = False) -> Tensor:
        """Pads dimension `dim` of every process's tensor to the largest size with pad_index."""
        return self._collective(_lib.lib.accel_pad_across_processes, tensor, _int(dim, "dim"), float(pad_index),
                                1 if pad_first else 0)

    def print(self, *args: Any, sep: str = " ") -> None:
        """Prints on the main process only (accel_print)."""
        sys.stdout.flush()
        self._call(_lib.lib.accel_print, _cstr(sep.join(str(a) for a in args), "print: the text"))

    def set_seed(self, seed: int, device_specific: bool = False) -> None:
        """Reseeds the generators (plus the process index when device_specific)."""
        self._call(_lib.lib.accel_set_seed, _int(seed, "seed"), 1 if device_specific else 0)

    def charge_compute(self, seconds: float, label: Optional[str] = None) -> None:
        """Simulator: charges compute time to this rank's virtual clock (a no-op outside it)."""
        self._call(_lib.lib.accel_sim_charge_compute, float(seconds), ffi.NULL if label is None else _cstr(label, "charge_compute: label"))

    # -- checkpoints -----------------------------------------------------------------------

    def set_project(self, project_dir: Union[str, "os.PathLike[str]"], total_limit: int = 0) -> None:
        """Where save_state()/load_state() without a directory go: <project_dir>/checkpoints/checkpoint_N,
        keeping the newest `total_limit` (0: all)."""
        opts = ffi.new("accel_project_options *")
        _check(_lib.lib.accel_project_options_init(opts, _lib.lib.ACCEL_PROJECT_OPTIONS_VERSION))
        path = ffi.new("char[]", _cpath(project_dir, "project_dir"))
        opts.project_dir = path
        _fill(opts, total_limit=total_limit)
        self._call(_lib.lib.accel_set_project, opts)
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
        return self._checkpoint(_lib.lib.accel_save_state, output_dir)

    def load_state(self, input_dir: Union[str, "os.PathLike[str]", None] = None) -> str:
        """Restores a saved state (None: the project's newest checkpoint). Returns the directory."""
        return self._checkpoint(_lib.lib.accel_load_state, input_dir)

    @property
    def last_checkpoint(self) -> str:
        """The directory of the last successful save_state/load_state ("" before either)."""
        with self._lock:  # the string belongs to the context: copied before the next call
            return os.fsdecode(ffi.string(self._get(_lib.lib.accel_last_checkpoint, "const char **")))

    def save_pretrained(self, model: Model, save_directory: Union[str, "os.PathLike[str]"]) -> str:
        """Writes a causal LM as a Hugging Face directory (accel_save_pretrained): config.json and
        model.safetensors, in the parameters' dtype. A collective under several processes."""
        if not isinstance(model, Model) or model._acc is not self:
            raise InvalidArgumentError(Status.INVALID_ARGUMENT, "save_pretrained: pass a Model made from this Accelerator")
        path = os.fspath(save_directory)
        self._call(_lib.lib.accel_save_pretrained, model, _cpath(path))
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
        self._call(_lib.lib.accel_save_model, model, _cpath(path))
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
        _check(_lib.lib.accel_tracker_options_init(opts, _lib.lib.ACCEL_TRACKER_OPTIONS_VERSION))
        path = ffi.new("char[]", _cpath(log_dir, "log_dir"))
        opts.log_dir = path
        opts.writers = _log_writers(writers)
        opts.all_processes = 1 if all_processes else 0
        self._call(_lib.lib.accel_init_trackers, opts)

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
        self._call(_lib.lib.accel_log, _int(step, "step"), names, ffi.new("double[]", nums), len(nums))

    def end_training(self) -> None:
        """Flushes and closes the trackers (accel_end_training; close() does too); nothing when
        none are open. init_trackers() may open them again (a new event file)."""
        with self._lock:
            ctx = self._c()
            _check(_lib.lib.accel_end_training(ctx), ctx)

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
        _check(_lib.lib.accel_inference_options_init(opts, _lib.lib.ACCEL_INFERENCE_OPTIONS_VERSION))
        _fill(opts, num_threads=num_threads)
        out = ffi.new("accel_inference **")
        self._call(_lib.lib.accel_inference_create, model, opts, out)
        return Inference._wrap(out[0], self)

    def publish_weights(self, model: Model) -> int:
        """Publishes the model's current trained weights to every inference copy of it
        (accel_publish_weights) and returns their version (1 was the first copy's, then 2,
        3, ...). Each copy's next run uses them; a run in progress finishes with the weights
        it started with. The weights are copied: training goes on at once. Under ZeRO a
        collective (every process calls it)."""
        self._own_model(model, "publish_weights")
        out = ffi.new("uint64_t *")
        self._call(_lib.lib.accel_publish_weights, model, out)
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
        out.version = _lib.lib.ACCEL_TRAIN_RESULT_VERSION
        with self._lock:
            self._call(_lib.lib.accel_train_micro_batches, model, loader, int(kind), _int(max_micro_batches, "max_micro_batches"),
                       float(max_seconds), out)
            if out.micro_batches:
                self._pending_backward = False  # each micro-batch ended with accel_step
        return TrainResult(int(out.micro_batches), int(out.optimizer_steps), int(out.skipped_steps),
                           bool(out.epoch_ended), float(out.mean_loss), float(out.seconds))

    def __repr__(self) -> str:
        if self._ctx is None:
            return "<accel.Accelerator closed>"
        return f"<accel.Accelerator process {self.process_index}/{self.num_processes} on {self.device}>"


# The modules below name Accelerator in annotations only (importing it there would be a cycle):
# bound into them here so that typing.get_type_hints resolves those annotations at run time.
for _module in (_tensor, _handle, _model, _data, _realtime):
    setattr(_module, "Accelerator", Accelerator)
del _module


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
    return _loss(_lib.lib.accel_loss_cross_entropy, "cross_entropy", logits, targets, accelerator)


def mse_loss(input: Tensor, target: ArrayLike, *, accelerator: Optional[Accelerator] = None) -> Tensor:
    """Mean squared error of input against a float target of the same shape."""
    return _loss(_lib.lib.accel_loss_mse, "mse_loss", input, target, accelerator)
