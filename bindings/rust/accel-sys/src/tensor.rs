//! `include/accel/accel.h`: Tensors.

use std::os::raw::{c_int, c_void};

use crate::{accel_status, accel_tensor};

// ---- Tensors -----------------------------------------------------------------------

pub type accel_dtype = c_int;
pub const ACCEL_FLOAT32: accel_dtype = 0;
pub const ACCEL_FLOAT16: accel_dtype = 1;
pub const ACCEL_BFLOAT16: accel_dtype = 2;
pub const ACCEL_INT64: accel_dtype = 3;
pub const ACCEL_INT32: accel_dtype = 4;
pub const ACCEL_UINT8: accel_dtype = 5;
pub const ACCEL_FLOAT64: accel_dtype = 6;
pub const ACCEL_INT8: accel_dtype = 7;

extern "C" {
    pub fn accel_dtype_size(dtype: accel_dtype) -> usize;
    pub fn accel_tensor_create(
        dtype: accel_dtype,
        shape: *const i64,
        ndim: usize,
        data: *const c_void,
        out: *mut *mut accel_tensor,
    ) -> accel_status;
    pub fn accel_tensor_destroy(tensor: *mut accel_tensor);
    pub fn accel_tensor_copy_to_host(tensor: *const accel_tensor, dst: *mut c_void, dst_bytes: usize) -> accel_status;
    pub fn accel_tensor_copy_to_host_as(
        tensor: *const accel_tensor,
        dtype: accel_dtype,
        dst: *mut c_void,
        dst_bytes: usize,
    ) -> accel_status;
    pub fn accel_tensor_item(tensor: *const accel_tensor, out: *mut f64) -> accel_status;
    pub fn accel_tensor_dtype(tensor: *const accel_tensor, out: *mut accel_dtype) -> accel_status;
    pub fn accel_tensor_ndim(tensor: *const accel_tensor, out: *mut usize) -> accel_status;
    pub fn accel_tensor_shape(tensor: *const accel_tensor, out: *mut i64, capacity: usize) -> accel_status;
    pub fn accel_tensor_numel(tensor: *const accel_tensor, out: *mut i64) -> accel_status;
    pub fn accel_tensor_nbytes(tensor: *const accel_tensor, out: *mut usize) -> accel_status;
}
