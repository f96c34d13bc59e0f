//! Memory estimates (`accel_estimate_memory`): what training a causal LM takes per GPU,
//! before running anything. Needs no context.
use crate::error::{check, Result};
use crate::options::{Attention, MemoryEstimateOptions};
use crate::sys;
use crate::util::cstring;

/// `accel_memory_estimate`: bytes per GPU of a training step.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemoryEstimate {
    /// The model's parameters.
    pub parameters: i64,
    /// Those trained (the adapters under LoRA).
    pub trainable_parameters: i64,
    /// The sequence length used.
    pub seq_len: i64,
    /// The attention kernel assumed (`Eager` or `Fused`).
    pub attention: Attention,
    /// Working weights, ZeRO's master shards, a LoRA base.
    pub weights: u64,
    /// The gradients the strategy holds at the step.
    pub gradients: u64,
    /// The optimizer's state on this GPU.
    pub optimizer_state: u64,
    /// Saved for backward at the end of the forward (with autocast's 16-bit weight copies).
    pub activations: u64,
    /// The rest of the peak: the logits' gradient, a block recomputed under checkpointing,
    /// gathered ZeRO-3 units, gradient buffers in flight.
    pub temporaries: u64,
    /// The peak of a training step (device memory).
    pub total: u64,
    /// The peak of host memory (offload: the optimizer's state, ZeRO's master, the step's copies).
    pub host: u64,
    /// Bytes between the device and the host per optimizer step (offload).
    pub transfer_bytes: u64,
    /// Of `transfer_bytes`, the gradients' copies to the host, made as each bucket is reduced:
    /// they run beside the backward (the rest is serial with the compute).
    pub gradient_transfer_bytes: u64,
}

/// Estimates the memory per GPU of training `model` (`accel_estimate_memory`): a named shape
/// ("gpt2", "gpt2-medium", "gpt2-large", "gpt2-xl", "llama-7b", "llama-13b", "llama-70b",
/// "tiny-llama"), a Hugging Face config.json, or a directory holding one.
///
/// Errors: `Status::Io` for a model that is neither a named shape nor a readable config;
/// `Status::InvalidArgument` for a bad option (e.g. `world_size` > 1 without a strategy);
/// `Status::Unsupported` for what `prepare` refuses (LAMB under ZeRO, ...).
///
/// ```no_run
/// use accel::{estimate_memory, MemoryEstimateOptions, Precision, Strategy};
/// # fn main() -> accel::Result<()> {
/// let opts = MemoryEstimateOptions::default()
///     .with_mixed_precision(Precision::Bf16)
///     .with_strategy(Strategy::Zero3)
///     .with_world_size(8);
/// let e = estimate_memory("llama-7b", &opts)?;
/// println!("{:.1} GiB per GPU", e.total as f64 / (1u64 << 30) as f64);
/// # Ok(()) }
/// ```
pub fn estimate_memory(model: &str, opts: &MemoryEstimateOptions) -> Result<MemoryEstimate> {
    crate::ensure_version()?;
    let m = cstring(model, "model")?;
    let (o, _names) = opts.to_sys()?;
    let mut out = sys::accel_memory_estimate { version: sys::ACCEL_MEMORY_ESTIMATE_VERSION, ..Default::default() };
    // SAFETY: the C strings (`m`, `_names`, which `o` points into) outlive the call; `out` is a
    // local of the version it names. Context-free: the message is this thread's, read at once.
    check(unsafe { sys::accel_estimate_memory(m.as_ptr(), &o, &mut out) }, std::ptr::null())?;
    Ok(MemoryEstimate {
        parameters: out.parameters,
        trainable_parameters: out.trainable_parameters,
        seq_len: out.seq_len,
        attention: Attention::from_raw(out.attention).unwrap_or(Attention::Auto),
        weights: out.weights,
        gradients: out.gradients,
        optimizer_state: out.optimizer_state,
        activations: out.activations,
        temporaries: out.temporaries,
        total: out.total,
        host: out.host,
        transfer_bytes: out.transfer_bytes,
        gradient_transfer_bytes: out.gradient_transfer_bytes,
    })
}
