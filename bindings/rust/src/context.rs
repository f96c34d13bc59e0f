//! The context (the Accelerator) and the objects made from it.
//!
//! # Lifetimes and `accel_prepare`
//!
//! `Model<'ctx>`, `Optimizer<'ctx>`, `Scheduler<'ctx>` and `DataLoader<'ctx>` hold a
//! `&'ctx Context`, so none can outlive (or be used after) its context: that is a compile
//! error, not a run-time one.
//!
//! `accel_prepare` *borrows* the objects: the context uses them later (backward, step,
//! save_state, gather_for_metrics...). The binding therefore shares ownership of every raw
//! handle through an `Arc`: the Rust object holds one reference, and a successful
//! [`Context::prepare`] gives the context another. Dropping a prepared `Model` only drops
//! the Rust side's reference; the C model is destroyed when the context lets go of it too
//! (when the context is dropped, after `accel_destroy`, which the ABI allows). An optimizer
//! also keeps its model alive, and a scheduler its optimizer. So safe code cannot make the
//! context use a destroyed object.
use std::cell::RefCell;
use std::marker::PhantomData;
use std::os::raw::{c_char, c_int};
use std::path::Path;
use std::ptr::NonNull;
use std::sync::Arc;

use crate::error::{check, last_error, Result};
use crate::inference::Inference;
use crate::options::*;
use crate::sys;
use crate::tensor::Tensor;
use crate::util::{cstring, owned_string, path_cstring};

/// A raw handle that can be destroyed.
pub(crate) trait RawHandle {
    unsafe fn destroy(p: *mut Self);
}
impl RawHandle for sys::accel_model {
    unsafe fn destroy(p: *mut Self) {
        sys::accel_model_destroy(p)
    }
}
impl RawHandle for sys::accel_optimizer {
    unsafe fn destroy(p: *mut Self) {
        sys::accel_optimizer_destroy(p)
    }
}
impl RawHandle for sys::accel_scheduler {
    unsafe fn destroy(p: *mut Self) {
        sys::accel_scheduler_destroy(p)
    }
}
impl RawHandle for sys::accel_dataloader {
    unsafe fn destroy(p: *mut Self) {
        sys::accel_dataloader_destroy(p)
    }
}

/// Owns one raw handle and destroys it when the last `Arc` to it goes.
pub(crate) struct Owned<T: RawHandle>(NonNull<T>);

impl<T: RawHandle> Owned<T> {
    fn new(p: *mut T) -> Arc<Owned<T>> {
        Arc::new(Owned(NonNull::new(p).expect("accel returned OK and a NULL handle")))
    }
    fn ptr(&self) -> *mut T {
        self.0.as_ptr()
    }
}

impl<T: RawHandle> Drop for Owned<T> {
    fn drop(&mut self) {
        // SAFETY: the last `Arc` owner destroys the handle, exactly once. No context uses it
        // any more: a context bound to it by `prepare` holds an `Arc` of its own, released
        // only after `accel_destroy`.
        unsafe { T::destroy(self.0.as_ptr()) }
    }
}

// SAFETY: `Owned` only destroys its handle (the last owner, once). Every *use* of a handle
// goes through a Model/Optimizer/Scheduler/DataLoader, which borrow a `Context` (not `Sync`)
// and are therefore neither `Send` nor `Sync`, or through the Context itself (`Send`, not
// `Sync`). A context can only move to another thread once nothing borrows it, so the
// handles move with it and are used by one thread at a time, as the header requires.
unsafe impl<T: RawHandle> Send for Owned<T> {}
unsafe impl<T: RawHandle> Sync for Owned<T> {}

trait Kept: Send + Sync {}
impl<T: Send + Sync> Kept for T {}

/// An accel context (Accelerate's `Accelerator`): `Send` (it may move to another thread)
/// but not `Sync` (one thread at a time). Dropping it calls `accel_destroy`, then releases
/// the objects it was given by `prepare`.
pub struct Context {
    raw: NonNull<sys::accel_context>,
    /// false for a simulated rank's context, which the library destroys.
    owned: bool,
    /// The objects accel_prepare bound (see the module docs).
    kept: RefCell<Vec<Arc<dyn Kept>>>,
    _not_sync: PhantomData<std::cell::Cell<()>>,
}

// SAFETY: a context may be used from any thread, one at a time (the header). Not Sync.
unsafe impl Send for Context {}

impl Drop for Context {
    fn drop(&mut self) {
        if self.owned {
            // SAFETY: an owned context, destroyed once (here); the objects it was bound to are
            // still alive (`kept` drops after this).
            unsafe { sys::accel_destroy(self.raw.as_ptr()) }
        }
        // `kept` drops afterwards: objects may be destroyed after their context.
    }
}

/// What one `accel_step` did.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct StepResult {
    /// the optimizer really stepped
    pub stepped: bool,
    /// an fp16 step was skipped for inf/NaN gradients
    pub skipped: bool,
    /// a gradient-synchronising (real or skipped) step
    pub sync_step: bool,
    /// the loss scale after this call (1 unless fp16)
    pub loss_scale: f64,
    /// real optimizer steps taken so far
    pub optimizer_steps: i64,
    /// accel_backward calls counted so far
    pub micro_steps: i64,
}

/// What one [`Context::train_micro_batches`] call did (`accel_train_result`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TrainResult {
    /// micro-batches trained by this call
    pub micro_batches: i32,
    /// real optimizer steps taken by this call
    pub optimizer_steps: i32,
    /// fp16 steps skipped for inf/NaN gradients by this call
    pub skipped_steps: i32,
    /// the call stopped at the end of the loader's epoch (the loader has advanced: the next
    /// call starts the next epoch)
    pub epoch_ended: bool,
    /// the mean of the micro-batches' losses; NaN when none ran
    pub mean_loss: f64,
    /// the call's wall time
    pub seconds: f64,
}

impl Context {
    /// Creates a context (`accel_init`). Errors for options outside their domain come
    /// from `accel_last_error(NULL)`.
    pub fn new(opts: &Options) -> Result<Context> {
        crate::ensure_version()?;
        let o = opts.to_sys()?;
        let mut out = std::ptr::null_mut();
        // SAFETY: `o` is a complete options struct of this version; `out` is a local out-parameter.
        check(unsafe { sys::accel_init(&o, &mut out) }, std::ptr::null())?;
        Ok(Context {
            raw: NonNull::new(out).expect("accel_init returned OK and NULL"),
            owned: true,
            kept: RefCell::new(Vec::new()),
            _not_sync: PhantomData,
        })
    }

    /// A context with the default options (`ACCEL_OPTIONS_INIT`).
    pub fn with_defaults() -> Result<Context> {
        Context::new(&Options::default())
    }

    /// A simulated rank's context: borrowed, never destroyed by Rust.
    pub(crate) unsafe fn borrowed(raw: *mut sys::accel_context) -> Context {
        Context {
            raw: NonNull::new(raw).expect("accel_sim_run passed a NULL context"),
            owned: false,
            kept: RefCell::new(Vec::new()),
            _not_sync: PhantomData,
        }
    }

    /// The raw handle (owned by this Context; do not destroy it).
    pub fn as_raw(&self) -> *mut sys::accel_context {
        self.raw.as_ptr()
    }

    #[inline]
    fn ck(&self, status: sys::accel_status) -> Result<()> {
        check(status, self.raw.as_ptr())
    }

    /// The message of the last error recorded on this context ("" when none).
    pub fn last_error(&self) -> String {
        last_error(self.raw.as_ptr())
    }

    fn tensor_out(&self, f: impl FnOnce(*mut *mut sys::accel_tensor) -> sys::accel_status) -> Result<Tensor> {
        let mut out = std::ptr::null_mut();
        self.ck(f(&mut out))?;
        // SAFETY: on ACCEL_OK `out` is a new tensor that belongs to the caller.
        Ok(unsafe { Tensor::from_raw(out) }.expect("accel returned OK and a NULL tensor"))
    }

    /// The device the context placed itself on (`accel_device_kind`).
    pub fn device(&self) -> Result<Device> {
        let mut d = 0;
        // SAFETY: a live context (`self`), live arguments borrowed for the call, local out-parameters.
        self.ck(unsafe { sys::accel_device_kind(self.raw.as_ptr(), &mut d) })?;
        Ok(Device::from_raw(d).unwrap_or(Device::Auto))
    }

    /// The precision the context trains in (`accel_mixed_precision`): its `mixed_precision`
    /// (or `ACCEL_MIXED_PRECISION`) with `Precision::Auto` resolved for its device to
    /// `Precision::Bf16` or `Precision::No`; never `Auto`.
    pub fn mixed_precision(&self) -> Result<Precision> {
        let mut p = 0;
        // SAFETY: a live context (`self`), live arguments borrowed for the call, local out-parameters.
        self.ck(unsafe { sys::accel_mixed_precision(self.raw.as_ptr(), &mut p) })?;
        Precision::from_raw(p)
            .ok_or_else(|| crate::Error::new(crate::Status::Unsupported, format!("unknown precision {}", p)))
    }

    // ---- models ---------------------------------------------------------------------

    /// The built-in MLP (`accel_model_create_mlp`).
    pub fn mlp(&self, opts: &MlpOptions) -> Result<Model<'_>> {
        let o = opts.to_sys()?;
        let mut out = std::ptr::null_mut();
        // SAFETY: a live context (`self`), live arguments borrowed for the call, local out-parameters.
        self.ck(unsafe { sys::accel_model_create_mlp(self.raw.as_ptr(), &o, &mut out) })?;
        Ok(Model { raw: Owned::new(out), ctx: self })
    }

    /// A TorchScript module (`accel_model_load_torchscript`).
    pub fn load_torchscript(&self, path: impl AsRef<Path>) -> Result<Model<'_>> {
        let p = path_cstring(path.as_ref(), "path")?;
        let mut out = std::ptr::null_mut();
        // SAFETY: the context and the handles passed are live (borrowed for the call); the C strings outlive the call.
        self.ck(unsafe { sys::accel_model_load_torchscript(self.raw.as_ptr(), p.as_ptr(), &mut out) })?;
        Ok(Model { raw: Owned::new(out), ctx: self })
    }

    /// A GPT-2 or Llama causal LM from a Hugging Face directory: config.json and
    /// model.safetensors or a sharded index (`accel_model_load_pretrained`).
    pub fn load_pretrained(&self, dir: impl AsRef<Path>, opts: &LmOptions) -> Result<Model<'_>> {
        let p = path_cstring(dir.as_ref(), "dir")?;
        let o = opts.to_sys()?;
        let mut out = std::ptr::null_mut();
        // SAFETY: a live context (`self`), the C string and options outlive the call, local out-parameter.
        self.ck(unsafe { sys::accel_model_load_pretrained(self.raw.as_ptr(), p.as_ptr(), &o, &mut out) })?;
        Ok(Model { raw: Owned::new(out), ctx: self })
    }

    /// A causal LM with random weights from a config.json (the file or its directory), drawn
    /// from the context's seed as transformers initialises them (`accel_model_create_lm`).
    pub fn create_lm(&self, config: impl AsRef<Path>, opts: &LmOptions) -> Result<Model<'_>> {
        let p = path_cstring(config.as_ref(), "config")?;
        let o = opts.to_sys()?;
        let mut out = std::ptr::null_mut();
        // SAFETY: a live context (`self`), the C string and options outlive the call, local out-parameter.
        self.ck(unsafe { sys::accel_model_create_lm(self.raw.as_ptr(), p.as_ptr(), &o, &mut out) })?;
        Ok(Model { raw: Owned::new(out), ctx: self })
    }

    /// Writes a causal LM as a Hugging Face directory that transformers loads
    /// (`accel_save_pretrained`; a collective under several processes).
    pub fn save_pretrained(&self, model: &Model<'_>, dir: impl AsRef<Path>) -> Result<()> {
        let p = path_cstring(dir.as_ref(), "dir")?;
        // SAFETY: the context and the handles passed are live (borrowed for the call); the C strings outlive the call.
        self.ck(unsafe { sys::accel_save_pretrained(self.raw.as_ptr(), model.raw.ptr(), p.as_ptr()) })
    }

    /// Writes the model's weights (`accel_save_model`): safetensors, or TorchScript for a
    /// `.pt` path and a TorchScript model.
    pub fn save_model(&self, model: &Model<'_>, path: impl AsRef<Path>) -> Result<()> {
        let p = path_cstring(path.as_ref(), "path")?;
        // SAFETY: the context and the handles passed are live (borrowed for the call); the C strings outlive the call.
        self.ck(unsafe { sys::accel_save_model(self.raw.as_ptr(), model.raw.ptr(), p.as_ptr()) })
    }

    // ---- losses ---------------------------------------------------------------------

    /// Mean cross-entropy (`accel_loss_cross_entropy`): logits [batch, classes], int64 or
    /// int32 targets [batch]. A new scalar tensor.
    pub fn cross_entropy(&self, logits: &Tensor, targets: &Tensor) -> Result<Tensor> {
        // SAFETY: a live context (`self`), live arguments borrowed for the call; `out` is tensor_out's local.
        self.tensor_out(|out| unsafe {
            sys::accel_loss_cross_entropy(self.raw.as_ptr(), logits.as_raw(), targets.as_raw(), out)
        })
    }

    /// Mean squared error (`accel_loss_mse`).
    pub fn mse(&self, input: &Tensor, target: &Tensor) -> Result<Tensor> {
        // SAFETY: a live context (`self`), live arguments borrowed for the call; `out` is tensor_out's local.
        self.tensor_out(|out| unsafe { sys::accel_loss_mse(self.raw.as_ptr(), input.as_raw(), target.as_raw(), out) })
    }

    // ---- optimizers, schedulers, loaders ----------------------------------------------

    /// SGD over all of `model`'s parameters (`accel_optimizer_create_sgd`).
    pub fn sgd<'c>(&'c self, model: &Model<'c>, opts: &SgdOptions) -> Result<Optimizer<'c>> {
        let o = opts.to_sys()?;
        let mut out = std::ptr::null_mut();
        // SAFETY: a live context (`self`), live arguments borrowed for the call, local out-parameters.
        self.ck(unsafe { sys::accel_optimizer_create_sgd(self.raw.as_ptr(), model.raw.ptr(), &o, &mut out) })?;
        Ok(Optimizer { raw: Owned::new(out), _model: model.raw.clone(), ctx: self })
    }

    /// AdamW (`accel_optimizer_create_adamw`).
    pub fn adamw<'c>(&'c self, model: &Model<'c>, opts: &AdamWOptions) -> Result<Optimizer<'c>> {
        let o = opts.to_sys()?;
        let mut out = std::ptr::null_mut();
        // SAFETY: a live context (`self`), live arguments borrowed for the call, local out-parameters.
        self.ck(unsafe { sys::accel_optimizer_create_adamw(self.raw.as_ptr(), model.raw.ptr(), &o, &mut out) })?;
        Ok(Optimizer { raw: Owned::new(out), _model: model.raw.clone(), ctx: self })
    }

    /// LAMB (`accel_optimizer_create_lamb`).
    pub fn lamb<'c>(&'c self, model: &Model<'c>, opts: &LambOptions) -> Result<Optimizer<'c>> {
        let o = opts.to_sys()?;
        let mut out = std::ptr::null_mut();
        // SAFETY: a live context (`self`), live arguments borrowed for the call, local out-parameters.
        self.ck(unsafe { sys::accel_optimizer_create_lamb(self.raw.as_ptr(), model.raw.ptr(), &o, &mut out) })?;
        Ok(Optimizer { raw: Owned::new(out), _model: model.raw.clone(), ctx: self })
    }

    /// Adafactor over the model's parameters (`accel_optimizer_create_adafactor`; under ZeRO too).
    pub fn adafactor<'c>(&'c self, model: &Model<'c>, opts: &AdafactorOptions) -> Result<Optimizer<'c>> {
        let o = opts.to_sys()?;
        let mut out = std::ptr::null_mut();
        // SAFETY: a live context (`self`), live arguments borrowed for the call, local out-parameters.
        self.ck(unsafe { sys::accel_optimizer_create_adafactor(self.raw.as_ptr(), model.raw.ptr(), &o, &mut out) })?;
        Ok(Optimizer { raw: Owned::new(out), _model: model.raw.clone(), ctx: self })
    }

    /// A learning-rate scheduler for `optimizer` (`accel_scheduler_create`).
    pub fn scheduler<'c>(&'c self, optimizer: &Optimizer<'c>, opts: &SchedulerOptions) -> Result<Scheduler<'c>> {
        let o = opts.to_sys()?;
        let mut out = std::ptr::null_mut();
        // SAFETY: a live context (`self`), live arguments borrowed for the call, local out-parameters.
        self.ck(unsafe { sys::accel_scheduler_create(self.raw.as_ptr(), optimizer.raw.ptr(), &o, &mut out) })?;
        Ok(Scheduler { raw: Owned::new(out), _optimizer: optimizer.raw.clone(), ctx: self })
    }

    /// A data loader over host tensors (copied) (`accel_dataloader_create`).
    pub fn dataloader(&self, inputs: &Tensor, targets: Option<&Tensor>, opts: &DataLoaderOptions) -> Result<DataLoader<'_>> {
        let o = opts.to_sys()?;
        let mut out = std::ptr::null_mut();
        let t = targets.map_or(std::ptr::null(), |t| t.as_raw() as *const _);
        // SAFETY: a live context (`self`), live arguments borrowed for the call, local out-parameters.
        self.ck(unsafe { sys::accel_dataloader_create(self.raw.as_ptr(), inputs.as_raw(), t, &o, &mut out) })?;
        Ok(DataLoader { raw: Owned::new(out), ctx: self })
    }

    /// Causal-LM batches (`accel_lm_dataloader_create`) over a 1-D token tensor: without
    /// `offsets`, fixed blocks of `lm.block_size` tokens; with offsets ([sequences + 1]), one
    /// sequence each with dynamic padding. Batches are (input_ids, labels), labels -100 at padding.
    pub fn lm_dataloader(
        &self,
        tokens: &Tensor,
        offsets: Option<&Tensor>,
        lm: &LmDataOptions,
        opts: &DataLoaderOptions,
    ) -> Result<DataLoader<'_>> {
        let l = lm.to_sys()?;
        let o = opts.to_sys()?;
        let mut out = std::ptr::null_mut();
        let off = offsets.map_or(std::ptr::null(), |t| t.as_raw() as *const _);
        // SAFETY: a live context (`self`), live arguments borrowed for the call, local out-parameters.
        self.ck(unsafe { sys::accel_lm_dataloader_create(self.raw.as_ptr(), tokens.as_raw(), off, &l, &o, &mut out) })?;
        Ok(DataLoader { raw: Owned::new(out), ctx: self })
    }

    // ---- training -------------------------------------------------------------------

    /// Binds the objects to the context (`accel_prepare`; any may be None). On success the
    /// context shares ownership of them, so they stay alive as long as it may use them,
    /// even if the Rust objects are dropped first.
    pub fn prepare(
        &self,
        model: Option<&Model<'_>>,
        optimizer: Option<&Optimizer<'_>>,
        scheduler: Option<&Scheduler<'_>>,
        loader: Option<&DataLoader<'_>>,
    ) -> Result<()> {
        // SAFETY: a live context (`self`), live arguments borrowed for the call, local out-parameters.
        self.ck(unsafe {
            sys::accel_prepare(
                self.raw.as_ptr(),
                model.map_or(std::ptr::null_mut(), |m| m.raw.ptr()),
                optimizer.map_or(std::ptr::null_mut(), |o| o.raw.ptr()),
                scheduler.map_or(std::ptr::null_mut(), |s| s.raw.ptr()),
                loader.map_or(std::ptr::null_mut(), |l| l.raw.ptr()),
            )
        })?;
        let mut kept = self.kept.borrow_mut();
        if let Some(m) = model {
            kept.push(m.raw.clone());
        }
        if let Some(o) = optimizer {
            kept.push(o.raw.clone());
        }
        if let Some(s) = scheduler {
            kept.push(s.raw.clone());
        }
        if let Some(l) = loader {
            kept.push(l.raw.clone());
        }
        Ok(())
    }

    /// Backpropagates a scalar loss (`accel_backward`).
    pub fn backward(&self, loss: &Tensor) -> Result<()> {
        // SAFETY: a live context (`self`), live arguments borrowed for the call, local out-parameters.
        self.ck(unsafe { sys::accel_backward(self.raw.as_ptr(), loss.as_raw()) })
    }

    /// Whether the next step is a real optimizer step (`accel_sync_gradients`).
    pub fn sync_gradients(&self) -> Result<bool> {
        let mut v: c_int = 0;
        // SAFETY: a live context (`self`), live arguments borrowed for the call, local out-parameters.
        self.ck(unsafe { sys::accel_sync_gradients(self.raw.as_ptr(), &mut v) })?;
        Ok(v != 0)
    }

    /// Clips the gradients' global L2 norm to `max_norm` and returns the norm before
    /// clipping (NaN on an accumulation micro-step) (`accel_clip_grad_norm`).
    pub fn clip_grad_norm(&self, max_norm: f64) -> Result<f64> {
        let mut v = 0.0;
        // SAFETY: a live context (`self`), live arguments borrowed for the call, local out-parameters.
        self.ck(unsafe { sys::accel_clip_grad_norm(self.raw.as_ptr(), max_norm, &mut v) })?;
        Ok(v)
    }

    /// Ends a micro-batch (`accel_step`).
    pub fn step(&self) -> Result<StepResult> {
        let mut r = sys::accel_step_result::default();
        // SAFETY: a live context (`self`), live arguments borrowed for the call, local out-parameters.
        self.ck(unsafe { sys::accel_step(self.raw.as_ptr(), &mut r) })?;
        Ok(StepResult {
            stepped: r.stepped != 0,
            skipped: r.skipped != 0,
            sync_step: r.sync_step != 0,
            loss_scale: r.loss_scale,
            optimizer_steps: r.optimizer_steps,
            micro_steps: r.micro_steps,
        })
    }

    /// The current loss scale (1 unless fp16) (`accel_loss_scale`).
    pub fn loss_scale(&self) -> Result<f64> {
        let mut v = 0.0;
        // SAFETY: a live context (`self`), live arguments borrowed for the call, local out-parameters.
        self.ck(unsafe { sys::accel_loss_scale(self.raw.as_ptr(), &mut v) })?;
        Ok(v)
    }

    // ---- processes ------------------------------------------------------------------

    /// This process's (rank's) index (`accel_process_index`).
    pub fn process_index(&self) -> Result<i32> {
        let mut v = 0;
        // SAFETY: a live context (`self`), live arguments borrowed for the call, local out-parameters.
        self.ck(unsafe { sys::accel_process_index(self.raw.as_ptr(), &mut v) })?;
        Ok(v)
    }

    /// The number of processes (`accel_num_processes`).
    pub fn num_processes(&self) -> Result<i32> {
        let mut v = 0;
        // SAFETY: a live context (`self`), live arguments borrowed for the call, local out-parameters.
        self.ck(unsafe { sys::accel_num_processes(self.raw.as_ptr(), &mut v) })?;
        Ok(v)
    }

    /// The index on this node (`accel_local_process_index`).
    pub fn local_process_index(&self) -> Result<i32> {
        let mut v = 0;
        // SAFETY: a live context (`self`), live arguments borrowed for the call, local out-parameters.
        self.ck(unsafe { sys::accel_local_process_index(self.raw.as_ptr(), &mut v) })?;
        Ok(v)
    }

    /// Process 0? (`accel_is_main_process`)
    pub fn is_main_process(&self) -> Result<bool> {
        let mut v: c_int = 0;
        // SAFETY: a live context (`self`), live arguments borrowed for the call, local out-parameters.
        self.ck(unsafe { sys::accel_is_main_process(self.raw.as_ptr(), &mut v) })?;
        Ok(v != 0)
    }

    /// The main process of its node? (`accel_is_local_main_process`)
    pub fn is_local_main_process(&self) -> Result<bool> {
        let mut v: c_int = 0;
        // SAFETY: a live context (`self`), live arguments borrowed for the call, local out-parameters.
        self.ck(unsafe { sys::accel_is_local_main_process(self.raw.as_ptr(), &mut v) })?;
        Ok(v != 0)
    }

    /// Waits for every process (`accel_barrier`, Accelerate's wait_for_everyone).
    pub fn barrier(&self) -> Result<()> {
        // SAFETY: a live context (`self`), live arguments borrowed for the call, local out-parameters.
        self.ck(unsafe { sys::accel_barrier(self.raw.as_ptr()) })
    }

    /// Element-wise reduction across processes (`accel_reduce`).
    pub fn reduce(&self, tensor: &Tensor, op: ReduceOp) -> Result<Tensor> {
        // SAFETY: a live context (`self`), live arguments borrowed for the call; `out` is tensor_out's local.
        self.tensor_out(|out| unsafe { sys::accel_reduce(self.raw.as_ptr(), tensor.as_raw(), op.to_raw(), out) })
    }

    /// Process `root`'s tensor on every process (`accel_broadcast`).
    pub fn broadcast(&self, tensor: &Tensor, root: i32) -> Result<Tensor> {
        // SAFETY: a live context (`self`), live arguments borrowed for the call; `out` is tensor_out's local.
        self.tensor_out(|out| unsafe { sys::accel_broadcast(self.raw.as_ptr(), tensor.as_raw(), root, out) })
    }

    /// Concatenation along dim 0 in process order (`accel_gather`).
    pub fn gather(&self, tensor: &Tensor) -> Result<Tensor> {
        // SAFETY: a live context (`self`), live arguments borrowed for the call; `out` is tensor_out's local.
        self.tensor_out(|out| unsafe { sys::accel_gather(self.raw.as_ptr(), tensor.as_raw(), out) })
    }

    /// Gather that drops the duplicated rows of the last even batch (`accel_gather_for_metrics`).
    pub fn gather_for_metrics(&self, tensor: &Tensor) -> Result<Tensor> {
        // SAFETY: a live context (`self`), live arguments borrowed for the call; `out` is tensor_out's local.
        self.tensor_out(|out| unsafe { sys::accel_gather_for_metrics(self.raw.as_ptr(), tensor.as_raw(), out) })
    }

    /// Pads `dim` to the largest size among the processes (`accel_pad_across_processes`).
    pub fn pad_across_processes(&self, tensor: &Tensor, dim: i32, pad_value: f64, pad_first: bool) -> Result<Tensor> {
        // SAFETY: a live context (`self`), live arguments borrowed for the call; `out` is tensor_out's local.
        self.tensor_out(|out| unsafe {
            sys::accel_pad_across_processes(self.raw.as_ptr(), tensor.as_raw(), dim, pad_value, pad_first as c_int, out)
        })
    }

    /// Prints `message` on the main process only (`accel_print`).
    pub fn print(&self, message: &str) -> Result<()> {
        let m = cstring(message, "message")?;
        // SAFETY: the context is live; `m` outlives the call.
        self.ck(unsafe { sys::accel_print(self.raw.as_ptr(), m.as_ptr()) })
    }

    /// Reseeds the generators (`accel_set_seed`).
    pub fn set_seed(&self, seed: u64, per_process: bool) -> Result<()> {
        // SAFETY: a live context (`self`), live arguments borrowed for the call, local out-parameters.
        self.ck(unsafe { sys::accel_set_seed(self.raw.as_ptr(), seed, per_process as c_int) })
    }

    /// Charges simulated compute time to this rank's virtual clock; a no-op outside the
    /// simulator (`accel_sim_charge_compute`).
    pub fn sim_charge_compute(&self, seconds: f64, label: Option<&str>) -> Result<()> {
        let l = label.map(|s| cstring(s, "label")).transpose()?;
        let lp = l.as_ref().map_or(std::ptr::null(), |c| c.as_ptr());
        // SAFETY: the context is live; `l` (and so `lp`) outlives the call.
        self.ck(unsafe { sys::accel_sim_charge_compute(self.raw.as_ptr(), seconds, lp) })
    }

    // ---- checkpoints ----------------------------------------------------------------

    /// Sets the project directory used by save_state/load_state with no directory
    /// (`accel_set_project`).
    pub fn set_project(&self, opts: &ProjectOptions) -> Result<()> {
        let (o, _dir) = opts.to_sys()?;
        // SAFETY: a live context; `o.project_dir` points into `_dir`, alive until the end.
        self.ck(unsafe { sys::accel_set_project(self.raw.as_ptr(), &o) })
    }

    fn dir_arg(dir: Option<&Path>) -> Result<Option<std::ffi::CString>> {
        dir.map(|d| path_cstring(d, "dir")).transpose()
    }

    /// Saves the training state (`accel_save_state`); None: the project's next checkpoint.
    pub fn save_state(&self, dir: Option<&Path>) -> Result<()> {
        let d = Context::dir_arg(dir)?;
        let p: *const c_char = d.as_ref().map_or(std::ptr::null(), |c| c.as_ptr());
        // SAFETY: a live context; `p` is NULL or points into `d`, alive until the end.
        self.ck(unsafe { sys::accel_save_state(self.raw.as_ptr(), p) })
    }

    /// Restores a saved state (`accel_load_state`); None: the project's newest checkpoint.
    pub fn load_state(&self, dir: Option<&Path>) -> Result<()> {
        let d = Context::dir_arg(dir)?;
        let p: *const c_char = d.as_ref().map_or(std::ptr::null(), |c| c.as_ptr());
        // SAFETY: a live context; `p` is NULL or points into `d`, alive until the end.
        self.ck(unsafe { sys::accel_load_state(self.raw.as_ptr(), p) })
    }

    /// The directory of the last successful save_state/load_state, "" before either
    /// (`accel_last_checkpoint`).
    pub fn last_checkpoint(&self) -> Result<String> {
        let mut p: *const c_char = std::ptr::null();
        // SAFETY: `p` is the library's string (or NULL); it is copied at once, before any other call.
        self.ck(unsafe { sys::accel_last_checkpoint(self.raw.as_ptr(), &mut p) })?;
        // SAFETY: `p` is the library's string (or NULL); it is copied at once, before any other call.
        Ok(unsafe { owned_string(p) })
    }

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

    // ---- real time: inference beside training ----------------------------------------

    /// Makes an inference copy of `model` on the context's device (`accel_inference_create`):
    /// the same structure (the built-in MLP, a TorchScript module, a causal LM with or without
    /// LoRA adapters), in evaluation mode, without autograd. It publishes the model's current
    /// weights (as [`Context::publish_weights`]: version 1 for a model's first publication; under
    /// ZeRO every process calls it) and starts with them.
    ///
    /// The copy borrows nothing: it may outlive `model` and this context, and move to another
    /// thread (see [`Inference`]).
    ///
    /// Errors: `Status::InvalidArgument` for a model of another context or `num_threads` outside
    /// [1, 4096]; `Status::Unsupported` for a LoRA model whose base weights ZeRO shards (save it
    /// with [`Context::save_pretrained`] and load that instead).
    pub fn inference(&self, model: &Model<'_>, opts: &InferenceOptions) -> Result<Inference> {
        let o = opts.to_sys()?;
        let mut out = std::ptr::null_mut();
        // SAFETY: a live context (`self`) and model (borrowed for the call), local options and out-parameter.
        self.ck(unsafe { sys::accel_inference_create(self.raw.as_ptr(), model.raw.ptr(), &o, &mut out) })?;
        // SAFETY: on ACCEL_OK `out` is a new inference copy that belongs to the caller.
        Ok(unsafe { Inference::from_raw(out) }.expect("accel returned OK and a NULL inference copy"))
    }

    /// Publishes the model's current trained weights (fp32 masters, or the weights' own dtype
    /// for a causal LM) to every inference copy of it, and returns their version: 1 for the
    /// first publication ([`Context::inference`]'s), then 2, 3, ... (`accel_publish_weights`).
    /// Each copy's next run uses them; a run in progress finishes with the weights it started
    /// with. The weights are copied, so training goes on at once. Under ZeRO this gathers the
    /// shards: every process calls it.
    ///
    /// Errors: `Status::InvalidArgument` for a model of another context;
    /// `Status::OutOfMemory` when no weight set can be allocated (the copies keep theirs).
    pub fn publish_weights(&self, model: &Model<'_>) -> Result<u64> {
        let mut version = 0u64;
        // SAFETY: a live context (`self`) and model (borrowed for the call), a local out-parameter.
        self.ck(unsafe { sys::accel_publish_weights(self.raw.as_ptr(), model.raw.ptr(), &mut version) })?;
        Ok(version)
    }

    /// Trains at most `max_micro_batches` (>= 1) micro-batches of `loader` on the prepared
    /// model and optimizer (`accel_train_micro_batches`): for each, the next batch, the
    /// forward, the `loss`, [`Context::backward`] and [`Context::step`], exactly as a loop of
    /// those calls does (gradient accumulation, mixed precision, the strategy and the scheduler
    /// included). It stops early at the end of the loader's epoch (`epoch_ended`), and, when
    /// `max_seconds` > 0, before a micro-batch that would end past `max_seconds` after the call
    /// began, judged by the mean time of this call's micro-batches so far (at least one runs):
    /// an engine schedules training between frames this way. With several processes every
    /// process trains the same number of micro-batches, so `max_seconds` must be 0 there.
    ///
    /// Errors: those of the calls it makes (`Status::NonFinite` for a NaN loss, ...): the
    /// micro-batches before the failing one stay trained, as with the calls made one by one;
    /// `Status::InvalidState` before `prepare` bound this model and an optimizer, or with the
    /// model in evaluation mode; `Status::InvalidArgument` for `max_micro_batches` < 1, a
    /// `max_seconds` that is negative or not finite (or > 0 with several processes), a loader
    /// without targets for `Loss::Mse` or `Loss::CrossEntropy`, or `Loss::CausalLm` for a model
    /// that is not a causal LM.
    ///
    /// ```no_run
    /// use accel::{Context, DataLoaderOptions, Loss, MlpOptions, Options, SgdOptions, Tensor};
    /// # fn main() -> accel::Result<()> {
    /// let ctx = Context::new(&Options::default())?;
    /// let model = ctx.mlp(&MlpOptions::new(&[4, 2]))?;
    /// let opt = ctx.sgd(&model, &SgdOptions::default())?;
    /// let (x, y) = (Tensor::from_slice(&[0.5f32; 64], &[16, 4])?, Tensor::from_slice(&[1.0f32; 32], &[16, 2])?);
    /// let mut loader = ctx.dataloader(&x, Some(&y), &DataLoaderOptions::default().with_batch_size(4))?;
    /// ctx.prepare(Some(&model), Some(&opt), None, Some(&loader))?;
    /// // between two frames: at most 8 micro-batches, within 4 ms
    /// let r = ctx.train_micro_batches(&model, &mut loader, Loss::Mse, 8, 0.004)?;
    /// println!("{} micro-batches, mean loss {}, epoch ended: {}", r.micro_batches, r.mean_loss, r.epoch_ended);
    /// # Ok(()) }
    /// ```
    pub fn train_micro_batches(
        &self,
        model: &Model<'_>,
        loader: &mut DataLoader<'_>,
        loss: Loss,
        max_micro_batches: i32,
        max_seconds: f64,
    ) -> Result<TrainResult> {
        let mut r = sys::accel_train_result { version: sys::ACCEL_TRAIN_RESULT_VERSION, ..Default::default() };
        // SAFETY: a live context (`self`), model and loader (borrowed for the call, the loader
        // exclusively: the call advances it); `r` is a local of the version it names.
        self.ck(unsafe {
            sys::accel_train_micro_batches(
                self.raw.as_ptr(),
                model.raw.ptr(),
                loader.raw.ptr(),
                loss.to_raw(),
                max_micro_batches,
                max_seconds,
                &mut r,
            )
        })?;
        Ok(TrainResult {
            micro_batches: r.micro_batches,
            optimizer_steps: r.optimizer_steps,
            skipped_steps: r.skipped_steps,
            epoch_ended: r.epoch_ended != 0,
            mean_loss: r.mean_loss,
            seconds: r.seconds,
        })
    }
}

/// A model (MLP or TorchScript), usable only while its context lives.
pub struct Model<'ctx> {
    raw: Arc<Owned<sys::accel_model>>,
    ctx: &'ctx Context,
}

impl<'ctx> Model<'ctx> {
    /// The raw handle.
    pub fn as_raw(&self) -> *mut sys::accel_model {
        self.raw.ptr()
    }

    /// The context this model was created on.
    pub fn context(&self) -> &'ctx Context {
        self.ctx
    }

    /// Forward on several inputs (`accel_model_forward`; the inputs are borrowed).
    pub fn forward(&self, inputs: &[&Tensor]) -> Result<Tensor> {
        let ptrs: Vec<*mut sys::accel_tensor> = inputs.iter().map(|t| t.as_raw()).collect();
        // SAFETY: a live context (`self`), live arguments borrowed for the call; `out` is tensor_out's local.
        self.ctx.tensor_out(|out| unsafe {
            sys::accel_model_forward(self.ctx.raw.as_ptr(), self.raw.ptr(), ptrs.as_ptr(), ptrs.len(), out)
        })
    }

    /// Forward on one input.
    pub fn forward1(&self, input: &Tensor) -> Result<Tensor> {
        let p = input.as_raw();
        self.ctx
            // SAFETY: a live context (`self`), live arguments borrowed for the call; `out` is tensor_out's local.
            .tensor_out(|out| unsafe { sys::accel_model_forward(self.ctx.raw.as_ptr(), self.raw.ptr(), &p, 1, out) })
    }

    /// Training (true) or evaluation (false) mode (`accel_model_set_training`).
    pub fn set_training(&self, training: bool) -> Result<()> {
        self.ctx
            // SAFETY: a live context (borrowed for 'ctx), live handle and arguments, local out-parameters.
            .ck(unsafe { sys::accel_model_set_training(self.ctx.raw.as_ptr(), self.raw.ptr(), training as c_int) })
    }

    /// (parameter tensors, scalar parameters) (`accel_model_num_parameters`).
    pub fn num_parameters(&self) -> Result<(usize, i64)> {
        let (mut t, mut e) = (0usize, 0i64);
        // SAFETY: a live handle (`self` holds an `Arc` to it), local out-parameters.
        check(unsafe { sys::accel_model_num_parameters(self.raw.ptr(), &mut t, &mut e) }, std::ptr::null())?;
        Ok((t, e))
    }

    /// The name of parameter `index`, e.g. "layers.0.weight" (`accel_model_parameter_name`).
    pub fn parameter_name(&self, index: usize) -> Result<String> {
        let mut p: *const c_char = std::ptr::null();
        // SAFETY: on ACCEL_OK `p` is the model's NUL-terminated string; it is copied at once.
        check(unsafe { sys::accel_model_parameter_name(self.raw.ptr(), index, &mut p) }, std::ptr::null())?;
        // SAFETY: `p` is the model's string (or NULL), copied at once while `self` keeps it alive.
        Ok(unsafe { owned_string(p) })
    }

    /// Every parameter name, in order.
    pub fn parameter_names(&self) -> Result<Vec<String>> {
        (0..self.num_parameters()?.0).map(|i| self.parameter_name(i)).collect()
    }

    /// A host copy of parameter `index` (fp32) (`accel_model_parameter`; a collective under ZeRO).
    pub fn parameter(&self, index: usize) -> Result<Tensor> {
        self.ctx
            // SAFETY: a live context (`self`), live arguments borrowed for the call; `out` is tensor_out's local.
            .tensor_out(|out| unsafe { sys::accel_model_parameter(self.ctx.raw.as_ptr(), self.raw.ptr(), index, out) })
    }

    /// Writes the weights (`accel_save_model`), see [`Context::save_model`].
    pub fn save(&self, path: impl AsRef<Path>) -> Result<()> {
        self.ctx.save_model(self, path)
    }

    /// A causal LM's forward and loss (`accel_lm_forward`). `labels` (usually input_ids with
    /// -100 where padded; shifted inside, as in transformers) gives the loss: the mean over the
    /// real targets, a token mean for `Context::backward` (the step's gradients are those of the
    /// mean over every real target of the global batch).
    pub fn lm_forward(&self, input_ids: &Tensor, attention_mask: Option<&Tensor>, labels: Option<&Tensor>)
        -> Result<CausalLmOutput> {
        let mut logits = std::ptr::null_mut();
        let mut loss = std::ptr::null_mut();
        let mut tokens = 0i64;
        let raw = |t: Option<&Tensor>| t.map_or(std::ptr::null(), |t| t.as_raw() as *const sys::accel_tensor);
        let want_loss = labels.is_some();
        // SAFETY: a live context (`self`), live tensors borrowed for the call, local out-parameters.
        self.ctx.ck(unsafe {
            sys::accel_lm_forward(
                self.ctx.raw.as_ptr(),
                self.raw.ptr(),
                input_ids.as_raw(),
                raw(attention_mask),
                raw(labels),
                &mut logits,
                if want_loss { &mut loss } else { std::ptr::null_mut() },
                if want_loss { &mut tokens } else { std::ptr::null_mut() },
            )
        })?;
        // SAFETY: on ACCEL_OK the out-parameters asked for are new tensors that belong to the caller.
        let logits = unsafe { Tensor::from_raw(logits) }.expect("accel returned OK and NULL logits");
        let loss = if want_loss { unsafe { Tensor::from_raw(loss) } } else { None };
        Ok(CausalLmOutput { loss, logits, num_tokens: tokens })
    }

    /// Continues the prompts `input_ids` ([batch, seq], int64, no padding) (`accel_lm_generate`):
    /// the prompts followed by the new tokens. Switch to evaluation mode first (dropout).
    pub fn generate(&self, input_ids: &Tensor, opts: &GenerateOptions) -> Result<Tensor> {
        let o = opts.to_sys()?;
        // SAFETY: a live context and model (borrowed for the call), a live tensor; `out` is tensor_out's local.
        self.ctx.tensor_out(|out| unsafe {
            sys::accel_lm_generate(self.ctx.raw.as_ptr(), self.raw.ptr(), input_ids.as_raw(), &o, out)
        })
    }

    /// Adds LoRA adapters (`accel_model_add_lora`): the base weights freeze and the model's
    /// parameters become the adapters. Before creating the optimizer and before `prepare`.
    pub fn add_lora(&self, opts: &LoraOptions) -> Result<()> {
        let (o, _names) = opts.to_sys()?;
        // SAFETY: a live context and model (borrowed for the call); `o` and the names it points to outlive it.
        self.ctx.ck(unsafe { sys::accel_model_add_lora(self.ctx.raw.as_ptr(), self.raw.ptr(), &o) })
    }

    /// Loads a PEFT LoRA adapter directory onto this base model (`accel_model_load_adapter`).
    pub fn load_adapter(&self, dir: impl AsRef<Path>) -> Result<()> {
        let p = path_cstring(dir.as_ref(), "dir")?;
        // SAFETY: a live context and model (borrowed for the call); the C string outlives it.
        self.ctx.ck(unsafe { sys::accel_model_load_adapter(self.ctx.raw.as_ptr(), self.raw.ptr(), p.as_ptr()) })
    }

    /// Writes the adapters as a PEFT adapter directory (`accel_save_adapter`; a collective).
    pub fn save_adapter(&self, dir: impl AsRef<Path>) -> Result<()> {
        let p = path_cstring(dir.as_ref(), "dir")?;
        // SAFETY: a live context and model (borrowed for the call); the C string outlives it.
        self.ctx.ck(unsafe { sys::accel_save_adapter(self.ctx.raw.as_ptr(), self.raw.ptr(), p.as_ptr()) })
    }

    /// Writes a causal LM as a Hugging Face directory (`Context::save_pretrained`).
    pub fn save_pretrained(&self, dir: impl AsRef<Path>) -> Result<()> {
        self.ctx.save_pretrained(self, dir)
    }
}

/// What `Model::lm_forward` returns (transformers' CausalLMOutput fields).
pub struct CausalLmOutput {
    /// The mean loss over the real targets (None without labels).
    pub loss: Option<Tensor>,
    /// The logits, fp32 [batch, seq, vocab].
    pub logits: Tensor,
    /// The real targets the loss averages (0 without labels).
    pub num_tokens: i64,
}

/// An optimizer (SGD, AdamW or LAMB). Keeps its model's handle alive.
pub struct Optimizer<'ctx> {
    raw: Arc<Owned<sys::accel_optimizer>>,
    _model: Arc<Owned<sys::accel_model>>,
    ctx: &'ctx Context,
}

impl<'ctx> Optimizer<'ctx> {
    /// The raw handle (still owned by this object; do not destroy it).
    pub fn as_raw(&self) -> *mut sys::accel_optimizer {
        self.raw.ptr()
    }

    /// The context this object was created on.
    pub fn context(&self) -> &'ctx Context {
        self.ctx
    }

    /// The current learning rate (`accel_optimizer_lr`).
    pub fn lr(&self) -> Result<f64> {
        let mut v = 0.0;
        // SAFETY: a live handle (`self` holds an `Arc` to it), local out-parameters.
        check(unsafe { sys::accel_optimizer_lr(self.raw.ptr(), &mut v) }, std::ptr::null())?;
        Ok(v)
    }
}

/// A learning-rate scheduler. Keeps its optimizer's handle alive.
pub struct Scheduler<'ctx> {
    raw: Arc<Owned<sys::accel_scheduler>>,
    _optimizer: Arc<Owned<sys::accel_optimizer>>,
    ctx: &'ctx Context,
}

impl<'ctx> Scheduler<'ctx> {
    /// The raw handle (still owned by this object; do not destroy it).
    pub fn as_raw(&self) -> *mut sys::accel_scheduler {
        self.raw.ptr()
    }

    /// The context this object was created on.
    pub fn context(&self) -> &'ctx Context {
        self.ctx
    }

    /// The real steps taken (`accel_scheduler_steps`).
    pub fn steps(&self) -> Result<i64> {
        let mut v = 0;
        // SAFETY: a live handle (`self` holds an `Arc` to it), local out-parameters.
        check(unsafe { sys::accel_scheduler_steps(self.raw.ptr(), &mut v) }, std::ptr::null())?;
        Ok(v)
    }
}

/// One batch: the inputs and, when the loader has them, the targets (on the context's device).
#[derive(Debug)]
pub struct Batch {
    pub inputs: Tensor,
    pub targets: Option<Tensor>,
}

/// A data loader over host data.
pub struct DataLoader<'ctx> {
    raw: Arc<Owned<sys::accel_dataloader>>,
    ctx: &'ctx Context,
}

impl<'ctx> DataLoader<'ctx> {
    /// The raw handle (still owned by this object; do not destroy it).
    pub fn as_raw(&self) -> *mut sys::accel_dataloader {
        self.raw.ptr()
    }

    /// The context this object was created on.
    pub fn context(&self) -> &'ctx Context {
        self.ctx
    }

    /// The next batch of the epoch, or None at its end (the loader then moves to the next
    /// epoch) (`accel_dataloader_next`).
    #[allow(clippy::should_implement_trait)]
    pub fn next(&mut self) -> Result<Option<Batch>> {
        let (mut x, mut y) = (std::ptr::null_mut(), std::ptr::null_mut());
        // SAFETY: new tensors owned by the caller, or NULL (end of epoch / no targets).
        self.ctx.ck(unsafe { sys::accel_dataloader_next(self.ctx.raw.as_ptr(), self.raw.ptr(), &mut x, &mut y) })?;
        // SAFETY: on ACCEL_OK, new tensors owned by the caller, or NULL (end of epoch, no
        // targets): each wrapped once.
        let (inputs, targets) = unsafe { (Tensor::from_raw(x), Tensor::from_raw(y)) };
        Ok(inputs.map(|inputs| Batch { inputs, targets }))
    }

    /// An iterator over the rest of the current epoch: `Result<Batch>` items until the
    /// epoch ends (after an error it yields nothing more).
    pub fn epoch_iter(&mut self) -> Batches<'_, 'ctx> {
        Batches { loader: self, done: false }
    }

    /// Same as [`DataLoader::epoch_iter`].
    pub fn iter(&mut self) -> Batches<'_, 'ctx> {
        self.epoch_iter()
    }

    /// The current epoch, 0-based (`accel_dataloader_epoch`).
    pub fn epoch(&self) -> Result<i64> {
        let mut v = 0;
        // SAFETY: a live handle (`self` holds an `Arc` to it), local out-parameters.
        check(unsafe { sys::accel_dataloader_epoch(self.raw.ptr(), &mut v) }, std::ptr::null())?;
        Ok(v)
    }

    /// Batches per epoch (this process's share once prepared) (`accel_dataloader_num_batches`).
    pub fn num_batches(&self) -> Result<i64> {
        let mut v = 0;
        // SAFETY: a live handle (`self` holds an `Arc` to it), local out-parameters.
        check(unsafe { sys::accel_dataloader_num_batches(self.raw.ptr(), &mut v) }, std::ptr::null())?;
        Ok(v)
    }

    /// Sets the epoch and rewinds to its first batch (`accel_dataloader_set_epoch`).
    pub fn set_epoch(&mut self, epoch: i64) -> Result<()> {
        // SAFETY: a live handle (`self` holds an `Arc` to it), local out-parameters.
        check(unsafe { sys::accel_dataloader_set_epoch(self.raw.ptr(), epoch) }, std::ptr::null())
    }
}

/// The batches of one epoch; see [`DataLoader::epoch_iter`].
pub struct Batches<'a, 'ctx> {
    loader: &'a mut DataLoader<'ctx>,
    done: bool,
}

impl<'a, 'ctx> Iterator for Batches<'a, 'ctx> {
    type Item = Result<Batch>;
    fn next(&mut self) -> Option<Result<Batch>> {
        if self.done {
            return None;
        }
        match self.loader.next() {
            Ok(Some(b)) => Some(Ok(b)),
            Ok(None) => {
                self.done = true;
                None
            }
            Err(e) => {
                self.done = true;
                Some(Err(e))
            }
        }
    }
}
