//! `include/accel/accel.h`: The simulator.

use std::os::raw::{c_char, c_void};

use crate::{accel_context, accel_options, accel_sim_report, accel_status};

// ---- The simulator -----------------------------------------------------------------

pub const ACCEL_SIM_OPTIONS_VERSION: u32 = 2;

#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct accel_sim_options {
    pub version: u32,
    pub world_size: i32,
    pub device_memory: *const c_char,
    pub topology: *const c_char,
    pub timeout_seconds: f64,
    pub faults: *const c_char,
    pub trace_path: *const c_char,
    pub engine_threads: i32,
    // version 2
    /// each rank's host-memory budget (a size as `device_memory`'s); NULL = unlimited
    pub host_memory: *const c_char,
}

/// The default topology of `ACCEL_SIM_OPTIONS_INIT`, NUL-terminated.
pub const ACCEL_SIM_DEFAULT_TOPOLOGY: &[u8] = b"8xH100\0";

/// `ACCEL_SIM_OPTIONS_INIT` (`topology` points at the static [`ACCEL_SIM_DEFAULT_TOPOLOGY`]).
pub const ACCEL_SIM_OPTIONS_INIT: accel_sim_options = accel_sim_options {
    version: ACCEL_SIM_OPTIONS_VERSION,
    world_size: 2,
    device_memory: std::ptr::null(),
    topology: ACCEL_SIM_DEFAULT_TOPOLOGY.as_ptr() as *const c_char,
    timeout_seconds: 60.0,
    faults: std::ptr::null(),
    trace_path: std::ptr::null(),
    engine_threads: 0,
    host_memory: std::ptr::null(),
};

/// `accel_rank_fn`: a rank's function (the header's typedef is a non-NULL function pointer;
/// `Option` gives it C's nullable representation).
pub type accel_rank_fn =
    Option<unsafe extern "C" fn(ctx: *mut accel_context, user: *mut c_void) -> accel_status>;

extern "C" {
    pub fn accel_sim_options_init(opts: *mut accel_sim_options, version: u32) -> accel_status;
    pub fn accel_sim_run(
        sim: *const accel_sim_options,
        ctx_opts: *const accel_options,
        fn_: accel_rank_fn,
        user: *mut c_void,
        out: *mut *mut accel_sim_report,
    ) -> accel_status;
    pub fn accel_sim_report_destroy(report: *mut accel_sim_report);
    pub fn accel_sim_report_world_size(report: *const accel_sim_report, out: *mut i32) -> accel_status;
    pub fn accel_sim_report_rank(
        report: *const accel_sim_report,
        rank: i32,
        out_status: *mut accel_status,
        out_error: *mut *const c_char,
        out_peak_bytes: *mut u64,
    ) -> accel_status;
    pub fn accel_sim_report_predicted_seconds(report: *const accel_sim_report, out: *mut f64) -> accel_status;
    pub fn accel_sim_report_rank_host(
        report: *const accel_sim_report,
        rank: i32,
        out_host_peak_bytes: *mut u64,
        out_transfer_bytes: *mut u64,
        out_transfer_seconds: *mut f64,
    ) -> accel_status;
    pub fn accel_sim_charge_compute(ctx: *mut accel_context, seconds: f64, label: *const c_char) -> accel_status;
}
