//! `include/accel/accel.h`: Data loading.

use crate::{accel_context, accel_dataloader, accel_status, accel_tensor};

// ---- Data loading ------------------------------------------------------------------

pub const ACCEL_DATALOADER_OPTIONS_VERSION: u32 = 3;

#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct accel_dataloader_options {
    pub version: u32,
    pub batch_size: i64,
    pub shuffle: i32,
    pub seed: u64,
    pub drop_last: i32,
    // version 2
    pub even_batches: i32,
    pub split_batches: i32,
    // version 3
    pub iterable: i32,
}

/// `ACCEL_DATALOADER_OPTIONS_INIT`
pub const ACCEL_DATALOADER_OPTIONS_INIT: accel_dataloader_options = accel_dataloader_options {
    version: ACCEL_DATALOADER_OPTIONS_VERSION,
    batch_size: 1,
    shuffle: 0,
    seed: 0,
    drop_last: 0,
    even_batches: 1,
    split_batches: 0,
    iterable: 0,
};

extern "C" {
    pub fn accel_dataloader_options_init(opts: *mut accel_dataloader_options, version: u32) -> accel_status;
    pub fn accel_dataloader_create(
        ctx: *mut accel_context,
        inputs: *const accel_tensor,
        targets: *const accel_tensor,
        opts: *const accel_dataloader_options,
        out: *mut *mut accel_dataloader,
    ) -> accel_status;
    pub fn accel_dataloader_destroy(loader: *mut accel_dataloader);
    pub fn accel_dataloader_next(
        ctx: *mut accel_context,
        loader: *mut accel_dataloader,
        out_inputs: *mut *mut accel_tensor,
        out_targets: *mut *mut accel_tensor,
    ) -> accel_status;
    pub fn accel_dataloader_epoch(loader: *const accel_dataloader, out: *mut i64) -> accel_status;
    pub fn accel_dataloader_num_batches(loader: *const accel_dataloader, out: *mut i64) -> accel_status;
    pub fn accel_dataloader_set_epoch(loader: *mut accel_dataloader, epoch: i64) -> accel_status;
}
