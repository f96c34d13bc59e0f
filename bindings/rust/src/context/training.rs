//! The training step: `prepare`, `backward`, `step` and the rest, and [`StepResult`].

use std::os::raw::c_int;

use crate::error::Result;
use crate::sys;
use crate::tensor::Tensor;
use super::{Context, DataLoader, Model, Optimizer, Scheduler};

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

impl Context {
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
}
