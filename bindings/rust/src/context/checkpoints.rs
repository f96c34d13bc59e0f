//! Checkpoints: the project, `save_state`, `load_state`.

use std::os::raw::c_char;
use std::path::Path;

use crate::error::Result;
use crate::options::ProjectOptions;
use crate::sys;
use crate::util::{owned_string, path_cstring};
use super::Context;

impl Context {
    // ---- checkpoints ----------------------------------------------------------------

    /// Sets the project directory used by save_state/load_state with no directory
    /// (`accel_set_project`).
    pub fn set_project(&self, opts: &ProjectOptions) -> Result<()> {
        let (o, _dir) = opts.to_sys()?;
        // SAFETY: a live context; `o.project_dir` points into `_dir`, alive until the end.
        self.ck(unsafe { sys::accel_set_project(self.raw.as_ptr(), &o) })
    }

    fn dir_arg(dir: Option<&Path>) -> Result<Option<std::ffi::CString>> {
        dir.map(|d| path_cstring(d, "dir")).transpose()
    }

    /// Saves the training state (`accel_save_state`); None: the project's next checkpoint.
    pub fn save_state(&self, dir: Option<&Path>) -> Result<()> {
        let d = Context::dir_arg(dir)?;
        let p: *const c_char = d.as_ref().map_or(std::ptr::null(), |c| c.as_ptr());
        // SAFETY: a live context; `p` is NULL or points into `d`, alive until the end.
        self.ck(unsafe { sys::accel_save_state(self.raw.as_ptr(), p) })
    }

    /// Restores a saved state (`accel_load_state`); None: the project's newest checkpoint.
    pub fn load_state(&self, dir: Option<&Path>) -> Result<()> {
        let d = Context::dir_arg(dir)?;
        let p: *const c_char = d.as_ref().map_or(std::ptr::null(), |c| c.as_ptr());
        // SAFETY: a live context; `p` is NULL or points into `d`, alive until the end.
        self.ck(unsafe { sys::accel_load_state(self.raw.as_ptr(), p) })
    }

    /// The directory of the last successful save_state/load_state, "" before either
    /// (`accel_last_checkpoint`).
    pub fn last_checkpoint(&self) -> Result<String> {
        let mut p: *const c_char = std::ptr::null();
        // SAFETY: `p` is the library's string (or NULL); it is copied at once, before any other call.
        self.ck(unsafe { sys::accel_last_checkpoint(self.raw.as_ptr(), &mut p) })?;
        // SAFETY: `p` is the library's string (or NULL); it is copied at once, before any other call.
        Ok(unsafe { owned_string(p) })
    }
}
