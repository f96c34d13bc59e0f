use std::ffi::{CStr, CString};
use std::os::raw::c_char;
use std::path::Path;

use crate::error::{Error, Result};

pub(crate) fn cstring(s: &str, what: &str) -> Result<CString> {
    CString::new(s).map_err(|_| Error::invalid(format!("{}: contains a NUL byte: {:?}", what, s)))
}

#[cfg(unix)]
pub(crate) fn path_cstring(p: &Path, what: &str) -> Result<CString> {
    use std::os::unix::ffi::OsStrExt;
    CString::new(p.as_os_str().as_bytes())
        .map_err(|_| Error::invalid(format!("{}: contains a NUL byte: {}", what, p.display())))
}

#[cfg(not(unix))]
pub(crate) fn path_cstring(p: &Path, what: &str) -> Result<CString> {
    match p.to_str() {
        Some(s) => cstring(s, what),
        None => Err(Error::invalid(format!("{}: not valid UTF-8: {}", what, p.display()))),
    }
}

/// Copies a library-owned C string (NULL gives "").
pub(crate) unsafe fn owned_string(p: *const c_char) -> String {
    if p.is_null() {
        String::new()
    } else {
        CStr::from_ptr(p).to_string_lossy().into_owned()
    }
}
