//! `include/accel/accel.h`: The context (the Accelerator).

use std::os::raw::c_int;

use crate::{accel_context, accel_status};

// ---- The context -------------------------------------------------------------------

pub type accel_precision = c_int;
pub const ACCEL_PRECISION_NO: accel_precision = 0;
pub const ACCEL_PRECISION_BF16: accel_precision = 1;
pub const ACCEL_PRECISION_FP16: accel_precision = 2;
pub const ACCEL_PRECISION_AUTO: accel_precision = 3;

pub type accel_device = c_int;
pub const ACCEL_DEVICE_AUTO: accel_device = 0;
pub const ACCEL_DEVICE_CPU: accel_device = 1;
pub const ACCEL_DEVICE_CUDA: accel_device = 2;

pub type accel_strategy = c_int;
pub const ACCEL_STRATEGY_NO: accel_strategy = 0;
pub const ACCEL_STRATEGY_DDP: accel_strategy = 1;
pub const ACCEL_STRATEGY_ZERO1: accel_strategy = 2;
pub const ACCEL_STRATEGY_ZERO2: accel_strategy = 3;
pub const ACCEL_STRATEGY_ZERO3: accel_strategy = 4;
pub const ACCEL_STRATEGY_SHARD_GRAD_OP: accel_strategy = ACCEL_STRATEGY_ZERO2;
pub const ACCEL_STRATEGY_FULL_SHARD: accel_strategy = ACCEL_STRATEGY_ZERO3;

pub type accel_backend = c_int;
pub const ACCEL_BACKEND_AUTO: accel_backend = 0;
pub const ACCEL_BACKEND_GLOO: accel_backend = 1;
pub const ACCEL_BACKEND_NCCL: accel_backend = 2;
pub const ACCEL_BACKEND_SIM: accel_backend = 3;

/// What lives in host memory instead of the device's.
pub type accel_offload = c_int;
/// everything on the device
pub const ACCEL_OFFLOAD_NONE: accel_offload = 0;
/// ZeRO-Offload: the optimizer's state and the fp32 master weights in host memory
pub const ACCEL_OFFLOAD_OPTIMIZER: accel_offload = 1;
/// ZeRO-3 only: the optimizer's, and each rank's shard of the working weights in host memory
pub const ACCEL_OFFLOAD_PARAMETERS: accel_offload = 2;

pub const ACCEL_OPTIONS_VERSION: u32 = 4;

#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct accel_options {
    pub version: u32,
    pub mixed_precision: accel_precision,
    pub gradient_accumulation_steps: i32,
    pub seed: u64,
    pub device: accel_device,
    pub device_index: i32,
    pub loss_scale_init: f64,
    pub loss_scale_growth_factor: f64,
    pub loss_scale_backoff_factor: f64,
    pub loss_scale_growth_interval: i32,
    pub num_threads: i32,
    // version 2
    pub strategy: accel_strategy,
    pub bucket_bytes: i64,
    // version 3
    pub backend: accel_backend,
    pub timeout_seconds: f64,
    // version 4
    pub offload: accel_offload,
}

/// `ACCEL_OPTIONS_INIT`
pub const ACCEL_OPTIONS_INIT: accel_options = accel_options {
    version: ACCEL_OPTIONS_VERSION,
    mixed_precision: ACCEL_PRECISION_NO,
    gradient_accumulation_steps: 1,
    seed: 0,
    device: ACCEL_DEVICE_AUTO,
    device_index: 0,
    loss_scale_init: 65536.0,
    loss_scale_growth_factor: 2.0,
    loss_scale_backoff_factor: 0.5,
    loss_scale_growth_interval: 2000,
    num_threads: 0,
    strategy: ACCEL_STRATEGY_NO,
    bucket_bytes: 25 * 1024 * 1024,
    backend: ACCEL_BACKEND_AUTO,
    timeout_seconds: 0.0,
    offload: ACCEL_OFFLOAD_NONE,
};

extern "C" {
    pub fn accel_options_init(opts: *mut accel_options, version: u32) -> accel_status;
    pub fn accel_init(opts: *const accel_options, out: *mut *mut accel_context) -> accel_status;
    pub fn accel_destroy(ctx: *mut accel_context);
    pub fn accel_device_kind(ctx: *const accel_context, out: *mut accel_device) -> accel_status;
    pub fn accel_mixed_precision(ctx: *const accel_context, out: *mut accel_precision) -> accel_status;
}
