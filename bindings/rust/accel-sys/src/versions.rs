//! `include/accel/accel.h`: Versions.

use std::os::raw::{c_char, c_int};

// ---- Versions ----------------------------------------------------------------------

pub const ACCEL_VERSION_MAJOR: c_int = 0;
pub const ACCEL_VERSION_MINOR: c_int = 1;
pub const ACCEL_VERSION_PATCH: c_int = 0;
pub const ACCEL_VERSION_NUMBER: c_int =
    ACCEL_VERSION_MAJOR * 10000 + ACCEL_VERSION_MINOR * 100 + ACCEL_VERSION_PATCH;
pub const ACCEL_VERSION_STRING: &str = "0.1.0";

extern "C" {
    pub fn accel_version_number() -> c_int;
    pub fn accel_version_string() -> *const c_char;
}
