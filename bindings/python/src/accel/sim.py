"""The simulator: run a Python function once per simulated GPU rank (accel_sim_run).

    report = accel.sim.run(train, world_size=4, strategy="ddp")

Each rank is a C++ thread; the ranks run one at a time, switching at communication, so a run is
deterministic. fn(acc) receives an Accelerator bound to its rank's context: the context exists
only during the call, and the Accelerator (with everything made from it) is closed when fn
returns; using it afterwards raises accel.ClosedError.
"""

from __future__ import annotations

import os
import re
import threading
from typing import Any, Callable, Dict, List, NamedTuple, Optional, Union

from . import _lib
from ._context import Accelerator
from ._errors import ClosedError, Error, InternalError, InvalidArgumentError, Status, _check, error_for
from ._ffi import ffi
from ._lib import _NoCopy
from ._options import _options
from ._util import _cpath, _cstr, _fill, _int

__all__ = ["run", "SimReport", "RankOutcome"]


class RankOutcome(NamedTuple):
    """One rank's outcome: status, error message ("" when OK), peak device memory in bytes, and
    its host side (accel_sim_report_rank_host): peak host memory in bytes (what offload kept
    there; 0 without offload), the bytes that crossed between its device and the host (both
    directions) and their time in seconds over the topology's host link (in predicted_seconds)."""
    rank: int
    status: Union[Status, int]
    error: str
    peak_bytes: int
    host_peak_bytes: int = 0
    host_transfer_bytes: int = 0
    host_transfer_seconds: float = 0.0


class SimReport(_NoCopy):
    """The outcome of a simulated run (accel_sim_report): world_size, ranks, predicted_seconds,
    and results (fn's return value per rank; None for a rank that failed). Release with close()
    or `with`; close() is idempotent and a closed report raises ClosedError. It cannot be copied
    or pickled (it owns a C handle): its fields (ranks, results, ...) can."""

    _copy_hint = "copy or pickle what it says instead: report.ranks, report.results, report.predicted_seconds"

    def __init__(self, handle: Any, results: List[Any]) -> None:
        self._h: Any = handle
        self.results = results

    def _p(self) -> Any:
        if self._h is None:
            raise ClosedError("this SimReport is closed")
        return self._h

    @property
    def world_size(self) -> int:
        """The number of ranks."""
        out = ffi.new("int32_t *")
        _check(_lib.lib.accel_sim_report_world_size(self._p(), out))
        return int(out[0])

    def rank(self, rank: int) -> RankOutcome:
        """Rank `rank`'s outcome (accel_sim_report_rank and accel_sim_report_rank_host); the
        message is copied."""
        status = ffi.new("accel_status *")
        error = ffi.new("const char **")
        peak = ffi.new("uint64_t *")
        host_peak = ffi.new("uint64_t *")
        transfer = ffi.new("uint64_t *")
        transfer_seconds = ffi.new("double *")
        r = _int(rank, "rank")
        try:
            st = _lib.lib.accel_sim_report_rank(self._p(), r, status, error, peak)
        except OverflowError as exc:
            raise InvalidArgumentError(Status.INVALID_ARGUMENT, f"accel_sim_report_rank: rank {rank!r} ({exc})") from None
        _check(st)
        _check(_lib.lib.accel_sim_report_rank_host(self._p(), r, host_peak, transfer, transfer_seconds))
        try:
            code: Union[Status, int] = Status(status[0])
        except ValueError:
            code = int(status[0])
        msg = ffi.string(error[0]).decode("utf-8", "replace") if error[0] != ffi.NULL else ""
        return RankOutcome(int(rank), code, msg, int(peak[0]), int(host_peak[0]), int(transfer[0]),
                           float(transfer_seconds[0]))

    @property
    def ranks(self) -> List[RankOutcome]:
        """Every rank's outcome, in rank order."""
        return [self.rank(r) for r in range(self.world_size)]

    @property
    def predicted_seconds(self) -> float:
        """The cost model's predicted wall time of the run on the topology."""
        out = ffi.new("double *")
        _check(_lib.lib.accel_sim_report_predicted_seconds(self._p(), out))
        return float(out[0])

    def close(self) -> None:
        """Releases the report (accel_sim_report_destroy). Idempotent."""
        h, self._h = self._h, None
        if h is not None:
            _lib.lib.accel_sim_report_destroy(h)

    def __del__(self) -> None:
        try:
            self.close()
        except BaseException:
            pass

    def __enter__(self) -> "SimReport":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        if self._h is None:
            return "<accel.sim.SimReport closed>"
        return f"<accel.sim.SimReport world_size={self.world_size} predicted_seconds={self.predicted_seconds:.6f}>"


def _python_failure(exc: BaseException, rank: int, report: SimReport) -> BaseException:
    """fn's exception re-made as the same type with the rank in its message, chained to the original."""
    text = f"sim rank {rank}: {type(exc).__name__}: {exc}"
    new: BaseException
    try:
        new = type(exc)(text)
        if text not in str(new):
            raise TypeError("unusual constructor")
    except Exception:
        new = InternalError(Status.INTERNAL, text)
    if isinstance(exc, Error) and isinstance(new, Error):
        new.status, new.message = exc.status, text
    try:
        new.report = report  # type: ignore[attr-defined]
        new.rank = rank  # type: ignore[attr-defined]
    except AttributeError:
        pass
    new.__cause__ = exc
    return new


def run(fn: Callable[[Accelerator], Any], world_size: int = 4, device_memory: Union[str, int, None] = None,
        topology: str = "8xH100", timeout: float = 60, faults: Optional[str] = None,
        trace_path: Union[str, "os.PathLike[str]", None] = None, engine_threads: int = 0,
        host_memory: Union[str, int, None] = None, **accelerator_kwargs: Any) -> SimReport:
    """Runs fn(acc) once per rank of a simulated world and returns the SimReport.

    device_memory: per-rank budget ("80GiB", "64MiB", bytes as an int, "unlimited"; None = the
    topology's GPU memory, 79.15 GiB for 8xH100; over it the rank fails with OutOfMemoryError
    and PyTorch 2.x's CUDA message).
    host_memory: each rank's host-memory budget, where offload="optimizer" keeps the optimizer's
    state and master weights (a size as device_memory's; None = unlimited; over it the rank fails
    with OutOfMemoryError naming host memory).
    topology: "8xH100", "8xA100", "8xA100-40GB", "8xPCIe", "8xH200", "4xGH200", "Nx8xH100-IB", "Nx8xH200-RoCE", "Nx8xA100-EFA", .... timeout: seconds without progress
    before waiting ranks fail. faults: e.g. "kill:1@collective:3,delay:0:0.5". trace_path:
    Chrome-trace JSON of the timeline. accelerator_kwargs: as accel.Accelerator (seed=,
    strategy=, mixed_precision=, gradient_accumulation_steps=, offload=, ...); the device is the CPU.

    If a rank fails, raises the error of the first failing rank (err.report holds the report,
    err.rank the rank); if fn raised a Python exception there, an exception of the same type
    naming the rank, chained to the original."""
    lib = _lib.lib
    opts = ffi.new("accel_sim_options *")
    _check(lib.accel_sim_options_init(opts, lib.ACCEL_SIM_OPTIONS_VERSION))
    keep = []  # the strings must outlive the call

    def cstr(value: Any, what: str, path: bool = False) -> Any:
        if value is None:
            return ffi.NULL
        raw = _cpath(value, what) if path else _cstr(value if isinstance(value, bytes) else str(value), what)
        s = ffi.new("char[]", raw)
        keep.append(s)
        return s

    _fill(opts, world_size=world_size)
    opts.device_memory = cstr(device_memory, "device_memory")
    opts.topology = cstr(topology, "topology")
    _fill(opts, timeout_seconds=timeout)
    opts.faults = cstr(faults, "faults")
    opts.trace_path = cstr(trace_path, "trace_path", path=True)
    _fill(opts, engine_threads=engine_threads)
    opts.host_memory = cstr(host_memory, "host_memory")
    split_batches = bool(accelerator_kwargs.pop("split_batches", False))
    even_batches = bool(accelerator_kwargs.pop("even_batches", True))
    ctx_opts = _options(**accelerator_kwargs)
    accumulation = int(accelerator_kwargs.get("gradient_accumulation_steps", 1))

    results: List[Any] = [None] * max(int(world_size), 0)
    raised: Dict[int, BaseException] = {}
    lock = threading.Lock()

    def rank_fn(ctx: Any, user: Any) -> int:
        # Runs on the rank's C++ thread with the GIL re-acquired by cffi. No Python exception may
        # escape into C: it is remembered and the rank fails with a status.
        rank = -1
        try:
            acc = Accelerator._bind(ctx, accumulation, split_batches, even_batches)
            try:
                rank = acc.process_index
                value = fn(acc)
                if 0 <= rank < len(results):
                    results[rank] = value
                return 0
            finally:
                acc.close()  # not owned: releases what fn made, invalidates acc
        except BaseException as exc:  # noqa: B902 (KeyboardInterrupt included: never into C)
            with lock:
                raised[rank] = exc
            status = exc.status if isinstance(exc, Error) else Status.INTERNAL
            code = int(status)
            return code if -10 <= code < 0 else int(Status.INTERNAL)

    callback = ffi.callback("accel_rank_fn", rank_fn, error=int(Status.INTERNAL))
    out = ffi.new("accel_sim_report **")
    st = lib.accel_sim_run(opts, ctx_opts, callback, ffi.NULL, out)
    message = ffi.string(lib.accel_last_error(ffi.NULL)).decode("utf-8", "replace") if st else ""
    if out[0] == ffi.NULL:  # failed before any rank ran
        raise error_for(st, message or f"accel_sim_run failed ({st})")
    report = SimReport(out[0], results)
    if st == 0:
        return report
    # The root cause first: a Python exception of fn (not an accel error) on the lowest rank;
    # otherwise the library's first failing rank ("rank R: ..." in accel_last_error(NULL)).
    python_errors = sorted(r for r, e in raised.items() if not isinstance(e, Error))
    if python_errors:
        r = python_errors[0]
        raise _python_failure(raised[r], r, report) from raised[r]
    # The library's message is "accel_sim_run: rank R: <the rank's error>"; for an accel error the
    # binding raised itself (an argument it refused before calling C) the library knew only the
    # status ("rank R: ACCEL_ERR_INVALID_ARGUMENT"): the rank's own message replaces it.
    m = re.search(r"\brank (\d+): ", message)
    first = int(m.group(1)) if m else next((o.rank for o in report.ranks if o.status != Status.OK), -1)
    cause = raised.get(first)
    if isinstance(cause, Error) and cause.message not in message:
        head = message[:m.end()] if m else f"accel_sim_run: rank {first}: "
        message = head + cause.message
    err = error_for(st, message)
    err.report = report  # type: ignore[attr-defined]
    err.rank = first  # type: ignore[attr-defined]
    raise err from cause
