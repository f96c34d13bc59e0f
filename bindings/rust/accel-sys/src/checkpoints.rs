//! `include/accel/accel.h`: Checkpoints.

use std::os::raw::c_char;

use crate::{accel_context, accel_status};

// ---- Checkpoints -------------------------------------------------------------------

pub const ACCEL_PROJECT_OPTIONS_VERSION: u32 = 1;

#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct accel_project_options {
    pub version: u32,
    pub project_dir: *const c_char,
    pub total_limit: i32,
}

/// `ACCEL_PROJECT_OPTIONS_INIT`
pub const ACCEL_PROJECT_OPTIONS_INIT: accel_project_options = accel_project_options {
    version: ACCEL_PROJECT_OPTIONS_VERSION,
    project_dir: std::ptr::null(),
    total_limit: 0,
};

extern "C" {
    pub fn accel_project_options_init(opts: *mut accel_project_options, version: u32) -> accel_status;
    pub fn accel_set_project(ctx: *mut accel_context, opts: *const accel_project_options) -> accel_status;
    pub fn accel_save_state(ctx: *mut accel_context, dir: *const c_char) -> accel_status;
    pub fn accel_load_state(ctx: *mut accel_context, dir: *const c_char) -> accel_status;
    pub fn accel_last_checkpoint(ctx: *const accel_context, out: *mut *const c_char) -> accel_status;
}
