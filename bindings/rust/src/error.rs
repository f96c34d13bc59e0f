//! The error type: an accel status plus its message.
use std::ffi::CStr;
use std::fmt;
use std::os::raw::c_int;

use crate::sys;

/// The `accel_status` codes of the header, minus `ACCEL_OK` (success is `Ok(..)`), plus
/// `Unknown` for a code this binding does not know (the ABI may add codes).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Status {
    /// `ACCEL_ERR_INVALID_ARGUMENT`: a NULL handle, a bad value, a shape or dtype mismatch
    InvalidArgument,
    /// `ACCEL_ERR_INVALID_STATE`: a call at the wrong time
    InvalidState,
    /// `ACCEL_ERR_OUT_OF_MEMORY`: host or device allocation failed
    OutOfMemory,
    /// `ACCEL_ERR_COMMUNICATION`: a collective or a peer failed
    Communication,
    /// `ACCEL_ERR_TIMEOUT`: an operation did not complete in time
    Timeout,
    /// `ACCEL_ERR_IO`: a file is missing, unreadable or unwritable
    Io,
    /// `ACCEL_ERR_FORMAT`: a file or value has the wrong format
    Format,
    /// `ACCEL_ERR_UNSUPPORTED`: the build or machine lacks a capability
    Unsupported,
    /// `ACCEL_ERR_INTERNAL`: a bug in accel or libtorch (also a panicking simulated rank)
    Internal,
    /// `ACCEL_ERR_NON_FINITE`: a loss or value is NaN or infinite
    NonFinite,
    /// A code this version of the binding does not know (or 0 where an error was expected).
    Unknown(i32),
}

impl Status {
    /// The status for a raw `accel_status` code (`ACCEL_OK` gives `Unknown(0)`).
    pub fn from_code(code: i32) -> Status {
        match code {
            sys::ACCEL_ERR_INVALID_ARGUMENT => Status::InvalidArgument,
            sys::ACCEL_ERR_INVALID_STATE => Status::InvalidState,
            sys::ACCEL_ERR_OUT_OF_MEMORY => Status::OutOfMemory,
            sys::ACCEL_ERR_COMMUNICATION => Status::Communication,
            sys::ACCEL_ERR_TIMEOUT => Status::Timeout,
            sys::ACCEL_ERR_IO => Status::Io,
            sys::ACCEL_ERR_FORMAT => Status::Format,
            sys::ACCEL_ERR_UNSUPPORTED => Status::Unsupported,
            sys::ACCEL_ERR_INTERNAL => Status::Internal,
            sys::ACCEL_ERR_NON_FINITE => Status::NonFinite,
            other => Status::Unknown(other),
        }
    }

    /// The raw `accel_status` code.
    pub fn code(self) -> i32 {
        match self {
            Status::InvalidArgument => sys::ACCEL_ERR_INVALID_ARGUMENT,
            Status::InvalidState => sys::ACCEL_ERR_INVALID_STATE,
            Status::OutOfMemory => sys::ACCEL_ERR_OUT_OF_MEMORY,
            Status::Communication => sys::ACCEL_ERR_COMMUNICATION,
            Status::Timeout => sys::ACCEL_ERR_TIMEOUT,
            Status::Io => sys::ACCEL_ERR_IO,
            Status::Format => sys::ACCEL_ERR_FORMAT,
            Status::Unsupported => sys::ACCEL_ERR_UNSUPPORTED,
            Status::Internal => sys::ACCEL_ERR_INTERNAL,
            Status::NonFinite => sys::ACCEL_ERR_NON_FINITE,
            Status::Unknown(c) => c,
        }
    }

    /// The library's name for the code (`accel_status_name`): "ACCEL_ERR_IO", or
    /// "ACCEL_ERR_UNKNOWN" for a code the loaded library does not know.
    pub fn name(self) -> &'static str {
        status_name(self.code())
    }
}

/// `accel_status_name` for a raw code.
pub fn status_name(code: i32) -> &'static str {
    // SAFETY: the library returns a static NUL-terminated string for any code.
    unsafe {
        let p = sys::accel_status_name(code as c_int);
        if p.is_null() {
            return "ACCEL_ERR_UNKNOWN";
        }
        CStr::from_ptr(p).to_str().unwrap_or("ACCEL_ERR_UNKNOWN")
    }
}

impl fmt::Display for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Status::Unknown(c) => write!(f, "{} ({})", self.name(), c),
            _ => f.write_str(self.name()),
        }
    }
}

/// An error of accel (or of this binding's own checks, which use the same statuses):
/// its status and its message (the library's `accel_last_error`, read on the failing thread
/// right after the call).
#[derive(Debug, Clone, PartialEq)]
pub struct Error {
    /// What went wrong, as an `accel_status`.
    pub status: Status,
    /// The library's message ("accel_backward: ..."), or the binding's own.
    pub message: String,
}

impl Error {
    /// An error with this status and message.
    pub fn new(status: Status, message: impl Into<String>) -> Error {
        Error { status, message: message.into() }
    }

    pub(crate) fn invalid(message: impl Into<String>) -> Error {
        Error::new(Status::InvalidArgument, message)
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.status, self.message)
    }
}

impl std::error::Error for Error {}

/// `Result<T, accel::Error>`.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// The last error message on `ctx` (NULL: this thread's).
pub(crate) fn last_error(ctx: *const sys::accel_context) -> String {
    // SAFETY: ctx is NULL or a live context; the string is copied at once, before the next
    // call that could replace it.
    unsafe { crate::util::owned_string(sys::accel_last_error(ctx)) }
}

/// Turns a status into a Result, reading the message from `ctx` (NULL: the thread's slot).
#[inline]
pub(crate) fn check(status: sys::accel_status, ctx: *const sys::accel_context) -> Result<()> {
    if status == sys::ACCEL_OK {
        Ok(())
    } else {
        Err(Error { status: Status::from_code(status), message: last_error(ctx) })
    }
}
