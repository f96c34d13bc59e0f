//! The options of memory estimates.

use std::ffi::CString;

use crate::error::{check, Result};
use crate::sys;
use crate::tensor::DType;
use crate::util::cstring;
use super::enums::{Attention, Offload, OptimizerKind, Precision, Quantization, Strategy};

/// `accel_memory_estimate_options`: what [`estimate_memory`](crate::estimate_memory) assumes
/// of the training run.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct MemoryEstimateOptions {
    /// Autocast with fp32 master weights.
    pub mixed_precision: Precision,
    /// `DType::F32` or `DType::BF16` (parameters, gradients and optimizer state in bf16; no autocast).
    pub weights_dtype: DType,
    pub optimizer: OptimizerKind,
    /// Needed when `world_size` > 1.
    pub strategy: Strategy,
    /// Processes (GPUs), >= 1.
    pub world_size: i32,
    /// Sequences per micro-batch and GPU, >= 1.
    pub micro_batch: i64,
    /// Tokens per sequence; 0: min(1024, max_position_embeddings).
    pub seq_len: i64,
    pub gradient_checkpointing: bool,
    /// > 0: LoRA adapters of this rank, the base frozen; 0: full fine-tuning.
    pub lora_rank: i32,
    /// The LoRA targets ("q_proj", "v_proj") or `["all-linear"]`; empty: PEFT's default for the family.
    pub lora_target_modules: Vec<String>,
    pub attention: Attention,
    /// `Offload::Optimizer`: the optimizer's state and ZeRO's separate fp32 master in host memory.
    pub offload: Offload,
    /// The LoRA base's linear weights quantized (NF4, FP4, int8); needs `lora_rank` > 0.
    pub quantization: Quantization,
    /// NF4's or FP4's absmax quantized again.
    pub double_quant: bool,
}

impl Default for MemoryEstimateOptions {
    /// `ACCEL_MEMORY_ESTIMATE_OPTIONS_INIT`
    fn default() -> MemoryEstimateOptions {
        MemoryEstimateOptions {
            mixed_precision: Precision::No,
            weights_dtype: DType::F32,
            optimizer: OptimizerKind::AdamW,
            strategy: Strategy::No,
            world_size: 1,
            micro_batch: 1,
            seq_len: 0,
            gradient_checkpointing: false,
            lora_rank: 0,
            lora_target_modules: Vec::new(),
            attention: Attention::Auto,
            offload: Offload::None,
            quantization: Quantization::None,
            double_quant: false,
        }
    }
}

impl MemoryEstimateOptions {
    /// The raw struct and the C string its `lora_target_modules` points into (keep it alive).
    pub fn to_sys(&self) -> Result<(sys::accel_memory_estimate_options, Option<CString>)> {
        let mut o = sys::ACCEL_MEMORY_ESTIMATE_OPTIONS_INIT;
        check(
            // SAFETY: `o` is a writable struct of this version (the init writes only that version's bytes).
            unsafe { sys::accel_memory_estimate_options_init(&mut o, sys::ACCEL_MEMORY_ESTIMATE_OPTIONS_VERSION) },
            std::ptr::null(),
        )?;
        o.mixed_precision = self.mixed_precision.to_raw();
        o.weights_dtype = self.weights_dtype.to_raw();
        o.optimizer = self.optimizer.to_raw();
        o.strategy = self.strategy.to_raw();
        o.world_size = self.world_size;
        o.micro_batch = self.micro_batch;
        o.seq_len = self.seq_len;
        o.gradient_checkpointing = self.gradient_checkpointing as i32;
        o.lora_rank = self.lora_rank;
        let names = if self.lora_target_modules.is_empty() {
            None
        } else {
            Some(cstring(&self.lora_target_modules.join(","), "lora_target_modules")?)
        };
        o.lora_target_modules = names.as_ref().map_or(std::ptr::null(), |c| c.as_ptr());
        o.attention = self.attention.to_raw();
        o.offload = self.offload.to_raw();
        o.quantization = self.quantization.to_raw();
        o.double_quant = self.double_quant as i32;
        Ok((o, names))
    }
}

setters!(MemoryEstimateOptions {
    with_mixed_precision mixed_precision: Precision,
    with_weights_dtype weights_dtype: DType,
    with_optimizer optimizer: OptimizerKind,
    with_strategy strategy: Strategy,
    with_world_size world_size: i32,
    with_micro_batch micro_batch: i64,
    with_seq_len seq_len: i64,
    with_gradient_checkpointing gradient_checkpointing: bool,
    with_lora_rank lora_rank: i32,
    with_lora_target_modules lora_target_modules: Vec<String>,
    with_attention attention: Attention,
    with_offload offload: Offload,
    with_quantization quantization: Quantization,
    with_double_quant double_quant: bool,
});
