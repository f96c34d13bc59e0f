//! `include/accel/accel.h`: Optimizers and learning-rate schedulers.

use std::os::raw::c_int;

use crate::{accel_context, accel_model, accel_optimizer, accel_scheduler, accel_status};

// ---- Optimizers and schedulers -----------------------------------------------------

pub const ACCEL_SGD_OPTIONS_VERSION: u32 = 1;

#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct accel_sgd_options {
    pub version: u32,
    pub lr: f64,
    pub momentum: f64,
    pub dampening: f64,
    pub weight_decay: f64,
    pub nesterov: i32,
}

/// `ACCEL_SGD_OPTIONS_INIT`
pub const ACCEL_SGD_OPTIONS_INIT: accel_sgd_options = accel_sgd_options {
    version: ACCEL_SGD_OPTIONS_VERSION,
    lr: 0.01,
    momentum: 0.0,
    dampening: 0.0,
    weight_decay: 0.0,
    nesterov: 0,
};

pub const ACCEL_ADAMW_OPTIONS_VERSION: u32 = 1;

#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct accel_adamw_options {
    pub version: u32,
    pub lr: f64,
    pub beta1: f64,
    pub beta2: f64,
    pub eps: f64,
    pub weight_decay: f64,
}

/// `ACCEL_ADAMW_OPTIONS_INIT`
pub const ACCEL_ADAMW_OPTIONS_INIT: accel_adamw_options = accel_adamw_options {
    version: ACCEL_ADAMW_OPTIONS_VERSION,
    lr: 1e-3,
    beta1: 0.9,
    beta2: 0.999,
    eps: 1e-8,
    weight_decay: 0.01,
};

pub const ACCEL_LAMB_OPTIONS_VERSION: u32 = 1;

#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct accel_lamb_options {
    pub version: u32,
    pub lr: f64,
    pub beta1: f64,
    pub beta2: f64,
    pub eps: f64,
    pub weight_decay: f64,
}

/// `ACCEL_LAMB_OPTIONS_INIT`
pub const ACCEL_LAMB_OPTIONS_INIT: accel_lamb_options = accel_lamb_options {
    version: ACCEL_LAMB_OPTIONS_VERSION,
    lr: 1e-3,
    beta1: 0.9,
    beta2: 0.999,
    eps: 1e-6,
    weight_decay: 0.01,
};

pub type accel_schedule = c_int;
pub const ACCEL_SCHEDULE_CONSTANT: accel_schedule = 0;
pub const ACCEL_SCHEDULE_LINEAR: accel_schedule = 1;
pub const ACCEL_SCHEDULE_COSINE: accel_schedule = 2;

pub const ACCEL_SCHEDULER_OPTIONS_VERSION: u32 = 1;

#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct accel_scheduler_options {
    pub version: u32,
    pub kind: accel_schedule,
    pub warmup_steps: i64,
    pub total_steps: i64,
    pub min_lr_ratio: f64,
}

/// `ACCEL_SCHEDULER_OPTIONS_INIT`
pub const ACCEL_SCHEDULER_OPTIONS_INIT: accel_scheduler_options = accel_scheduler_options {
    version: ACCEL_SCHEDULER_OPTIONS_VERSION,
    kind: ACCEL_SCHEDULE_CONSTANT,
    warmup_steps: 0,
    total_steps: 0,
    min_lr_ratio: 0.0,
};

extern "C" {
    pub fn accel_sgd_options_init(opts: *mut accel_sgd_options, version: u32) -> accel_status;
    pub fn accel_adamw_options_init(opts: *mut accel_adamw_options, version: u32) -> accel_status;
    pub fn accel_optimizer_create_sgd(
        ctx: *mut accel_context,
        model: *mut accel_model,
        opts: *const accel_sgd_options,
        out: *mut *mut accel_optimizer,
    ) -> accel_status;
    pub fn accel_optimizer_create_adamw(
        ctx: *mut accel_context,
        model: *mut accel_model,
        opts: *const accel_adamw_options,
        out: *mut *mut accel_optimizer,
    ) -> accel_status;
    pub fn accel_lamb_options_init(opts: *mut accel_lamb_options, version: u32) -> accel_status;
    pub fn accel_optimizer_create_lamb(
        ctx: *mut accel_context,
        model: *mut accel_model,
        opts: *const accel_lamb_options,
        out: *mut *mut accel_optimizer,
    ) -> accel_status;
    pub fn accel_optimizer_destroy(optimizer: *mut accel_optimizer);
    pub fn accel_optimizer_lr(optimizer: *const accel_optimizer, out: *mut f64) -> accel_status;

    pub fn accel_scheduler_options_init(opts: *mut accel_scheduler_options, version: u32) -> accel_status;
    pub fn accel_scheduler_create(
        ctx: *mut accel_context,
        optimizer: *mut accel_optimizer,
        opts: *const accel_scheduler_options,
        out: *mut *mut accel_scheduler,
    ) -> accel_status;
    pub fn accel_scheduler_destroy(scheduler: *mut accel_scheduler);
    pub fn accel_scheduler_steps(scheduler: *const accel_scheduler, out: *mut i64) -> accel_status;
}
