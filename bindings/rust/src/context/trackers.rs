//! Trackers: `init_trackers`, `log`, `end_training`.

use std::os::raw::c_char;

use crate::error::Result;
use crate::options::TrackerOptions;
use crate::sys;
use crate::util::cstring;
use super::Context;

impl Context {
    // ---- trackers -------------------------------------------------------------------

    /// Opens the context's trackers (`accel_init_trackers`, Accelerate's `init_trackers`): JSON
    /// lines, CSV and TensorBoard event files in `opts.log_dir`, on the main process only unless
    /// `opts.all_processes`. Every process calls it.
    ///
    /// Errors: `Status::InvalidArgument` for an empty `log_dir`, one that is not a directory, a
    /// bad `ACCEL_LOG_WITH` (named), or a log file that is not a regular file (never written);
    /// `Status::Io` for a directory or file that cannot be created; `Status::InvalidState` when
    /// the trackers are already open.
    ///
    /// ```no_run
    /// use accel::{Context, LogWriters, Options, TrackerOptions};
    /// # fn main() -> accel::Result<()> {
    /// let ctx = Context::new(&Options::default())?;
    /// let writers = LogWriters::JSONL | LogWriters::TENSORBOARD;
    /// ctx.init_trackers(&TrackerOptions::new("runs/a").with_writers(writers))?;
    /// for step in 0..3 {
    ///     ctx.log(step, &[("loss", 1.0 / (step + 1) as f64), ("lr", 1e-3)])?;
    /// }
    /// ctx.end_training()?;
    /// # Ok(()) }
    /// ```
    pub fn init_trackers(&self, opts: &TrackerOptions) -> Result<()> {
        let (o, _dir) = opts.to_sys()?;
        // SAFETY: a live context; `o.log_dir` is NULL or points into `_dir`, alive until the end.
        self.ck(unsafe { sys::accel_init_trackers(self.raw.as_ptr(), &o) })
    }

    /// Logs a step's named scalars (`accel_log`, Accelerate's `log`), written and flushed
    /// before it returns: `ctx.log(step, &[("loss", 0.25), ("lr", 1e-3)])`. The names are
    /// non-empty and distinct; a value may be any `f64` (TensorBoard keeps an `f32`; JSON lines
    /// write a value that is not finite as `null`).
    ///
    /// Errors: `Status::InvalidState` before `init_trackers` or after `end_training`;
    /// `Status::InvalidArgument` for step < 0, no values, an empty or repeated name, and (the
    /// binding's own check, before anything is written) a name with a NUL byte;
    /// `Status::Io` when a write fails.
    pub fn log(&self, step: i64, values: &[(&str, f64)]) -> Result<()> {
        let count = i32::try_from(values.len()).map_err(|_| {
            crate::Error::invalid(format!("values: {} scalars in one call, at most {}", values.len(), i32::MAX))
        })?;
        let names = values
            .iter()
            .enumerate()
            .map(|(i, (n, _))| cstring(n, &format!("values[{}].name", i)))
            .collect::<Result<Vec<_>>>()?;
        let name_ptrs: Vec<*const c_char> = names.iter().map(|c| c.as_ptr()).collect();
        let vals: Vec<f64> = values.iter().map(|(_, v)| *v).collect();
        // SAFETY: a live context; `name_ptrs` (into `names`) and `vals` hold `count` entries each and
        // outlive the call.
        self.ck(unsafe { sys::accel_log(self.raw.as_ptr(), step, name_ptrs.as_ptr(), vals.as_ptr(), count) })
    }

    /// Flushes and closes the trackers (`accel_end_training`; dropping the context does too);
    /// `init_trackers` may open them again (a new event file). `Ok` when none are open.
    /// Errors: `Status::Io` when a file cannot be closed (its last writes may be lost; the
    /// trackers are closed all the same).
    pub fn end_training(&self) -> Result<()> {
        // SAFETY: a live context (`self`).
        self.ck(unsafe { sys::accel_end_training(self.raw.as_ptr()) })
    }
}
