//! The models' options: the MLP, language models, LoRA and generation.

use std::ffi::CString;

use crate::error::{check, Result};
use crate::sys;
use crate::tensor::DType;
use crate::util::cstring;
use super::enums::{Activation, Quantization};

/// `accel_mlp_options`: `layer_sizes` holds input, hidden..., output (>= 2 entries).
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct MlpOptions {
    pub layer_sizes: Vec<i64>,
    pub activation: Activation,
    pub dropout: f64,
    pub bias: bool,
}

impl Default for MlpOptions {
    /// `ACCEL_MLP_OPTIONS_INIT` (no layers: set `layer_sizes`)
    fn default() -> MlpOptions {
        MlpOptions { layer_sizes: Vec::new(), activation: Activation::Relu, dropout: 0.0, bias: true }
    }
}

impl MlpOptions {
    /// An MLP with these layer sizes and the other defaults.
    pub fn new(layer_sizes: &[i64]) -> MlpOptions {
        MlpOptions { layer_sizes: layer_sizes.to_vec(), ..MlpOptions::default() }
    }

    /// The raw struct; its `layer_sizes` points into `self` (valid while `self` is).
    pub fn to_sys(&self) -> Result<sys::accel_mlp_options> {
        let mut o = sys::ACCEL_MLP_OPTIONS_INIT;
        // SAFETY: `o` is a writable struct of this version (the init writes only that version's bytes).
        check(unsafe { sys::accel_mlp_options_init(&mut o, sys::ACCEL_MLP_OPTIONS_VERSION) }, std::ptr::null())?;
        o.layer_sizes = if self.layer_sizes.is_empty() { std::ptr::null() } else { self.layer_sizes.as_ptr() };
        o.num_layer_sizes = self.layer_sizes.len();
        o.activation = self.activation.to_raw();
        o.dropout = self.dropout;
        o.bias = self.bias as i32;
        Ok(o)
    }
}

setters!(MlpOptions {
    with_layer_sizes layer_sizes: &[i64] => |v| v.to_vec(),
    with_activation activation: Activation,
    with_dropout dropout: f64,
    with_bias bias: bool,
});

/// `accel_lm_options`: how a language model is loaded or created.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct LmOptions {
    /// The parameters' dtype: `DType::F32` (default) or `DType::BF16`.
    pub dtype: DType,
    /// Recompute each transformer block's activations in backward (less memory, same gradients).
    pub gradient_checkpointing: bool,
    /// The blocks' linear weights quantized at load (QLoRA; default `Quantization::None`): the
    /// model then trains through LoRA adapters only (an optimizer without them is
    /// `Status::InvalidState`) and `save_pretrained` refuses it.
    pub quantization: Quantization,
    /// NF4's/FP4's absmax quantized again (bitsandbytes' `bnb_4bit_use_double_quant`); not with
    /// `Quantization::Int8`.
    pub double_quant: bool,
}

impl Default for LmOptions {
    /// `ACCEL_LM_OPTIONS_INIT`
    fn default() -> LmOptions {
        LmOptions { dtype: DType::F32, gradient_checkpointing: false, quantization: Quantization::None, double_quant: false }
    }
}

impl LmOptions {
    /// The raw struct.
    pub fn to_sys(&self) -> Result<sys::accel_lm_options> {
        let mut o = sys::ACCEL_LM_OPTIONS_INIT;
        // SAFETY: `o` is a writable struct of this version (the init writes only that version's bytes).
        check(unsafe { sys::accel_lm_options_init(&mut o, sys::ACCEL_LM_OPTIONS_VERSION) }, std::ptr::null())?;
        o.dtype = self.dtype.to_raw();
        o.gradient_checkpointing = self.gradient_checkpointing as i32;
        o.quantization = self.quantization.to_raw();
        o.double_quant = self.double_quant as i32;
        Ok(o)
    }
}

setters!(LmOptions {
    with_dtype dtype: DType,
    with_gradient_checkpointing gradient_checkpointing: bool,
    with_quantization quantization: Quantization,
    with_double_quant double_quant: bool,
});

/// `accel_lora_options` (PEFT's LoraConfig): rank, alpha, dropout, target modules.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct LoraOptions {
    pub r: i32,
    pub alpha: f64,
    pub dropout: f64,
    /// Module names ("q_proj", "v_proj") or `["all-linear"]`; empty: PEFT's default for the family.
    pub target_modules: Vec<String>,
    pub use_rslora: bool,
}

impl Default for LoraOptions {
    /// `ACCEL_LORA_OPTIONS_INIT`
    fn default() -> LoraOptions {
        LoraOptions { r: 8, alpha: 8.0, dropout: 0.0, target_modules: Vec::new(), use_rslora: false }
    }
}

impl LoraOptions {
    /// The raw struct and the C string its `target_modules` points into (keep it alive).
    pub fn to_sys(&self) -> Result<(sys::accel_lora_options, Option<CString>)> {
        let mut o = sys::ACCEL_LORA_OPTIONS_INIT;
        // SAFETY: `o` is a writable struct of this version (the init writes only that version's bytes).
        check(unsafe { sys::accel_lora_options_init(&mut o, sys::ACCEL_LORA_OPTIONS_VERSION) }, std::ptr::null())?;
        o.r = self.r;
        o.alpha = self.alpha;
        o.dropout = self.dropout;
        o.use_rslora = self.use_rslora as i32;
        let names =
            if self.target_modules.is_empty() { None } else { Some(cstring(&self.target_modules.join(","), "target_modules")?) };
        o.target_modules = names.as_ref().map_or(std::ptr::null(), |c| c.as_ptr());
        Ok((o, names))
    }
}

setters!(LoraOptions {
    with_r r: i32,
    with_alpha alpha: f64,
    with_dropout dropout: f64,
    with_target_modules target_modules: Vec<String>,
    with_use_rslora use_rslora: bool,
});

/// `accel_generate_options`: how a causal LM continues prompts.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct GenerateOptions {
    pub max_new_tokens: i64,
    /// 0: greedy; > 0: sampling.
    pub temperature: f64,
    /// Sampling among the k most likely tokens (0: all).
    pub top_k: i64,
    /// A row that emits it has finished (None: never).
    pub eos_token_id: Option<i64>,
    pub seed: u64,
    pub use_cache: bool,
}

impl Default for GenerateOptions {
    /// `ACCEL_GENERATE_OPTIONS_INIT`
    fn default() -> GenerateOptions {
        GenerateOptions { max_new_tokens: 32, temperature: 0.0, top_k: 0, eos_token_id: None, seed: 0, use_cache: true }
    }
}

impl GenerateOptions {
    /// The raw struct.
    pub fn to_sys(&self) -> Result<sys::accel_generate_options> {
        let mut o = sys::ACCEL_GENERATE_OPTIONS_INIT;
        // SAFETY: `o` is a writable struct of this version (the init writes only that version's bytes).
        check(unsafe { sys::accel_generate_options_init(&mut o, sys::ACCEL_GENERATE_OPTIONS_VERSION) }, std::ptr::null())?;
        o.max_new_tokens = self.max_new_tokens;
        o.temperature = self.temperature;
        o.top_k = self.top_k;
        o.eos_token_id = self.eos_token_id.unwrap_or(-1);
        o.seed = self.seed;
        o.use_cache = self.use_cache as i32;
        Ok(o)
    }
}

setters!(GenerateOptions {
    with_max_new_tokens max_new_tokens: i64,
    with_temperature temperature: f64,
    with_top_k top_k: i64,
    with_eos_token_id eos_token_id: Option<i64>,
    with_seed seed: u64,
    with_use_cache use_cache: bool,
});
