//! The context's options, and those of its checkpoints, trackers and inference copies.

use std::ffi::CString;
use std::path::PathBuf;

use crate::error::{check, Result};
use crate::sys;
use crate::util::path_cstring;
use super::enums::{Backend, Device, Offload, Precision, Strategy};

/// `accel_options` (version 4). See the header for each field's domain; the library checks
/// them in `Context::new` / `sim::run` (`Status::InvalidArgument` naming the field).
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct Options {
    pub mixed_precision: Precision,
    pub gradient_accumulation_steps: i32,
    pub seed: u64,
    pub device: Device,
    pub device_index: i32,
    pub loss_scale_init: f64,
    pub loss_scale_growth_factor: f64,
    pub loss_scale_backoff_factor: f64,
    pub loss_scale_growth_interval: i32,
    pub num_threads: i32,
    pub strategy: Strategy,
    pub bucket_bytes: i64,
    pub backend: Backend,
    pub timeout_seconds: f64,
    /// What lives in host memory (default `Offload::None`, or the `ACCEL_OFFLOAD` environment
    /// variable when left at it): `Offload::Optimizer` keeps the optimizer's state and the fp32
    /// master weights there (ZeRO-Offload; the same weights, bit for bit).
    pub offload: Offload,
}

impl Default for Options {
    /// `ACCEL_OPTIONS_INIT`
    fn default() -> Options {
        Options {
            mixed_precision: Precision::No,
            gradient_accumulation_steps: 1,
            seed: 0,
            device: Device::Auto,
            device_index: 0,
            loss_scale_init: 65536.0,
            loss_scale_growth_factor: 2.0,
            loss_scale_backoff_factor: 0.5,
            loss_scale_growth_interval: 2000,
            num_threads: 0,
            strategy: Strategy::No,
            bucket_bytes: 25 * 1024 * 1024,
            backend: Backend::Auto,
            timeout_seconds: 0.0,
            offload: Offload::None,
        }
    }
}

impl Options {
    /// The raw struct: `accel_options_init(ACCEL_OPTIONS_VERSION)`, then every field.
    pub fn to_sys(&self) -> Result<sys::accel_options> {
        let mut o = sys::ACCEL_OPTIONS_INIT;
        // SAFETY: o is a valid, writable accel_options of the current version.
        check(unsafe { sys::accel_options_init(&mut o, sys::ACCEL_OPTIONS_VERSION) }, std::ptr::null())?;
        o.mixed_precision = self.mixed_precision.to_raw();
        o.gradient_accumulation_steps = self.gradient_accumulation_steps;
        o.seed = self.seed;
        o.device = self.device.to_raw();
        o.device_index = self.device_index;
        o.loss_scale_init = self.loss_scale_init;
        o.loss_scale_growth_factor = self.loss_scale_growth_factor;
        o.loss_scale_backoff_factor = self.loss_scale_backoff_factor;
        o.loss_scale_growth_interval = self.loss_scale_growth_interval;
        o.num_threads = self.num_threads;
        o.strategy = self.strategy.to_raw();
        o.bucket_bytes = self.bucket_bytes;
        o.backend = self.backend.to_raw();
        o.timeout_seconds = self.timeout_seconds;
        o.offload = self.offload.to_raw();
        Ok(o)
    }
}

setters!(Options {
    with_mixed_precision mixed_precision: Precision,
    with_gradient_accumulation_steps gradient_accumulation_steps: i32,
    with_seed seed: u64,
    with_device device: Device,
    with_device_index device_index: i32,
    with_loss_scale_init loss_scale_init: f64,
    with_loss_scale_growth_factor loss_scale_growth_factor: f64,
    with_loss_scale_backoff_factor loss_scale_backoff_factor: f64,
    with_loss_scale_growth_interval loss_scale_growth_interval: i32,
    with_num_threads num_threads: i32,
    with_strategy strategy: Strategy,
    with_bucket_bytes bucket_bytes: i64,
    with_backend backend: Backend,
    with_timeout_seconds timeout_seconds: f64,
    with_offload offload: Offload,
});

/// `accel_project_options`
#[derive(Debug, Clone, PartialEq, Default)]
#[non_exhaustive]
pub struct ProjectOptions {
    /// non-empty; checkpoints go to `<project_dir>/checkpoints/checkpoint_N`
    pub project_dir: PathBuf,
    /// keep the newest N automatic checkpoints; 0 = keep all (the default)
    pub total_limit: i32,
}

impl ProjectOptions {
    /// A project in `project_dir`, the other fields at their defaults.
    pub fn new(project_dir: impl Into<PathBuf>) -> ProjectOptions {
        ProjectOptions { project_dir: project_dir.into(), ..ProjectOptions::default() }
    }

    /// The raw struct (version and defaults from `accel_project_options_init`) and the
    /// C string its `project_dir` points into.
    pub fn to_sys(&self) -> Result<(sys::accel_project_options, CString)> {
        let mut o = sys::ACCEL_PROJECT_OPTIONS_INIT;
        check(
            // SAFETY: `o` is a writable struct of this version (the init writes only that version's bytes).
            unsafe { sys::accel_project_options_init(&mut o, sys::ACCEL_PROJECT_OPTIONS_VERSION) },
            std::ptr::null(),
        )?;
        let dir = path_cstring(&self.project_dir, "ProjectOptions.project_dir")?;
        o.project_dir = dir.as_ptr();
        o.total_limit = self.total_limit;
        Ok((o, dir))
    }
}

setters!(ProjectOptions {
    with_project_dir project_dir: impl Into<PathBuf> => |v| v.into(),
    with_total_limit total_limit: i32,
});

/// A set of `accel_log_writer`s: where [`Context::log`](crate::Context::log) writes a step's
/// scalars. Combine with `|`: `LogWriters::JSONL | LogWriters::CSV`. The empty set (the
/// default) leaves the choice to the library: the environment's `ACCEL_LOG_WITH` ("jsonl",
/// "csv", "tensorboard", "all", comma-separated), else JSON lines.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct LogWriters(u32);

impl LogWriters {
    /// `LOG_DIR/metrics.jsonl`, appended to: `{"step":S,"wall_time":T,"values":{"NAME":V,...}}`
    /// a line per call (a value that is not finite is `null`) (`ACCEL_LOG_JSONL`)
    pub const JSONL: LogWriters = LogWriters(sys::ACCEL_LOG_JSONL as u32);
    /// `LOG_DIR/metrics.csv`, appended to: `wall_time,step,name,value`, a row per scalar
    /// (`ACCEL_LOG_CSV`)
    pub const CSV: LogWriters = LogWriters(sys::ACCEL_LOG_CSV as u32);
    /// `LOG_DIR/events.out.tfevents.TIME.HOST.PID`, a new one for each `init_trackers`, that
    /// TensorBoard reads (scalars as `f32`) (`ACCEL_LOG_TENSORBOARD`)
    pub const TENSORBOARD: LogWriters = LogWriters(sys::ACCEL_LOG_TENSORBOARD as u32);
    /// The three writers.
    pub const ALL: LogWriters = LogWriters(Self::JSONL.0 | Self::CSV.0 | Self::TENSORBOARD.0);

    /// The empty set: the environment's `ACCEL_LOG_WITH`, else `JSONL`.
    pub const fn empty() -> LogWriters {
        LogWriters(0)
    }
    /// No writer named (the library chooses).
    pub const fn is_empty(self) -> bool {
        self.0 == 0
    }
    /// Every writer of `other` is in `self`.
    pub const fn contains(self, other: LogWriters) -> bool {
        self.0 & other.0 == other.0
    }
    /// The raw OR of `accel_log_writer` values.
    pub const fn bits(self) -> u32 {
        self.0
    }
    /// The set for a raw OR of `accel_log_writer` values (None when it has another bit).
    pub const fn from_bits(bits: u32) -> Option<LogWriters> {
        if bits & !Self::ALL.0 == 0 {
            Some(LogWriters(bits))
        } else {
            None
        }
    }
}

impl std::ops::BitOr for LogWriters {
    type Output = LogWriters;
    fn bitor(self, rhs: LogWriters) -> LogWriters {
        LogWriters(self.0 | rhs.0)
    }
}

impl std::ops::BitOrAssign for LogWriters {
    fn bitor_assign(&mut self, rhs: LogWriters) {
        self.0 |= rhs.0;
    }
}

impl std::fmt::Debug for LogWriters {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let all = [(LogWriters::JSONL, "JSONL"), (LogWriters::CSV, "CSV"), (LogWriters::TENSORBOARD, "TENSORBOARD")];
        let names: Vec<&str> = all
            .iter()
            .filter(|(w, _)| self.contains(*w))
            .map(|(_, n)| *n)
            .collect();
        if names.is_empty() {
            f.write_str("LogWriters(empty)")
        } else {
            write!(f, "LogWriters({})", names.join(" | "))
        }
    }
}

/// `accel_tracker_options`: where and how [`Context::init_trackers`](crate::Context::init_trackers)
/// opens the trackers (Accelerate's `init_trackers`).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct TrackerOptions {
    /// Required (empty is NULL in C, which `init_trackers` refuses); created where missing.
    pub log_dir: PathBuf,
    /// Empty (the default): the environment's `ACCEL_LOG_WITH`, else `LogWriters::JSONL`.
    pub writers: LogWriters,
    /// true: every process writes, into `LOG_DIR/process-RANK`; false (the default): the main
    /// process alone writes, into `LOG_DIR`, and the others check their arguments and write nothing.
    pub all_processes: bool,
}

impl TrackerOptions {
    /// Trackers in `log_dir`, the other fields at their defaults.
    pub fn new(log_dir: impl Into<PathBuf>) -> TrackerOptions {
        TrackerOptions { log_dir: log_dir.into(), ..TrackerOptions::default() }
    }

    /// The raw struct (version and defaults from `accel_tracker_options_init`) and the C string
    /// its `log_dir` points into (keep it alive; None: an empty `log_dir`, NULL).
    pub fn to_sys(&self) -> Result<(sys::accel_tracker_options, Option<CString>)> {
        let mut o = sys::ACCEL_TRACKER_OPTIONS_INIT;
        check(
            // SAFETY: `o` is a writable struct of this version (the init writes only that version's bytes).
            unsafe { sys::accel_tracker_options_init(&mut o, sys::ACCEL_TRACKER_OPTIONS_VERSION) },
            std::ptr::null(),
        )?;
        let dir = if self.log_dir.as_os_str().is_empty() {
            None
        } else {
            Some(path_cstring(&self.log_dir, "TrackerOptions.log_dir")?)
        };
        o.log_dir = dir.as_ref().map_or(std::ptr::null(), |c| c.as_ptr());
        o.writers = self.writers.bits();
        o.all_processes = self.all_processes as i32;
        Ok((o, dir))
    }
}

setters!(TrackerOptions {
    with_log_dir log_dir: impl Into<PathBuf> => |v| v.into(),
    with_writers writers: LogWriters,
    with_all_processes all_processes: bool,
});

/// `accel_inference_options`: how [`Context::inference`](crate::Context::inference) makes an
/// inference copy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct InferenceOptions {
    /// The intra-op threads of the thread that calls [`Inference::run`](crate::Inference::run)
    /// (libtorch counts them per thread: this sets the calling thread's, leaving the trainer's);
    /// in [1, 4096], default 1.
    pub num_threads: i32,
}

impl Default for InferenceOptions {
    /// `ACCEL_INFERENCE_OPTIONS_INIT`
    fn default() -> InferenceOptions {
        InferenceOptions { num_threads: 1 }
    }
}

impl InferenceOptions {
    /// The raw struct: the library's defaults of this version (`accel_inference_options_init`), then every field.
    pub fn to_sys(&self) -> Result<sys::accel_inference_options> {
        let mut o = sys::ACCEL_INFERENCE_OPTIONS_INIT;
        check(
            // SAFETY: `o` is a writable struct of this version (the init writes only that version's bytes).
            unsafe { sys::accel_inference_options_init(&mut o, sys::ACCEL_INFERENCE_OPTIONS_VERSION) },
            std::ptr::null(),
        )?;
        o.num_threads = self.num_threads;
        Ok(o)
    }
}

setters!(InferenceOptions {
    with_num_threads num_threads: i32,
});
