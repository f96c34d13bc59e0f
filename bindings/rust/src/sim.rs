//! The simulator: N ranks in this process (`accel_sim_run`), each running a Rust closure.
use std::any::Any;
use std::fmt;
use std::os::raw::{c_char, c_void};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::ptr::NonNull;
use std::sync::Mutex;

use crate::context::Context;
use crate::error::{check, last_error, Error, Result, Status};
use crate::options::{Options, SimOptions};
use crate::sys;
use crate::util::owned_string;

/// One rank's outcome in a [`SimReport`].
#[derive(Debug, Clone, PartialEq)]
pub struct RankOutcome {
    /// None when the rank succeeded.
    pub status: Option<Status>,
    /// The library's error message for the rank ("" when it succeeded).
    pub error: String,
    /// Peak device memory in bytes.
    pub peak_bytes: u64,
    /// Peak host memory in bytes: what offload kept there (0 without offload)
    /// (`accel_sim_report_rank_host`).
    pub host_peak_bytes: u64,
    /// The bytes that crossed between the rank's device and the host, both directions.
    pub host_transfer_bytes: u64,
    /// Their time over the topology's host link, in seconds (included in the predicted time).
    pub host_transfer_seconds: f64,
}

/// The outcome of a simulated run (`accel_sim_report`), destroyed on drop.
pub struct SimReport {
    raw: NonNull<sys::accel_sim_report>,
    /// Held by every read: the header promises concurrent reads only for tensors, so reads
    /// of one report from several threads (through `&SimReport`, which `Sync` allows) take
    /// turns. Reports are read rarely, after a run: the lock costs nothing that matters.
    lock: Mutex<()>,
}

// SAFETY: a report is independent of any context and of the thread that made it; it is
// destroyed through ownership (Drop, `&mut`), and every read through `&self` holds `lock`, so
// no two threads use the C object at once.
unsafe impl Send for SimReport {}
// SAFETY: see Send: the reads through `&self` are serialised by `lock`.
unsafe impl Sync for SimReport {}

impl Drop for SimReport {
    fn drop(&mut self) {
        // SAFETY: an owned report, destroyed once (here).
        unsafe { sys::accel_sim_report_destroy(self.raw.as_ptr()) }
    }
}

impl SimReport {
    fn turn(&self) -> std::sync::MutexGuard<'_, ()> {
        self.lock.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The raw handle (still owned by this report; do not destroy it, and do not read it
    /// while another thread reads the report).
    pub fn as_raw(&self) -> *mut sys::accel_sim_report {
        self.raw.as_ptr()
    }

    /// The number of ranks (`accel_sim_report_world_size`).
    pub fn world_size(&self) -> Result<i32> {
        let _turn = self.turn();
        let mut v = 0;
        // SAFETY: the report is live (owned by `self`); out-parameters are locals.
        check(unsafe { sys::accel_sim_report_world_size(self.raw.as_ptr(), &mut v) }, std::ptr::null())?;
        Ok(v)
    }

    /// Rank `rank`'s outcome (`accel_sim_report_rank`, `accel_sim_report_rank_host`).
    pub fn rank(&self, rank: i32) -> Result<RankOutcome> {
        let _turn = self.turn();
        let mut st = 0;
        let mut msg: *const c_char = std::ptr::null();
        let mut peak = 0u64;
        check(
            // SAFETY: the report is live (owned by `self`); out-parameters are locals.
            unsafe { sys::accel_sim_report_rank(self.raw.as_ptr(), rank, &mut st, &mut msg, &mut peak) },
            std::ptr::null(),
        )?;
        // SAFETY: `msg` is the report's string (or NULL), copied at once while `self` keeps the report alive.
        let error = unsafe { owned_string(msg) };
        let (mut host_peak, mut moved, mut seconds) = (0u64, 0u64, 0.0f64);
        check(
            // SAFETY: the report is live (owned by `self`); out-parameters are locals.
            unsafe { sys::accel_sim_report_rank_host(self.raw.as_ptr(), rank, &mut host_peak, &mut moved, &mut seconds) },
            std::ptr::null(),
        )?;
        Ok(RankOutcome {
            status: if st == sys::ACCEL_OK { None } else { Some(Status::from_code(st)) },
            error,
            peak_bytes: peak,
            host_peak_bytes: host_peak,
            host_transfer_bytes: moved,
            host_transfer_seconds: seconds,
        })
    }

    /// Every rank's outcome, in rank order.
    pub fn ranks(&self) -> Result<Vec<RankOutcome>> {
        (0..self.world_size()?).map(|r| self.rank(r)).collect()
    }

    /// The cost model's predicted wall time (`accel_sim_report_predicted_seconds`).
    pub fn predicted_seconds(&self) -> Result<f64> {
        let _turn = self.turn();
        let mut v = 0.0;
        // SAFETY: the report is live (owned by `self`); out-parameters are locals.
        check(unsafe { sys::accel_sim_report_predicted_seconds(self.raw.as_ptr(), &mut v) }, std::ptr::null())?;
        Ok(v)
    }
}

impl fmt::Debug for SimReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SimReport")
            .field("world_size", &self.world_size().ok())
            .field("ranks", &self.ranks().ok())
            .field("predicted_seconds", &self.predicted_seconds().ok())
            .finish()
    }
}

/// A failed simulated run: the report (None when the run failed before any rank ran, e.g.
/// invalid options), the failing rank, and its error. The rank is the lowest one that failed
/// on its own (not with the COMMUNICATION/TIMEOUT error a rank gets when a peer failed);
/// `summary` keeps the library's own choice. When the failing rank's closure
/// returned an `Err` or panicked, `error` is that error (a panic is `Status::Internal` with
/// "rank R panicked: MESSAGE"); otherwise it is the library's error for the rank.
///
/// `Send + Sync + 'static` (the report's reads take turns on a lock), so `?` converts it into
/// `Box<dyn std::error::Error + Send + Sync>` or `anyhow::Error`.
#[derive(Debug)]
pub struct SimError {
    pub report: Option<SimReport>,
    /// The first failing rank (None when no rank ran).
    pub rank: Option<i32>,
    pub error: Error,
    /// The library's summary (`accel_last_error(NULL)` after `accel_sim_run`: "rank R: ...").
    pub summary: String,
    /// Every error a closure returned or panicked with, by rank.
    pub rank_errors: Vec<(i32, Error)>,
}

impl fmt::Display for SimError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.rank {
            Some(r) => write!(f, "simulated rank {} failed: {}", r, self.error),
            None => write!(f, "simulation failed: {}", self.error),
        }
    }
}

impl std::error::Error for SimError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.error)
    }
}

impl From<SimError> for Error {
    fn from(e: SimError) -> Error {
        match e.rank {
            Some(r) => Error::new(e.error.status, format!("rank {}: {}", r, e.error.message)),
            None => e.error,
        }
    }
}

struct RankData<'f, F> {
    f: &'f F,
    errors: Mutex<Vec<(i32, Error)>>,
}

fn panic_message(p: &(dyn Any + Send)) -> String {
    if let Some(s) = p.downcast_ref::<&str>() {
        s.to_string()
    } else if let Some(s) = p.downcast_ref::<String>() {
        s.clone()
    } else {
        "a panic with a non-string payload".to_string()
    }
}

/// Drops a panic payload without letting a panic of its own `Drop` escape: that panic's
/// payload is leaked instead (its drop could panic in turn).
fn drop_payload(payload: Box<dyn Any + Send>) {
    if let Err(again) = catch_unwind(AssertUnwindSafe(move || drop(payload))) {
        std::mem::forget(again);
    }
}

/// The `accel_rank_fn` given to `accel_sim_run`: runs the user's closure for one rank.
///
/// Nothing may unwind into C. Every step runs under `catch_unwind`, and the payloads of
/// caught panics are dropped through [`drop_payload`] (a payload's `Drop` may panic too).
/// A panic raised by a `Drop` *while* a panic unwinds is not catchable: Rust aborts the
/// process there, before anything reaches C.
///
/// # Safety
/// `user` is the `RankData<F>` that [`run`] passed to `accel_sim_run` (alive for the whole
/// run); `ctx` is the rank's live context, valid until this function returns.
unsafe extern "C" fn trampoline<F>(ctx: *mut sys::accel_context, user: *mut c_void) -> sys::accel_status
where
    F: Fn(&Context) -> Result<()> + Sync,
{
    let outcome = catch_unwind(AssertUnwindSafe(|| {
        // SAFETY: `user` points to the RankData that `run` keeps alive until accel_sim_run
        // returns; it is only read here (the error list is behind a Mutex).
        let data = &*(user as *const RankData<'_, F>);
        let mut rank = -1;
        // SAFETY: ctx is the rank's live context; `rank` is a valid out-parameter (left
        // at -1 should the call fail).
        sys::accel_process_index(ctx, &mut rank);
        let result = catch_unwind(AssertUnwindSafe(|| {
            // SAFETY: ctx is live for this call. The Context is borrowed (never destroyed by
            // Rust) and dropped, with the objects its `prepare` kept, before this function
            // returns; the closure gets `&Context` for the call only (it cannot keep it:
            // the reference's lifetime is the call's, and Context is not Clone).
            let context = Context::borrowed(ctx);
            (data.f)(&context)
        }));
        let err = match result {
            Ok(Ok(())) => return sys::ACCEL_OK,
            Ok(Err(e)) => e,
            Err(payload) => {
                let message = format!("rank {} panicked: {}", rank, panic_message(&*payload));
                drop_payload(payload);
                Error::new(Status::Internal, message)
            }
        };
        let code = match err.status {
            Status::Unknown(_) => sys::ACCEL_ERR_INTERNAL,
            s => s.code(),
        };
        data.errors.lock().unwrap_or_else(|e| e.into_inner()).push((rank, err));
        code
    }));
    match outcome {
        Ok(code) => code,
        Err(payload) => {
            drop_payload(payload);
            sys::ACCEL_ERR_INTERNAL
        }
    }
}

/// Runs `f` once per rank of a simulated world (`accel_sim_run`): each rank in its own
/// thread with its own context made from `opts` (device: the CPU). Ranks run one at a time,
/// switching at communication, so a run is deterministic.
///
/// `f` gets the rank's context by reference for the duration of the call; it must be
/// `Sync` because the ranks are different threads. An `Err` returned by `f`, or a panic
/// (caught at the boundary, never unwinding into C), fails that rank. (A `Drop` that panics
/// while a panic unwinds aborts the process, as it does anywhere in Rust.) Returns the report
/// when every rank succeeded, else a [`SimError`] with the report and the first failing
/// rank's error.
pub fn run<F>(sim: &SimOptions, opts: &Options, f: F) -> Result<SimReport, SimError>
where
    F: Fn(&Context) -> Result<()> + Sync,
{
    let fail_before = |error: Error| SimError {
        report: None,
        rank: None,
        summary: error.message.clone(),
        error,
        rank_errors: Vec::new(),
    };
    crate::ensure_version().map_err(fail_before)?;
    let s = sim.to_sys().map_err(fail_before)?;
    let o = opts.to_sys().map_err(fail_before)?;
    let data = RankData { f: &f, errors: Mutex::new(Vec::new()) };
    let mut report = std::ptr::null_mut();
    // SAFETY: `s.raw` and `o` are complete structs whose strings (owned by `s`) outlive the call; `data` outlives the run and matches `trampoline::<F>`; `report` is a local out-parameter.
    let status = unsafe {
        sys::accel_sim_run(
            &s.raw,
            &o,
            Some(trampoline::<F>),
            &data as *const RankData<'_, F> as *mut c_void,
            &mut report,
        )
    };
    // Read the thread-local message right away, on this thread.
    let summary = if status == sys::ACCEL_OK { String::new() } else { last_error(std::ptr::null()) };
    let report = NonNull::new(report).map(|raw| SimReport { raw, lock: Mutex::new(()) });
    let rank_errors = data.errors.into_inner().unwrap_or_else(|e| e.into_inner());
    if status == sys::ACCEL_OK {
        return Ok(report.expect("accel_sim_run returned OK without a report"));
    }
    // The failing rank to report: the lowest rank whose failure was its own (not
    // ACCEL_ERR_COMMUNICATION / ACCEL_ERR_TIMEOUT, which a rank gets when a peer failed, nor
    // the simulator's "collective ... can never complete: rank Q died (...)", an
    // ACCEL_ERR_INVALID_STATE of a rank left waiting for a dead peer), else the one the
    // library's "rank R: ..." summary names (the library names the lowest failing rank, which
    // is often a rank that only saw its peer die).
    let own = report.as_ref().and_then(|rep| rep.ranks().ok()).and_then(|ranks| {
        ranks
            .iter()
            .position(|o| match o.status {
                Some(Status::Communication) | Some(Status::Timeout) | None => false,
                Some(_) => !(o.error.contains("can never complete") && o.error.contains(" died")),
            })
            .map(|p| p as i32)
    });
    let mut rank = own.or_else(|| summary
        .strip_prefix("rank ")
        .and_then(|rest| rest.split(':').next())
        .and_then(|r| r.trim().parse::<i32>().ok()));
    if rank.is_none() {
        if let Some(rep) = &report {
            if let Ok(ranks) = rep.ranks() {
                rank = ranks.iter().position(|o| o.status.is_some()).map(|p| p as i32);
            }
        }
    }
    let error = match rank {
        Some(r) => match rank_errors.iter().find(|(rr, _)| *rr == r) {
            Some((_, e)) => e.clone(),
            None => {
                let msg = report
                    .as_ref()
                    .and_then(|rep| rep.rank(r).ok())
                    .map(|o| o.error)
                    .filter(|m| !m.is_empty())
                    .unwrap_or_else(|| summary.clone());
                Error::new(Status::from_code(status), msg)
            }
        },
        None => Error::new(Status::from_code(status), summary.clone()),
    };
    if report.is_none() {
        rank = None;
    }
    Err(SimError { report, rank, error, summary, rank_errors })
}
