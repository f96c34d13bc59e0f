//! Rust binding of accel, an embeddable training runtime, over its C ABI
//! (`include/accel/accel.h`) and nothing else.
//!
//! * [`sys`]: the raw ABI (the `accel-sys` crate, re-exported), mirrored by hand and checked
//!   against the header's layout table.
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
//! * Tokenizers: [`Tokenizer::load`] reads a Hugging Face `tokenizer.json` or a SentencePiece
//!   `.model` (no context; `Send + Sync`); [`Tokenizer::encode`], [`Tokenizer::encode_batch`]
//!   ([`EncodeOptions`], [`Side`]) and [`Tokenizer::decode`] give the ids and text Hugging Face
//!   `tokenizers` gives; [`Tokenizer::apply_chat`] ([`ChatFormat`], [`ChatMessage`]) renders a
//!   conversation with the model's chat template.
//! * Fine-tuning: [`Context::sft_dataloader`] ([`SftOptions`]) makes batches of a JSONL file of
//!   conversations, prompt/completion pairs or texts, the loss on the answers only;
//!   [`DataLoader::attention_mask`] gives a causal-LM batch's mask; [`Model::generate_padded`]
//!   continues a left-padded batch of prompts.
//!
//! ```no_run
//! use accel::{Context, Options, MlpOptions, AdamWOptions, DataLoaderOptions, Tensor};
//! # fn main() -> accel::Result<()> {
//! let ctx = Context::new(&Options::default().with_seed(42))?;
//! let model = ctx.mlp(&MlpOptions::new(&[4, 8, 2]))?;
//! let opt = ctx.adamw(&model, &AdamWOptions::default().with_lr(1e-2))?;
//! let x = Tensor::from_slice(&[0.0f32; 16 * 4], &[16, 4])?;
//! let y = Tensor::from_slice(&[1i64; 16], &[16])?;
//! let mut loader = ctx.dataloader(&x, Some(&y), &DataLoaderOptions::default().with_batch_size(4))?;
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
//! # Options
//!
//! The options structs (`Options`, `MlpOptions`, `AdamWOptions`, ...) mirror C structs that
//! grow by appending fields, so they are `#[non_exhaustive]`: made from `Default` (the C
//! `ACCEL_*_OPTIONS_INIT`) or a constructor, then builder-style `with_FIELD` setters, or
//! fields assigned on a `let mut` value. A field added in a later version breaks no one's
//! code. A struct literal does not compile outside this crate:
//!
//! ```compile_fail
//! let opts = accel::Options { seed: 42, ..accel::Options::default() };
//! // error[E0639]: cannot create non-exhaustive struct using struct expression
//! ```
//!
//! ```compile_fail
//! // every field given: still E0639 (a later version may add one)
//! let opts = accel::InferenceOptions { num_threads: 2 };
//! ```
//!
//! ```
//! let mut opts = accel::Options::default().with_seed(42).with_num_threads(1);
//! opts.gradient_accumulation_steps = 2; // fields stay public: read and assign them
//! assert_eq!((opts.seed, opts.gradient_accumulation_steps), (42, 2));
//! ```
//!
//! # What does not compile
//!
//! The misuses that would crash a C program are compile errors here (the run-time ones,
//! NUL bytes, wrong dtypes and shapes, panicking ranks, are `Err`: `tests/misuse.rs`).
//!
//! A model (optimizer, scheduler, data loader) cannot outlive its context:
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
//! ```compile_fail
//! use accel::{Context, DataLoaderOptions, Options, Tensor};
//! let x = Tensor::from_slice(&[0f32; 4], &[4, 1]).unwrap();
//! let ctx = Context::new(&Options::default()).unwrap();
//! let mut loader = ctx.dataloader(&x, None, &DataLoaderOptions::default()).unwrap();
//! drop(ctx); // error[E0505]: cannot move out of `ctx` because it is borrowed
//! let _ = loader.next();
//! ```
//!
//! (A [`Tensor`] is independent of contexts, as the header says: one made by a context's
//! call may outlive the context, and is tested to.)
//!
//! A tensor (any handle) cannot be used after it was dropped, nor dropped twice:
//!
//! ```compile_fail
//! let t = accel::Tensor::from_slice(&[1f32], &[1]).unwrap();
//! drop(t);
//! t.item().unwrap(); // error[E0382]: borrow of moved value: `t`
//! ```
//!
//! nor copied (a bitwise copy of the handle would free it twice; `Tensor` is neither `Copy`
//! nor `Clone`):
//!
//! ```compile_fail
//! fn copy<T: Copy>(_: T) {}
//! copy(accel::Tensor::from_slice(&[1f32], &[1]).unwrap()); // error[E0277]: `Tensor: Copy` is not satisfied
//! ```
//!
//! nor dropped while it is borrowed (here, by a batch's computation):
//!
//! ```compile_fail
//! use accel::{Context, Options, Tensor};
//! let ctx = Context::new(&Options::default()).unwrap();
//! let a = Tensor::from_slice(&[1f32, 2.0], &[2]).unwrap();
//! let r: &Tensor = &a;
//! drop(a); // error[E0505]: cannot move out of `a` because it is borrowed
//! ctx.mse(r, r).unwrap();
//! ```
//!
//! A context is used by one thread at a time (the header's rule): it may move to another
//! thread (`Send`), but not be shared by two (`!Sync`), so two threads cannot call it at
//! once:
//!
//! ```compile_fail
//! use accel::{Context, Options};
//! let ctx = Context::new(&Options::default()).unwrap();
//! std::thread::scope(|s| {
//!     s.spawn(|| ctx.barrier()); // error[E0277]: (Context) cannot be shared between threads safely
//!     ctx.barrier().unwrap();
//! });
//! ```
//!
//! ```compile_fail
//! fn is_sync<T: Sync>() {}
//! is_sync::<accel::Context>();
//! ```
//!
//! Nor can a model, which borrows its context, move to another thread:
//!
//! ```compile_fail
//! fn is_send<T: Send>() {}
//! is_send::<accel::Model<'static>>();
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
//! nor reach another rank (the ranks are threads; a shared slot would need `&Context: Send`):
//!
//! ```compile_fail
//! use accel::{sim, Context, Options, SimOptions};
//! use std::sync::Mutex;
//! let slot: Mutex<Option<&'static Context>> = Mutex::new(None);
//! let _ = sim::run(&SimOptions::default(), &Options::default(), |ctx| {
//!     // error[E0277]: `Context` cannot be shared between threads safely (the closure must be Sync)
//!     if let Some(other) = *slot.lock().unwrap() {
//!         other.barrier()?;
//!     }
//!     Ok(())
//! });
//! ```
//!
//! An inference copy may move to another thread, but is used by one thread at a time:
//!
//! ```compile_fail
//! fn is_sync<T: Sync>() {}
//! is_sync::<accel::Inference>();
//! ```
//!
//! The error types cross threads (`Send + Sync + 'static`), so `?` converts them into
//! `Box<dyn Error + Send + Sync>` (or `anyhow::Error`):
//!
//! ```
//! fn run() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
//!     accel::sim::run(&accel::SimOptions::with_world_size(2), &accel::Options::default(), |ctx| ctx.barrier())?;
//!     accel::Tensor::from_slice(&[1f32], &[1])?;
//!     Ok(())
//! }
//! # fn main() { run().unwrap() }
//! ```
use std::sync::atomic::{AtomicBool, Ordering};

/// The raw C ABI: the `accel-sys` crate (every type, struct, constant and function of
/// `accel.h`, mirrored by hand), re-exported under its old path.
pub use accel_sys as sys;

/// The Rust snippets of `README.md`, compiled (and most run) as doctests, so the README
/// cannot drift from the crate.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;

// The project's README shows the binding too: its Rust snippet is a doctest as well.
#[cfg(doctest)]
#[doc = include_str!("../../../README.md")]
pub struct ProjectReadmeDoctests;

mod context;
mod error;
mod inference;
mod memory;
mod options;
pub mod sim;
mod tensor;
mod tokenizer;
mod util;

pub use context::{Batch, Batches, CausalLmOutput, Context, DataLoader, Model, Optimizer, Scheduler, StepResult, TrainResult};
pub use error::{status_name, Error, Result, Status};
pub use inference::Inference;
pub use memory::{estimate_memory, MemoryEstimate};
pub use options::{
    Activation, AdafactorOptions, AdamWOptions, Attention, Backend, ChatFormat, DataLoaderOptions, Device, EncodeOptions, GenerateOptions, InferenceOptions, LambOptions, LmDataOptions, LmOptions, LogWriters, LoraOptions,
    Loss, MemoryEstimateOptions, MlpOptions, Offload, OptimizerKind, Options, Precision, Quantization,
    ProjectOptions, RawSimOptions, ReduceOp, Schedule, SchedulerOptions, SftOptions, SgdOptions, Side, SimOptions, SpecialToken, Strategy, TrackerOptions,
};
pub use sim::{RankOutcome, SimError, SimReport};
pub use tensor::{DType, Element, Tensor};
pub use tokenizer::{AsChatMessage, ChatMessage, Tokenizer};

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
