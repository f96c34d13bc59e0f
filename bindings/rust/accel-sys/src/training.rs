//! `include/accel/accel.h`: Training.

use std::os::raw::c_int;

use crate::{accel_context, accel_dataloader, accel_model, accel_optimizer, accel_scheduler, accel_status, accel_tensor};

// ---- Training ----------------------------------------------------------------------

#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct accel_step_result {
    pub stepped: i32,
    pub skipped: i32,
    pub sync_step: i32,
    pub loss_scale: f64,
    pub optimizer_steps: i64,
    pub micro_steps: i64,
}

extern "C" {
    pub fn accel_prepare(
        ctx: *mut accel_context,
        model: *mut accel_model,
        optimizer: *mut accel_optimizer,
        scheduler: *mut accel_scheduler,
        loader: *mut accel_dataloader,
    ) -> accel_status;
    pub fn accel_backward(ctx: *mut accel_context, loss: *const accel_tensor) -> accel_status;
    pub fn accel_sync_gradients(ctx: *const accel_context, out: *mut c_int) -> accel_status;
    pub fn accel_clip_grad_norm(ctx: *mut accel_context, max_norm: f64, out: *mut f64) -> accel_status;
    pub fn accel_step(ctx: *mut accel_context, out: *mut accel_step_result) -> accel_status;
    pub fn accel_loss_scale(ctx: *const accel_context, out: *mut f64) -> accel_status;
}
