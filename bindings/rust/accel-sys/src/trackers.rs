//! `include/accel/accel.h`: Trackers.

use std::os::raw::{c_char, c_int};

use crate::{accel_context, accel_status};

// ---- Trackers ------------------------------------------------------------------------

pub type accel_log_writer = c_int;
pub const ACCEL_LOG_JSONL: accel_log_writer = 1;
pub const ACCEL_LOG_CSV: accel_log_writer = 2;
pub const ACCEL_LOG_TENSORBOARD: accel_log_writer = 4;

pub const ACCEL_TRACKER_OPTIONS_VERSION: u32 = 1;

/// `writers` is an OR of `accel_log_writer` values (as `u32`); 0: the environment's
/// `ACCEL_LOG_WITH`, else `ACCEL_LOG_JSONL`.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct accel_tracker_options {
    pub version: u32,
    pub log_dir: *const c_char,
    pub writers: u32,
    pub all_processes: i32,
}

/// `ACCEL_TRACKER_OPTIONS_INIT`
pub const ACCEL_TRACKER_OPTIONS_INIT: accel_tracker_options = accel_tracker_options {
    version: ACCEL_TRACKER_OPTIONS_VERSION,
    log_dir: std::ptr::null(),
    writers: 0,
    all_processes: 0,
};

extern "C" {
    pub fn accel_tracker_options_init(opts: *mut accel_tracker_options, version: u32) -> accel_status;
    pub fn accel_init_trackers(ctx: *mut accel_context, opts: *const accel_tracker_options) -> accel_status;
    pub fn accel_log(
        ctx: *mut accel_context,
        step: i64,
        names: *const *const c_char,
        values: *const f64,
        count: i32,
    ) -> accel_status;
    pub fn accel_end_training(ctx: *mut accel_context) -> accel_status;
}
