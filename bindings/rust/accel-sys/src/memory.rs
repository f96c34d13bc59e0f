//! `include/accel/accel.h`: Memory estimates.

use std::os::raw::{c_char, c_int};

use crate::{
    ACCEL_FLOAT32, ACCEL_OFFLOAD_NONE, ACCEL_PRECISION_NO, ACCEL_QUANT_NONE, ACCEL_STRATEGY_NO, accel_dtype, accel_offload,
    accel_precision, accel_quantization, accel_status, accel_strategy,
};

// ---- Memory estimates ----------------------------------------------------------------

pub type accel_optimizer_kind = c_int;
pub const ACCEL_OPTIMIZER_SGD: accel_optimizer_kind = 0;
pub const ACCEL_OPTIMIZER_SGD_MOMENTUM: accel_optimizer_kind = 1;
pub const ACCEL_OPTIMIZER_ADAMW: accel_optimizer_kind = 2;
pub const ACCEL_OPTIMIZER_ADAFACTOR: accel_optimizer_kind = 3;
pub const ACCEL_OPTIMIZER_LAMB: accel_optimizer_kind = 4;

pub const ACCEL_MEMORY_ESTIMATE_OPTIONS_VERSION: u32 = 2;

#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct accel_memory_estimate_options {
    pub version: u32,
    pub mixed_precision: accel_precision,
    pub weights_dtype: accel_dtype,
    pub optimizer: accel_optimizer_kind,
    pub strategy: accel_strategy,
    pub world_size: i32,
    pub micro_batch: i64,
    pub seq_len: i64,
    pub gradient_checkpointing: i32,
    pub lora_rank: i32,
    pub lora_target_modules: *const c_char,
    pub attention: i32,
    // version 2
    pub offload: accel_offload,
    pub quantization: accel_quantization,
    pub double_quant: i32,
}

/// `ACCEL_MEMORY_ESTIMATE_OPTIONS_INIT`
pub const ACCEL_MEMORY_ESTIMATE_OPTIONS_INIT: accel_memory_estimate_options = accel_memory_estimate_options {
    version: ACCEL_MEMORY_ESTIMATE_OPTIONS_VERSION,
    mixed_precision: ACCEL_PRECISION_NO,
    weights_dtype: ACCEL_FLOAT32,
    optimizer: ACCEL_OPTIMIZER_ADAMW,
    strategy: ACCEL_STRATEGY_NO,
    world_size: 1,
    micro_batch: 1,
    seq_len: 0,
    gradient_checkpointing: 0,
    lora_rank: 0,
    lora_target_modules: std::ptr::null(),
    attention: 0,
    offload: ACCEL_OFFLOAD_NONE,
    quantization: ACCEL_QUANT_NONE,
    double_quant: 0,
};

pub const ACCEL_MEMORY_ESTIMATE_VERSION: u32 = 3;

/// An estimate in bytes per GPU; the caller sets `version` (`ACCEL_MEMORY_ESTIMATE_VERSION`).
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct accel_memory_estimate {
    pub version: u32,
    pub parameters: i64,
    pub trainable_parameters: i64,
    pub seq_len: i64,
    pub attention: i32,
    pub weights: u64,
    pub gradients: u64,
    pub optimizer_state: u64,
    pub activations: u64,
    pub temporaries: u64,
    pub total: u64,
    // version 2
    pub host: u64,
    pub transfer_bytes: u64,
    // version 3
    pub gradient_transfer_bytes: u64,
}

extern "C" {
    pub fn accel_memory_estimate_options_init(opts: *mut accel_memory_estimate_options, version: u32) -> accel_status;
    pub fn accel_estimate_memory(
        model: *const c_char,
        opts: *const accel_memory_estimate_options,
        out: *mut accel_memory_estimate,
    ) -> accel_status;
}
