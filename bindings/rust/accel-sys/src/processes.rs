//! `include/accel/accel.h`: Processes.

use std::os::raw::{c_char, c_int};

use crate::{accel_context, accel_status, accel_tensor};

// ---- Processes ---------------------------------------------------------------------

pub type accel_reduce_op = c_int;
pub const ACCEL_REDUCE_SUM: accel_reduce_op = 0;
pub const ACCEL_REDUCE_MEAN: accel_reduce_op = 1;
pub const ACCEL_REDUCE_MAX: accel_reduce_op = 2;
pub const ACCEL_REDUCE_MIN: accel_reduce_op = 3;
pub const ACCEL_REDUCE_PROD: accel_reduce_op = 4;

extern "C" {
    pub fn accel_process_index(ctx: *const accel_context, out: *mut i32) -> accel_status;
    pub fn accel_num_processes(ctx: *const accel_context, out: *mut i32) -> accel_status;
    pub fn accel_barrier(ctx: *mut accel_context) -> accel_status;
    pub fn accel_reduce(
        ctx: *mut accel_context,
        tensor: *const accel_tensor,
        op: accel_reduce_op,
        out: *mut *mut accel_tensor,
    ) -> accel_status;
    pub fn accel_local_process_index(ctx: *const accel_context, out: *mut i32) -> accel_status;
    pub fn accel_is_main_process(ctx: *const accel_context, out: *mut c_int) -> accel_status;
    pub fn accel_is_local_main_process(ctx: *const accel_context, out: *mut c_int) -> accel_status;
    pub fn accel_broadcast(
        ctx: *mut accel_context,
        tensor: *const accel_tensor,
        root: i32,
        out: *mut *mut accel_tensor,
    ) -> accel_status;
    pub fn accel_gather(ctx: *mut accel_context, tensor: *const accel_tensor, out: *mut *mut accel_tensor) -> accel_status;
    pub fn accel_gather_for_metrics(
        ctx: *mut accel_context,
        tensor: *const accel_tensor,
        out: *mut *mut accel_tensor,
    ) -> accel_status;
    pub fn accel_pad_across_processes(
        ctx: *mut accel_context,
        tensor: *const accel_tensor,
        dim: i32,
        pad_value: f64,
        pad_first: c_int,
        out: *mut *mut accel_tensor,
    ) -> accel_status;
    pub fn accel_print(ctx: *mut accel_context, message: *const c_char) -> accel_status;
    pub fn accel_set_seed(ctx: *mut accel_context, seed: u64, per_process: c_int) -> accel_status;
}
