//! `include/accel/accel.h`: Status codes and errors (and the opaque handles).

use std::os::raw::{c_char, c_int};

// ---- Status codes ------------------------------------------------------------------

pub type accel_status = c_int;
pub const ACCEL_OK: accel_status = 0;
pub const ACCEL_ERR_INVALID_ARGUMENT: accel_status = -1;
pub const ACCEL_ERR_INVALID_STATE: accel_status = -2;
pub const ACCEL_ERR_OUT_OF_MEMORY: accel_status = -3;
pub const ACCEL_ERR_COMMUNICATION: accel_status = -4;
pub const ACCEL_ERR_TIMEOUT: accel_status = -5;
pub const ACCEL_ERR_IO: accel_status = -6;
pub const ACCEL_ERR_FORMAT: accel_status = -7;
pub const ACCEL_ERR_UNSUPPORTED: accel_status = -8;
pub const ACCEL_ERR_INTERNAL: accel_status = -9;
pub const ACCEL_ERR_NON_FINITE: accel_status = -10;

/// Opaque handles (never constructed in Rust; only pointed to).
#[repr(C)]
pub struct accel_context {
    _private: [u8; 0],
}
#[repr(C)]
pub struct accel_tensor {
    _private: [u8; 0],
}
#[repr(C)]
pub struct accel_model {
    _private: [u8; 0],
}
#[repr(C)]
pub struct accel_optimizer {
    _private: [u8; 0],
}
#[repr(C)]
pub struct accel_scheduler {
    _private: [u8; 0],
}
#[repr(C)]
pub struct accel_dataloader {
    _private: [u8; 0],
}
#[repr(C)]
pub struct accel_sim_report {
    _private: [u8; 0],
}
#[repr(C)]
pub struct accel_inference {
    _private: [u8; 0],
}
#[repr(C)]
pub struct accel_tokenizer {
    _private: [u8; 0],
}

extern "C" {
    pub fn accel_status_name(status: accel_status) -> *const c_char;
    pub fn accel_last_error(ctx: *const accel_context) -> *const c_char;
}
