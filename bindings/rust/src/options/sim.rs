//! The simulator's options.

use std::ffi::CString;
use std::path::{Path, PathBuf};

use crate::error::{check, Result};
use crate::sys;
use crate::util::{cstring, path_cstring};

/// `accel_sim_options`. `None` strings are NULL in C.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct SimOptions {
    pub world_size: i32,
    /// per-rank capacity, "80GiB", "64MiB", ..., "unlimited"; None = the topology's GPU memory
    /// (79.15 GiB for 8xH100)
    pub device_memory: Option<String>,
    /// cost-model preset, "8xH100" (default), "8xA100", "8xPCIe", "Nx8xH100-IB"
    pub topology: Option<String>,
    pub timeout_seconds: f64,
    /// fault injection ("kill:RANK@collective:K", ...); None = none
    pub faults: Option<String>,
    /// Chrome trace JSON output; None = none
    pub trace_path: Option<PathBuf>,
    pub engine_threads: i32,
    /// each rank's host-memory budget, where `Offload::Optimizer` keeps the optimizer's state
    /// and master weights ("64GiB", ...; a size as `device_memory`'s); None = unlimited. Over it
    /// the rank fails with `Status::OutOfMemory` naming host memory.
    pub host_memory: Option<String>,
}

impl Default for SimOptions {
    /// `ACCEL_SIM_OPTIONS_INIT`
    fn default() -> SimOptions {
        SimOptions {
            world_size: 2,
            device_memory: None,
            topology: Some("8xH100".to_string()),
            timeout_seconds: 60.0,
            faults: None,
            trace_path: None,
            engine_threads: 0,
            host_memory: None,
        }
    }
}

impl SimOptions {
    /// A simulated world of `world_size` ranks, other fields at their defaults.
    pub fn with_world_size(world_size: i32) -> SimOptions {
        SimOptions { world_size, ..SimOptions::default() }
    }

    /// The raw struct and the C strings it points into (keep them together).
    pub fn to_sys(&self) -> Result<RawSimOptions> {
        let mut o = sys::ACCEL_SIM_OPTIONS_INIT;
        // SAFETY: `o` is a writable struct of this version (the init writes only that version's bytes).
        check(unsafe { sys::accel_sim_options_init(&mut o, sys::ACCEL_SIM_OPTIONS_VERSION) }, std::ptr::null())?;
        let device_memory = self.device_memory.as_deref().map(|s| cstring(s, "SimOptions.device_memory")).transpose()?;
        let topology = self.topology.as_deref().map(|s| cstring(s, "SimOptions.topology")).transpose()?;
        let faults = self.faults.as_deref().map(|s| cstring(s, "SimOptions.faults")).transpose()?;
        let trace_path = self.trace_path.as_deref().map(|p| path_cstring(p, "SimOptions.trace_path")).transpose()?;
        let host_memory = self.host_memory.as_deref().map(|s| cstring(s, "SimOptions.host_memory")).transpose()?;
        fn ptr(s: &Option<CString>) -> *const std::os::raw::c_char {
            s.as_ref().map_or(std::ptr::null(), |c| c.as_ptr())
        }
        o.world_size = self.world_size;
        o.device_memory = ptr(&device_memory);
        o.topology = ptr(&topology);
        o.timeout_seconds = self.timeout_seconds;
        o.faults = ptr(&faults);
        o.trace_path = ptr(&trace_path);
        o.engine_threads = self.engine_threads;
        o.host_memory = ptr(&host_memory);
        Ok(RawSimOptions { raw: o, _strings: [device_memory, topology, faults, trace_path, host_memory] })
    }
}

setters!(SimOptions {
    with_device_memory device_memory: Option<&str> => |v| v.map(str::to_string),
    with_topology topology: Option<&str> => |v| v.map(str::to_string),
    with_timeout_seconds timeout_seconds: f64,
    with_faults faults: Option<&str> => |v| v.map(str::to_string),
    with_trace_path trace_path: Option<&Path> => |v| v.map(Path::to_path_buf),
    with_engine_threads engine_threads: i32,
    with_host_memory host_memory: Option<&str> => |v| v.map(str::to_string),
});

/// A raw `accel_sim_options` with the strings it points to (moving this struct does not
/// move the strings' heap buffers, so `raw` stays valid as long as this value lives).
pub struct RawSimOptions {
    pub raw: sys::accel_sim_options,
    _strings: [Option<CString>; 5],
}
