//! `include/accel/accel.h`: Real time: inference beside training.

use std::os::raw::c_int;

use crate::{accel_context, accel_dataloader, accel_inference, accel_model, accel_status, accel_tensor};

// ---- Real time: inference beside training ----------------------------------------------

pub const ACCEL_INFERENCE_OPTIONS_VERSION: u32 = 1;

/// `num_threads`: the intra-op threads of the thread that calls `accel_inference_run`, in
/// [1, 4096].
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct accel_inference_options {
    pub version: u32,
    pub num_threads: i32,
}

/// `ACCEL_INFERENCE_OPTIONS_INIT`
pub const ACCEL_INFERENCE_OPTIONS_INIT: accel_inference_options =
    accel_inference_options { version: ACCEL_INFERENCE_OPTIONS_VERSION, num_threads: 1 };

pub type accel_loss = c_int;
pub const ACCEL_LOSS_MSE: accel_loss = 0;
pub const ACCEL_LOSS_CROSS_ENTROPY: accel_loss = 1;
pub const ACCEL_LOSS_CAUSAL_LM: accel_loss = 2;

pub const ACCEL_TRAIN_RESULT_VERSION: u32 = 1;

/// What `accel_train_micro_batches` did; the caller sets `version` (`ACCEL_TRAIN_RESULT_VERSION`).
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct accel_train_result {
    pub version: u32,
    pub micro_batches: i32,
    pub optimizer_steps: i32,
    pub skipped_steps: i32,
    pub epoch_ended: i32,
    pub mean_loss: f64,
    pub seconds: f64,
}

extern "C" {
    pub fn accel_inference_options_init(opts: *mut accel_inference_options, version: u32) -> accel_status;
    pub fn accel_inference_create(
        ctx: *mut accel_context,
        model: *const accel_model,
        opts: *const accel_inference_options,
        out: *mut *mut accel_inference,
    ) -> accel_status;
    pub fn accel_inference_destroy(inference: *mut accel_inference);
    pub fn accel_publish_weights(ctx: *mut accel_context, model: *const accel_model, out: *mut u64) -> accel_status;
    pub fn accel_inference_run(
        inference: *mut accel_inference,
        inputs: *const *mut accel_tensor,
        num_inputs: usize,
        out: *mut *mut accel_tensor,
    ) -> accel_status;
    pub fn accel_inference_weights(
        inference: *const accel_inference,
        out_version: *mut u64,
        out_age_seconds: *mut f64,
    ) -> accel_status;
    pub fn accel_train_micro_batches(
        ctx: *mut accel_context,
        model: *mut accel_model,
        loader: *mut accel_dataloader,
        loss: accel_loss,
        max_micro_batches: i32,
        max_seconds: f64,
        out: *mut accel_train_result,
    ) -> accel_status;
}
