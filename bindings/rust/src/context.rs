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
use std::ptr::NonNull;
use std::sync::Arc;

use crate::error::{check, Result};
use crate::sys;
use crate::tensor::Tensor;

// The context's methods by area (each module an `impl Context` block) and the objects it
// makes, re-exported: `crate::context::NAME` (and `accel::NAME`) as before.
mod basics;
mod model;
mod optimizer;
mod data;
mod training;
mod processes;
mod checkpoints;
mod trackers;
mod realtime;

pub use self::model::{CausalLmOutput, Model};
pub use self::optimizer::{Optimizer, Scheduler};
pub use self::data::{Batch, Batches, DataLoader};
pub use self::training::StepResult;
pub use self::realtime::TrainResult;

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

impl Context {
    /// A simulated rank's context: borrowed, never destroyed by Rust.
    pub(crate) unsafe fn borrowed(raw: *mut sys::accel_context) -> Context {
        Context {
            raw: NonNull::new(raw).expect("accel_sim_run passed a NULL context"),
            owned: false,
            kept: RefCell::new(Vec::new()),
            _not_sync: PhantomData,
        }
    }

    #[inline]
    fn ck(&self, status: sys::accel_status) -> Result<()> {
        check(status, self.raw.as_ptr())
    }

    fn tensor_out(&self, f: impl FnOnce(*mut *mut sys::accel_tensor) -> sys::accel_status) -> Result<Tensor> {
        let mut out = std::ptr::null_mut();
        self.ck(f(&mut out))?;
        // SAFETY: on ACCEL_OK `out` is a new tensor that belongs to the caller.
        Ok(unsafe { Tensor::from_raw(out) }.expect("accel returned OK and a NULL tensor"))
    }
}
