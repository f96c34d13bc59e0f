//! Rust binding of accel, an embeddable training runtime, over its C ABI
//! (`include/accel/accel.h`) and nothing else.
//!
//! * [`sys`]: the raw ABI, mirrored by hand and checked against the header's layout table.
//! * The safe layer: [`Context`], [`Model`], [`Optimizer`], [`Scheduler`], [`DataLoader`],
//!   [`Tensor`], [`sim::run`], [`SimReport`]: RAII handles, `Result<T, Error>`, slices.
//! * [`estimate_memory`]: the memory per GPU of training a causal LM, without a context.
//! * Trackers: [`Context::init_trackers`] ([`TrackerOptions`], [`LogWriters`]),
//!   [`Context::log`], [`Context::end_training`]: a step's scalars as JSON lines, CSV and
//!   TensorBoard event files.
//! * Inference beside training: [`Context::inference`] makes an [`Inference`] copy of a model
//!   (no lifetime: it outlives its model and context; `Send`, not `Sync`) that another thread
//!   runs while [`Context::train_micro_batches`] trains and [`Context::publish_weights`]
//!   publishes.
//!
//! ```no_run
//! use accel::{Context, Options, MlpOptions, AdamWOptions, DataLoaderOptions, Tensor};
//! # fn main() -> accel::Result<()> {
//! let ctx = Context::new(&Options { seed: 42, ..Options::default() })?;
//! let model = ctx.mlp(&MlpOptions::new(&[4, 8, 2]))?;
//! let opt = ctx.adamw(&model, &AdamWOptions { lr: 1e-2, ..Default::default() })?;
//! let x = Tensor::from_slice(&[0.0f32; 16 * 4], &[16, 4])?;
//! let y = Tensor::from_slice(&[1i64; 16], &[16])?;
//! let mut loader = ctx.dataloader(&x, Some(&y), &DataLoaderOptions { batch_size: 4, ..Default::default() })?;
//! ctx.prepare(Some(&model), Some(&opt), None, Some(&loader))?;
//! for batch in loader.epoch_iter() {
//!     let batch = batch?;
//!     let logits = model.forward1(&batch.inputs)?;
//!     let loss = ctx.cross_entropy(&logits, batch.targets.as_ref().unwrap())?;
//!     ctx.backward(&loss)?;
//!     ctx.step()?;
//! }
//! # Ok(()) }
//! ```
//!
//! A model cannot outlive its context:
//!
//! ```compile_fail
//! use accel::{Context, MlpOptions, Options};
//! let model = {
//!     let ctx = Context::new(&Options::default()).unwrap();
//!     ctx.mlp(&MlpOptions::new(&[2, 2])).unwrap()
//! }; // error[E0597]: `ctx` does not live long enough
//! ```
//!
//! Nor be used after its context was dropped:
//!
//! ```compile_fail
//! use accel::{Context, MlpOptions, Options};
//! let ctx = Context::new(&Options::default()).unwrap();
//! let model = ctx.mlp(&MlpOptions::new(&[2, 2])).unwrap();
//! drop(ctx); // error[E0505]: cannot move out of `ctx` because it is borrowed
//! model.set_training(false).unwrap();
//! ```
//!
//! A rank's context cannot escape the simulator's closure:
//!
//! ```compile_fail
//! use accel::{sim, Context, Options, SimOptions};
//! let mut kept: Option<&Context> = None;
//! let _ = sim::run(&SimOptions::default(), &Options::default(), |ctx| {
//!     kept = Some(ctx); // error: borrowed data escapes the closure (and Fn cannot assign)
//!     Ok(())
//! });
//! ```
//!
//! A context is not `Sync` (one thread at a time):
//!
//! ```compile_fail
//! fn is_sync<T: Sync>() {}
//! is_sync::<accel::Context>();
//! ```
//!
//! A model borrows its context, so it cannot be sent to another thread:
//!
//! ```compile_fail
//! fn is_send<T: Send>() {}
//! is_send::<accel::Model<'static>>();
//! ```
//!
//! An inference copy may move to another thread, but is used by one thread at a time:
//!
//! ```compile_fail
//! fn is_sync<T: Sync>() {}
//! is_sync::<accel::Inference>();
//! ```
use std::sync::atomic::{AtomicBool, Ordering};

pub mod sys;

mod context;
mod error;
mod inference;
mod memory;
mod options;
pub mod sim;
mod tensor;
mod util;

pub use context::{Batch, Batches, CausalLmOutput, Context, DataLoader, Model, Optimizer, Scheduler, StepResult, TrainResult};
pub use error::{status_name, Error, Result, Status};
pub use inference::Inference;
pub use memory::{estimate_memory, MemoryEstimate};
pub use options::{
    Activation, AdafactorOptions, AdamWOptions, Attention, Backend, DataLoaderOptions, Device, GenerateOptions, InferenceOptions, LambOptions, LmDataOptions, LmOptions, LogWriters, LoraOptions,
    Loss, MemoryEstimateOptions, MlpOptions, OptimizerKind, Options, Precision,
    ProjectOptions, RawSimOptions, ReduceOp, Schedule, SchedulerOptions, SgdOptions, SimOptions, Strategy, TrackerOptions,
};
pub use sim::{RankOutcome, SimError, SimReport};
pub use tensor::{DType, Element, Tensor};

/// The major version of the ABI this binding was written for.
pub const BINDING_MAJOR: i32 = sys::ACCEL_VERSION_MAJOR;

/// The loaded library's version: (`accel_version_number()`, `accel_version_string()`).
pub fn version() -> (i32, String) {
    // SAFETY: takes no arguments and never fails; the version string is static and copied.
    unsafe {
        let n = sys::accel_version_number();
        (n, util::owned_string(sys::accel_version_string()))
    }
}

/// Checks a library version number (MAJOR * 10000 + MINOR * 100 + PATCH) against this
/// binding's major version: `Status::Unsupported` with a clear message when they differ.
pub fn check_version_number(number: i32) -> Result<()> {
    let major = number / 10000;
    if major != BINDING_MAJOR {
        return Err(Error::new(
            Status::Unsupported,
            format!(
                "libaccel {}.{}.{} is loaded, this binding was written for {}.x: install the accel crate \
                 version matching the library, or point ACCEL_LIB_DIR at a {}.x libaccel",
                major,
                number / 100 % 100,
                number % 100,
                BINDING_MAJOR,
                BINDING_MAJOR
            ),
        ));
    }
    Ok(())
}

static VERSION_OK: AtomicBool = AtomicBool::new(false);

/// Checks the loaded library's version once (at the first context, simulation or tensor).
pub fn ensure_version() -> Result<()> {
    if VERSION_OK.load(Ordering::Relaxed) {
        return Ok(());
    }
    // SAFETY: takes no arguments and never fails.
    check_version_number(unsafe { sys::accel_version_number() })?;
    VERSION_OK.store(true, Ordering::Relaxed);
    Ok(())
}
