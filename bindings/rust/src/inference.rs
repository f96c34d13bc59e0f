//! Inference beside training (`accel_inference_*`; docs/on-device.md): a copy of a model that
//! a loop (a game's, a robot's) runs at its own rate while the model trains.
//!
//! [`Context::inference`](crate::Context::inference) makes an [`Inference`] copy and publishes
//! the model's current weights; [`Context::publish_weights`](crate::Context::publish_weights)
//! publishes newer ones; each [`Inference::run`] takes the latest published weights at its
//! start and never waits for the trainer.
//!
//! Unlike a [`Model`](crate::Model), an `Inference` borrows nothing: the library lets a copy
//! outlive its model and its context (it keeps what it needs), so it has no lifetime. The
//! header lets a copy be used by one thread at a time, any thread, independently of the
//! context: it is `Send` (it may move to another thread, e.g. a render or control loop's) but
//! not `Sync`, and `run` takes `&mut self`.
use std::fmt;
use std::marker::PhantomData;
use std::ptr::NonNull;

use crate::error::{check, Result};
use crate::sys;
use crate::tensor::Tensor;

/// An inference copy of a model (`accel_inference`): the same structure in evaluation mode,
/// without autograd, on the context's device, running the latest published weights.
/// `Send`, not `Sync`; independent of its model and context, which may be dropped first.
/// Dropping it calls `accel_inference_destroy`.
///
/// ```no_run
/// use accel::{Context, InferenceOptions, MlpOptions, Options, SgdOptions, Tensor};
/// # fn main() -> accel::Result<()> {
/// let ctx = Context::new(&Options::default())?;
/// let model = ctx.mlp(&MlpOptions::new(&[4, 8, 2]))?;
/// let opt = ctx.sgd(&model, &SgdOptions::default())?;
/// ctx.prepare(Some(&model), Some(&opt), None, None)?;
/// let mut inference = ctx.inference(&model, &InferenceOptions::default())?; // weights version 1
/// let looper = std::thread::spawn(move || -> accel::Result<(u64, Vec<f32>)> {
///     let x = Tensor::from_slice(&[0.5f32; 4], &[1, 4])?;
///     let y = inference.run(&[&x])?; // the latest published weights
///     Ok((inference.weights()?.0, y.to_vec::<f32>()?))
/// });
/// // ... train the model on this thread, then:
/// let version = ctx.publish_weights(&model)?; // 2: the copy's next run uses them
/// # let _ = (version, looper.join().unwrap()?);
/// # Ok(()) }
/// ```
pub struct Inference {
    raw: NonNull<sys::accel_inference>,
    /// `*mut` is neither `Send` nor `Sync`; `Send` is restored below, `Sync` stays off.
    _not_sync: PhantomData<*mut sys::accel_inference>,
}

// SAFETY: accel.h's thread rules for inference copies: "An inference copy is used by one thread
// at a time, any thread, and independently of everything else: its runs may overlap the
// context's training, publishing, checkpoints, and even the destruction of the model or the
// context (the copy keeps what it needs)", and accel_inference_destroy may be called "from any
// thread, not during its own run". So the handle may move to another thread. It is not `Sync`:
// `run` takes `&mut self`, and `weights` (`&self`) follows "the same thread rule as
// accel_inference_run", which a shared reference on two threads would break.
unsafe impl Send for Inference {}

impl Inference {
    /// Takes ownership of a raw inference copy (`accel_inference_create`'s `*out`).
    ///
    /// # Safety
    /// `raw` must be a live inference copy that nothing else destroys or uses.
    pub unsafe fn from_raw(raw: *mut sys::accel_inference) -> Option<Inference> {
        NonNull::new(raw).map(|raw| Inference { raw, _not_sync: PhantomData })
    }

    /// The raw handle (still owned by this Inference; do not destroy it).
    pub fn as_raw(&self) -> *mut sys::accel_inference {
        self.raw.as_ptr()
    }

    /// Gives up ownership of the raw handle (the caller destroys it with
    /// `accel_inference_destroy`).
    pub fn into_raw(self) -> *mut sys::accel_inference {
        let p = self.raw.as_ptr();
        std::mem::forget(self);
        p
    }

    /// Runs the copy's forward on `inputs` (borrowed, only read; any device: they are copied to
    /// the copy's) in fp32 (a causal LM in its weights' dtype) (`accel_inference_run`). At its
    /// start the run takes the latest published weights; it never waits for the trainer. The
    /// output is a new tensor without a graph, usable anywhere, also as a loss's input.
    ///
    /// Errors (the message is this thread's `accel_last_error(NULL)`): `Status::InvalidArgument`
    /// as [`Model::forward`](crate::Model::forward)'s (input count, shapes, dtypes: the message
    /// says which).
    pub fn run(&mut self, inputs: &[&Tensor]) -> Result<Tensor> {
        let ptrs: Vec<*mut sys::accel_tensor> = inputs.iter().map(|t| t.as_raw()).collect();
        let mut out = std::ptr::null_mut();
        check(
            // SAFETY: a live copy used by this thread alone (`&mut self`), live tensors borrowed
            // for the call (`ptrs` holds `ptrs.len()` of them), a local out-parameter. The
            // library records a failure's message on this thread, read at once by `check`.
            unsafe { sys::accel_inference_run(self.raw.as_ptr(), ptrs.as_ptr(), ptrs.len(), &mut out) },
            std::ptr::null(),
        )?;
        // SAFETY: on ACCEL_OK `out` is a new tensor that belongs to the caller.
        Ok(unsafe { Tensor::from_raw(out) }.expect("accel returned OK and a NULL tensor"))
    }

    /// Runs the forward on one input (see [`Inference::run`]).
    pub fn run1(&mut self, input: &Tensor) -> Result<Tensor> {
        self.run(&[input])
    }

    /// (version, age in seconds) of the weights the last run used (before any run: those the
    /// copy was created with) (`accel_inference_weights`): the version is 1 for the creation's
    /// publication, then 2, 3, ...; the age is how long ago they were published (>= 0).
    pub fn weights(&self) -> Result<(u64, f64)> {
        let (mut version, mut age) = (0u64, 0.0f64);
        check(
            // SAFETY: a live copy; `self` is not `Sync`, so no run of it is in progress on another
            // thread; local out-parameters.
            unsafe { sys::accel_inference_weights(self.raw.as_ptr(), &mut version, &mut age) },
            std::ptr::null(),
        )?;
        Ok((version, age))
    }
}

impl Drop for Inference {
    fn drop(&mut self) {
        // SAFETY: owned, live, destroyed once (here), and not running (we have `&mut self`).
        unsafe { sys::accel_inference_destroy(self.raw.as_ptr()) }
    }
}

impl fmt::Debug for Inference {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let w = self.weights().ok();
        f.debug_struct("Inference")
            .field("version", &w.map(|w| w.0))
            .field("age_seconds", &w.map(|w| w.1))
            .finish()
    }
}
