//! Making a context and what it reports of itself: `new`, `with_defaults`, `as_raw`,
//! `last_error`, `device`, `mixed_precision`.

use std::cell::RefCell;
use std::marker::PhantomData;
use std::ptr::NonNull;

use crate::error::{check, last_error, Result};
use crate::options::{Device, Options, Precision};
use crate::sys;
use super::Context;

impl Context {
    /// Creates a context (`accel_init`). Errors for options outside their domain come
    /// from `accel_last_error(NULL)`.
    pub fn new(opts: &Options) -> Result<Context> {
        crate::ensure_version()?;
        let o = opts.to_sys()?;
        let mut out = std::ptr::null_mut();
        // SAFETY: `o` is a complete options struct of this version; `out` is a local out-parameter.
        check(unsafe { sys::accel_init(&o, &mut out) }, std::ptr::null())?;
        Ok(Context {
            raw: NonNull::new(out).expect("accel_init returned OK and NULL"),
            owned: true,
            kept: RefCell::new(Vec::new()),
            _not_sync: PhantomData,
        })
    }

    /// A context with the default options (`ACCEL_OPTIONS_INIT`).
    pub fn with_defaults() -> Result<Context> {
        Context::new(&Options::default())
    }

    /// The raw handle (owned by this Context; do not destroy it).
    pub fn as_raw(&self) -> *mut sys::accel_context {
        self.raw.as_ptr()
    }

    /// The message of the last error recorded on this context ("" when none).
    pub fn last_error(&self) -> String {
        last_error(self.raw.as_ptr())
    }

    /// The device the context placed itself on (`accel_device_kind`).
    pub fn device(&self) -> Result<Device> {
        let mut d = 0;
        // SAFETY: a live context (`self`), live arguments borrowed for the call, local out-parameters.
        self.ck(unsafe { sys::accel_device_kind(self.raw.as_ptr(), &mut d) })?;
        Ok(Device::from_raw(d).unwrap_or(Device::Auto))
    }

    /// The precision the context trains in (`accel_mixed_precision`): its `mixed_precision`
    /// (or `ACCEL_MIXED_PRECISION`) with `Precision::Auto` resolved for its device to
    /// `Precision::Bf16` or `Precision::No`; never `Auto`.
    pub fn mixed_precision(&self) -> Result<Precision> {
        let mut p = 0;
        // SAFETY: a live context (`self`), live arguments borrowed for the call, local out-parameters.
        self.ck(unsafe { sys::accel_mixed_precision(self.raw.as_ptr(), &mut p) })?;
        Precision::from_raw(p)
            .ok_or_else(|| crate::Error::new(crate::Status::Unsupported, format!("unknown precision {}", p)))
    }
}
