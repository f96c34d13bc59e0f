//! Processes: the distributed utilities (ranks, collectives, `print`, seeds) of a context.

use std::os::raw::c_int;

use crate::error::Result;
use crate::options::ReduceOp;
use crate::sys;
use crate::tensor::Tensor;
use crate::util::cstring;
use super::Context;

impl Context {
    // ---- processes ------------------------------------------------------------------

    /// This process's (rank's) index (`accel_process_index`).
    pub fn process_index(&self) -> Result<i32> {
        let mut v = 0;
        // SAFETY: a live context (`self`), live arguments borrowed for the call, local out-parameters.
        self.ck(unsafe { sys::accel_process_index(self.raw.as_ptr(), &mut v) })?;
        Ok(v)
    }

    /// The number of processes (`accel_num_processes`).
    pub fn num_processes(&self) -> Result<i32> {
        let mut v = 0;
        // SAFETY: a live context (`self`), live arguments borrowed for the call, local out-parameters.
        self.ck(unsafe { sys::accel_num_processes(self.raw.as_ptr(), &mut v) })?;
        Ok(v)
    }

    /// The index on this node (`accel_local_process_index`).
    pub fn local_process_index(&self) -> Result<i32> {
        let mut v = 0;
        // SAFETY: a live context (`self`), live arguments borrowed for the call, local out-parameters.
        self.ck(unsafe { sys::accel_local_process_index(self.raw.as_ptr(), &mut v) })?;
        Ok(v)
    }

    /// Process 0? (`accel_is_main_process`)
    pub fn is_main_process(&self) -> Result<bool> {
        let mut v: c_int = 0;
        // SAFETY: a live context (`self`), live arguments borrowed for the call, local out-parameters.
        self.ck(unsafe { sys::accel_is_main_process(self.raw.as_ptr(), &mut v) })?;
        Ok(v != 0)
    }

    /// The main process of its node? (`accel_is_local_main_process`)
    pub fn is_local_main_process(&self) -> Result<bool> {
        let mut v: c_int = 0;
        // SAFETY: a live context (`self`), live arguments borrowed for the call, local out-parameters.
        self.ck(unsafe { sys::accel_is_local_main_process(self.raw.as_ptr(), &mut v) })?;
        Ok(v != 0)
    }

    /// Waits for every process (`accel_barrier`, Accelerate's wait_for_everyone).
    pub fn barrier(&self) -> Result<()> {
        // SAFETY: a live context (`self`), live arguments borrowed for the call, local out-parameters.
        self.ck(unsafe { sys::accel_barrier(self.raw.as_ptr()) })
    }

    /// Element-wise reduction across processes (`accel_reduce`).
    pub fn reduce(&self, tensor: &Tensor, op: ReduceOp) -> Result<Tensor> {
        // SAFETY: a live context (`self`), live arguments borrowed for the call; `out` is tensor_out's local.
        self.tensor_out(|out| unsafe { sys::accel_reduce(self.raw.as_ptr(), tensor.as_raw(), op.to_raw(), out) })
    }

    /// Process `root`'s tensor on every process (`accel_broadcast`).
    pub fn broadcast(&self, tensor: &Tensor, root: i32) -> Result<Tensor> {
        // SAFETY: a live context (`self`), live arguments borrowed for the call; `out` is tensor_out's local.
        self.tensor_out(|out| unsafe { sys::accel_broadcast(self.raw.as_ptr(), tensor.as_raw(), root, out) })
    }

    /// Concatenation along dim 0 in process order (`accel_gather`).
    pub fn gather(&self, tensor: &Tensor) -> Result<Tensor> {
        // SAFETY: a live context (`self`), live arguments borrowed for the call; `out` is tensor_out's local.
        self.tensor_out(|out| unsafe { sys::accel_gather(self.raw.as_ptr(), tensor.as_raw(), out) })
    }

    /// Gather that drops the duplicated rows of the last even batch (`accel_gather_for_metrics`).
    pub fn gather_for_metrics(&self, tensor: &Tensor) -> Result<Tensor> {
        // SAFETY: a live context (`self`), live arguments borrowed for the call; `out` is tensor_out's local.
        self.tensor_out(|out| unsafe { sys::accel_gather_for_metrics(self.raw.as_ptr(), tensor.as_raw(), out) })
    }

    /// Pads `dim` to the largest size among the processes (`accel_pad_across_processes`).
    pub fn pad_across_processes(&self, tensor: &Tensor, dim: i32, pad_value: f64, pad_first: bool) -> Result<Tensor> {
        // SAFETY: a live context (`self`), live arguments borrowed for the call; `out` is tensor_out's local.
        self.tensor_out(|out| unsafe {
            sys::accel_pad_across_processes(self.raw.as_ptr(), tensor.as_raw(), dim, pad_value, pad_first as c_int, out)
        })
    }

    /// Prints `message` on the main process only (`accel_print`).
    pub fn print(&self, message: &str) -> Result<()> {
        let m = cstring(message, "message")?;
        // SAFETY: the context is live; `m` outlives the call.
        self.ck(unsafe { sys::accel_print(self.raw.as_ptr(), m.as_ptr()) })
    }

    /// Reseeds the generators (`accel_set_seed`).
    pub fn set_seed(&self, seed: u64, per_process: bool) -> Result<()> {
        // SAFETY: a live context (`self`), live arguments borrowed for the call, local out-parameters.
        self.ck(unsafe { sys::accel_set_seed(self.raw.as_ptr(), seed, per_process as c_int) })
    }

    /// Charges simulated compute time to this rank's virtual clock; a no-op outside the
    /// simulator (`accel_sim_charge_compute`).
    pub fn sim_charge_compute(&self, seconds: f64, label: Option<&str>) -> Result<()> {
        let l = label.map(|s| cstring(s, "label")).transpose()?;
        let lp = l.as_ref().map_or(std::ptr::null(), |c| c.as_ptr());
        // SAFETY: the context is live; `l` (and so `lp`) outlives the call.
        self.ck(unsafe { sys::accel_sim_charge_compute(self.raw.as_ptr(), seconds, lp) })
    }
}
