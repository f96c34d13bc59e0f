//! `include/accel/accel.h`: Language models, and Adafactor.

use std::os::raw::{c_char, c_int};

use crate::{ACCEL_FLOAT32, accel_context, accel_dataloader, accel_dataloader_options, accel_dtype, accel_model, accel_optimizer, accel_status, accel_tensor};

// ---- Language models -----------------------------------------------------------------

/// A frozen base quantized for LoRA (QLoRA): the linear modules of the transformer blocks,
/// byte for byte as bitsandbytes quantizes them.
pub type accel_quantization = c_int;
/// the weights in `accel_lm_options.dtype`
pub const ACCEL_QUANT_NONE: accel_quantization = 0;
/// 4-bit NormalFloat, one float32 absmax per 64 values (bitsandbytes' quantize_4bit nf4)
pub const ACCEL_QUANT_NF4: accel_quantization = 1;
/// 4-bit float, the same blocks (quantize_4bit fp4)
pub const ACCEL_QUANT_FP4: accel_quantization = 2;
/// LLM.int8's row-wise int8 (Int8Params' CB and SCB)
pub const ACCEL_QUANT_INT8: accel_quantization = 3;

pub const ACCEL_LM_OPTIONS_VERSION: u32 = 2;

#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct accel_lm_options {
    pub version: u32,
    pub dtype: accel_dtype,
    pub gradient_checkpointing: i32,
    // version 2
    pub quantization: accel_quantization,
    /// non-zero: NF4/FP4's absmax quantized again (not with int8)
    pub double_quant: i32,
}

/// `ACCEL_LM_OPTIONS_INIT`
pub const ACCEL_LM_OPTIONS_INIT: accel_lm_options = accel_lm_options {
    version: ACCEL_LM_OPTIONS_VERSION,
    dtype: ACCEL_FLOAT32,
    gradient_checkpointing: 0,
    quantization: ACCEL_QUANT_NONE,
    double_quant: 0,
};

pub const ACCEL_LM_DATA_OPTIONS_VERSION: u32 = 2;

#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct accel_lm_data_options {
    pub version: u32,
    pub block_size: i64,
    pub max_length: i64,
    pub pad_id: i64,
    pub pad_to_multiple_of: i64,
    pub group_by_length: i32,
    // version 2
    /// 0: padding on the right; 1: on the left (an `accel_side`, declared `int32_t`)
    pub padding_side: i32,
}

/// `ACCEL_LM_DATA_OPTIONS_INIT`
pub const ACCEL_LM_DATA_OPTIONS_INIT: accel_lm_data_options = accel_lm_data_options {
    version: ACCEL_LM_DATA_OPTIONS_VERSION,
    block_size: 0,
    max_length: 0,
    pad_id: 0,
    pad_to_multiple_of: 0,
    group_by_length: 0,
    padding_side: 0,
};

pub const ACCEL_LORA_OPTIONS_VERSION: u32 = 1;

#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct accel_lora_options {
    pub version: u32,
    pub r: i32,
    pub alpha: f64,
    pub dropout: f64,
    pub target_modules: *const c_char,
    pub use_rslora: i32,
}

/// `ACCEL_LORA_OPTIONS_INIT`
pub const ACCEL_LORA_OPTIONS_INIT: accel_lora_options = accel_lora_options {
    version: ACCEL_LORA_OPTIONS_VERSION,
    r: 8,
    alpha: 8.0,
    dropout: 0.0,
    target_modules: std::ptr::null(),
    use_rslora: 0,
};

pub const ACCEL_ADAFACTOR_OPTIONS_VERSION: u32 = 1;

#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct accel_adafactor_options {
    pub version: u32,
    pub lr: f64,
    pub eps1: f64,
    pub eps2: f64,
    pub clip_threshold: f64,
    pub decay_rate: f64,
    pub beta1: f64,
    pub weight_decay: f64,
    pub scale_parameter: i32,
    pub relative_step: i32,
    pub warmup_init: i32,
}

/// `ACCEL_ADAFACTOR_OPTIONS_INIT`
pub const ACCEL_ADAFACTOR_OPTIONS_INIT: accel_adafactor_options = accel_adafactor_options {
    version: ACCEL_ADAFACTOR_OPTIONS_VERSION,
    lr: 0.0,
    eps1: 1e-30,
    eps2: 1e-3,
    clip_threshold: 1.0,
    decay_rate: -0.8,
    beta1: 0.0,
    weight_decay: 0.0,
    scale_parameter: 1,
    relative_step: 1,
    warmup_init: 0,
};

pub const ACCEL_GENERATE_OPTIONS_VERSION: u32 = 1;

#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct accel_generate_options {
    pub version: u32,
    pub max_new_tokens: i64,
    pub temperature: f64,
    pub top_k: i64,
    pub eos_token_id: i64,
    pub seed: u64,
    pub use_cache: i32,
}

/// `ACCEL_GENERATE_OPTIONS_INIT`
pub const ACCEL_GENERATE_OPTIONS_INIT: accel_generate_options = accel_generate_options {
    version: ACCEL_GENERATE_OPTIONS_VERSION,
    max_new_tokens: 32,
    temperature: 0.0,
    top_k: 0,
    eos_token_id: -1,
    seed: 0,
    use_cache: 1,
};

extern "C" {
    pub fn accel_lm_options_init(opts: *mut accel_lm_options, version: u32) -> accel_status;
    pub fn accel_model_load_pretrained(
        ctx: *mut accel_context,
        dir: *const c_char,
        opts: *const accel_lm_options,
        out: *mut *mut accel_model,
    ) -> accel_status;
    pub fn accel_model_create_lm(
        ctx: *mut accel_context,
        config: *const c_char,
        opts: *const accel_lm_options,
        out: *mut *mut accel_model,
    ) -> accel_status;
    pub fn accel_save_pretrained(ctx: *mut accel_context, model: *const accel_model, dir: *const c_char) -> accel_status;
    pub fn accel_lm_forward(
        ctx: *mut accel_context,
        model: *mut accel_model,
        input_ids: *const accel_tensor,
        attention_mask: *const accel_tensor,
        labels: *const accel_tensor,
        out_logits: *mut *mut accel_tensor,
        out_loss: *mut *mut accel_tensor,
        out_tokens: *mut i64,
    ) -> accel_status;
    pub fn accel_generate_options_init(opts: *mut accel_generate_options, version: u32) -> accel_status;
    pub fn accel_lm_generate(
        ctx: *mut accel_context,
        model: *mut accel_model,
        input_ids: *const accel_tensor,
        opts: *const accel_generate_options,
        out: *mut *mut accel_tensor,
    ) -> accel_status;
    pub fn accel_lora_options_init(opts: *mut accel_lora_options, version: u32) -> accel_status;
    pub fn accel_model_add_lora(ctx: *mut accel_context, model: *mut accel_model, opts: *const accel_lora_options)
        -> accel_status;
    pub fn accel_model_load_adapter(ctx: *mut accel_context, model: *mut accel_model, dir: *const c_char) -> accel_status;
    pub fn accel_save_adapter(ctx: *mut accel_context, model: *const accel_model, dir: *const c_char) -> accel_status;
    pub fn accel_token_file_write(path: *const c_char, tokens: *const accel_tensor, token_bytes: i32) -> accel_status;
    pub fn accel_token_file_read(path: *const c_char, out: *mut *mut accel_tensor) -> accel_status;
    pub fn accel_adafactor_options_init(opts: *mut accel_adafactor_options, version: u32) -> accel_status;
    pub fn accel_optimizer_create_adafactor(
        ctx: *mut accel_context,
        model: *mut accel_model,
        opts: *const accel_adafactor_options,
        out: *mut *mut accel_optimizer,
    ) -> accel_status;
    pub fn accel_lm_data_options_init(opts: *mut accel_lm_data_options, version: u32) -> accel_status;
    pub fn accel_lm_dataloader_create(
        ctx: *mut accel_context,
        tokens: *const accel_tensor,
        offsets: *const accel_tensor,
        lm_opts: *const accel_lm_data_options,
        loader_opts: *const accel_dataloader_options,
        out: *mut *mut accel_dataloader,
    ) -> accel_status;
}
