//! Optimizers and schedulers: the context's methods that make them, [`Optimizer`] and [`Scheduler`].

use std::sync::Arc;

use crate::error::{check, Result};
use crate::options::{AdafactorOptions, AdamWOptions, LambOptions, SchedulerOptions, SgdOptions};
use crate::sys;
use super::{Context, Model, Owned};

impl Context {
    // ---- optimizers, schedulers ----------------------------------------------------

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
}

/// An optimizer (SGD, AdamW or LAMB). Keeps its model's handle alive.
pub struct Optimizer<'ctx> {
    pub(super) raw: Arc<Owned<sys::accel_optimizer>>,
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
    pub(super) raw: Arc<Owned<sys::accel_scheduler>>,
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
