//! Options as Rust structs. `Default` gives the header's `ACCEL_*_OPTIONS_INIT` values; the
//! conversion to the raw struct starts from the library's `accel_*_options_init` (so a
//! field this binding does not set keeps the library's default) and then sets every field.
use std::ffi::CString;
use std::path::{Path, PathBuf};

use crate::error::{check, Result};
use crate::sys;
use crate::tensor::DType;
use crate::util::{cstring, path_cstring};

macro_rules! c_enum {
    ($(#[$m:meta])* $name:ident : $raw:ty { $($(#[$vm:meta])* $variant:ident = $c:path),+ $(,)? }) => {
        $(#[$m])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum $name { $($(#[$vm])* #[doc = concat!("(`", stringify!($c), "`)")] $variant),+ }
        impl $name {
            /// The raw C value.
            pub fn to_raw(self) -> $raw { match self { $($name::$variant => $c),+ } }
            /// The variant for a raw C value (None for a value this binding does not know).
            pub fn from_raw(v: $raw) -> Option<$name> {
                $(if v == $c { return Some($name::$variant); })+
                None
            }
        }
    };
}

/// Builder-style setters, one per field: `fn with_FIELD(self, value) -> Self`. The options
/// structs are `#[non_exhaustive]` (the C structs grow by appending fields, and so do these):
/// outside this crate they are made from `Default` (or a constructor such as
/// [`MlpOptions::new`]) and these setters, or a `let mut` value whose fields are assigned;
/// a struct literal does not compile, so a new field breaks no one.
macro_rules! setters {
    ($name:ident { $($setter:ident $field:ident : $ty:ty $(=> |$v:ident| $conv:expr)?),+ $(,)? }) => {
        impl $name {
            $(
                #[doc = concat!("Sets `", stringify!($field), "` (builder style; the other fields are kept).")]
                #[must_use]
                #[inline]
                pub fn $setter(mut self, value: $ty) -> $name {
                    self.$field = setters!(@conv value $(, |$v| $conv)?);
                    self
                }
            )+
        }
    };
    (@conv $value:ident) => { $value };
    (@conv $value:ident, |$v:ident| $conv:expr) => { { let $v = $value; $conv } };
}

c_enum!(
    /// `accel_precision`
    Precision: sys::accel_precision {
    /// fp32 everywhere
    No = sys::ACCEL_PRECISION_NO,
    /// autocast to bfloat16
    Bf16 = sys::ACCEL_PRECISION_BF16,
    /// float16 with dynamic loss scaling
    Fp16 = sys::ACCEL_PRECISION_FP16,
    /// bf16 where the context's device computes it natively, else fp32 (`No`); resolved when
    /// the context is made (`Context::mixed_precision`), refused by `estimate_memory`
    Auto = sys::ACCEL_PRECISION_AUTO,
});
c_enum!(
    /// `accel_device`
    Device: sys::accel_device {
    Auto = sys::ACCEL_DEVICE_AUTO,
    Cpu = sys::ACCEL_DEVICE_CPU,
    Cuda = sys::ACCEL_DEVICE_CUDA,
});
c_enum!(
    /// `accel_strategy` (FSDP's names are the associated consts `SHARD_GRAD_OP`, `FULL_SHARD`)
    Strategy: sys::accel_strategy {
    No = sys::ACCEL_STRATEGY_NO,
    Ddp = sys::ACCEL_STRATEGY_DDP,
    Zero1 = sys::ACCEL_STRATEGY_ZERO1,
    Zero2 = sys::ACCEL_STRATEGY_ZERO2,
    Zero3 = sys::ACCEL_STRATEGY_ZERO3,
});
impl Strategy {
    /// `ACCEL_STRATEGY_SHARD_GRAD_OP` (= ZeRO-2)
    pub const SHARD_GRAD_OP: Strategy = Strategy::Zero2;
    /// `ACCEL_STRATEGY_FULL_SHARD` (= ZeRO-3)
    pub const FULL_SHARD: Strategy = Strategy::Zero3;
}
c_enum!(
    /// `accel_backend`
    Backend: sys::accel_backend {
    Auto = sys::ACCEL_BACKEND_AUTO,
    Gloo = sys::ACCEL_BACKEND_GLOO,
    Nccl = sys::ACCEL_BACKEND_NCCL,
    Sim = sys::ACCEL_BACKEND_SIM,
});
c_enum!(
    /// `accel_activation`
    Activation: sys::accel_activation {
    Relu = sys::ACCEL_ACT_RELU,
    Gelu = sys::ACCEL_ACT_GELU,
    Tanh = sys::ACCEL_ACT_TANH,
    Sigmoid = sys::ACCEL_ACT_SIGMOID,
});
c_enum!(
    /// `accel_schedule`
    Schedule: sys::accel_schedule {
    Constant = sys::ACCEL_SCHEDULE_CONSTANT,
    Linear = sys::ACCEL_SCHEDULE_LINEAR,
    Cosine = sys::ACCEL_SCHEDULE_COSINE,
});
c_enum!(
    /// `accel_reduce_op`
    ReduceOp: sys::accel_reduce_op {
    Sum = sys::ACCEL_REDUCE_SUM,
    Mean = sys::ACCEL_REDUCE_MEAN,
    Max = sys::ACCEL_REDUCE_MAX,
    Min = sys::ACCEL_REDUCE_MIN,
    Prod = sys::ACCEL_REDUCE_PROD,
});
c_enum!(
    /// `accel_optimizer_kind`: the optimizer [`estimate_memory`](crate::estimate_memory) assumes
    OptimizerKind: sys::accel_optimizer_kind {
    /// no state
    Sgd = sys::ACCEL_OPTIMIZER_SGD,
    /// one momentum buffer per parameter
    SgdMomentum = sys::ACCEL_OPTIMIZER_SGD_MOMENTUM,
    /// two moments per parameter
    AdamW = sys::ACCEL_OPTIMIZER_ADAMW,
    /// factored second moments
    Adafactor = sys::ACCEL_OPTIMIZER_ADAFACTOR,
    /// two moments per parameter (not under ZeRO)
    Lamb = sys::ACCEL_OPTIMIZER_LAMB,
});

c_enum!(
    /// `accel_loss`: the loss [`Context::train_micro_batches`](crate::Context::train_micro_batches)
    /// computes for each micro-batch
    Loss: sys::accel_loss {
    /// mean squared error of `forward(inputs)` and the batch's targets ([`Context::mse`](crate::Context::mse))
    Mse = sys::ACCEL_LOSS_MSE,
    /// cross-entropy of `forward(inputs)` and the batch's targets ([`Context::cross_entropy`](crate::Context::cross_entropy))
    CrossEntropy = sys::ACCEL_LOSS_CROSS_ENTROPY,
    /// a causal LM's next-token loss ([`Model::lm_forward`](crate::Model::lm_forward)): labels are the
    /// batch's targets, or its inputs when it has none
    CausalLm = sys::ACCEL_LOSS_CAUSAL_LM,
});

/// The attention kernel [`estimate_memory`](crate::estimate_memory) assumes
/// (`accel_memory_estimate_options.attention`, a plain `int32_t` in C).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Attention {
    /// this build's kernel: fused with libtorch >= 2.1, else eager (0)
    Auto,
    /// the T x T attention probabilities are saved for backward (1)
    Eager,
    /// a GPU's flash or memory-efficient attention (2)
    Fused,
}

impl Attention {
    /// The raw C value.
    pub fn to_raw(self) -> i32 {
        match self {
            Attention::Auto => 0,
            Attention::Eager => 1,
            Attention::Fused => 2,
        }
    }
    /// The variant for a raw C value (None for a value this binding does not know).
    pub fn from_raw(v: i32) -> Option<Attention> {
        match v {
            0 => Some(Attention::Auto),
            1 => Some(Attention::Eager),
            2 => Some(Attention::Fused),
            _ => None,
        }
    }
}

/// `accel_options` (version 3). See the header for each field's domain; the library checks
/// them in `Context::new` / `sim::run` (`Status::InvalidArgument` naming the field).
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct Options {
    pub mixed_precision: Precision,
    pub gradient_accumulation_steps: i32,
    pub seed: u64,
    pub device: Device,
    pub device_index: i32,
    pub loss_scale_init: f64,
    pub loss_scale_growth_factor: f64,
    pub loss_scale_backoff_factor: f64,
    pub loss_scale_growth_interval: i32,
    pub num_threads: i32,
    pub strategy: Strategy,
    pub bucket_bytes: i64,
    pub backend: Backend,
    pub timeout_seconds: f64,
}

impl Default for Options {
    /// `ACCEL_OPTIONS_INIT`
    fn default() -> Options {
        Options {
            mixed_precision: Precision::No,
            gradient_accumulation_steps: 1,
            seed: 0,
            device: Device::Auto,
            device_index: 0,
            loss_scale_init: 65536.0,
            loss_scale_growth_factor: 2.0,
            loss_scale_backoff_factor: 0.5,
            loss_scale_growth_interval: 2000,
            num_threads: 0,
            strategy: Strategy::No,
            bucket_bytes: 25 * 1024 * 1024,
            backend: Backend::Auto,
            timeout_seconds: 0.0,
        }
    }
}

impl Options {
    /// The raw struct: `accel_options_init(ACCEL_OPTIONS_VERSION)`, then every field.
    pub fn to_sys(&self) -> Result<sys::accel_options> {
        let mut o = sys::ACCEL_OPTIONS_INIT;
        // SAFETY: o is a valid, writable accel_options of the current version.
        check(unsafe { sys::accel_options_init(&mut o, sys::ACCEL_OPTIONS_VERSION) }, std::ptr::null())?;
        o.mixed_precision = self.mixed_precision.to_raw();
        o.gradient_accumulation_steps = self.gradient_accumulation_steps;
        o.seed = self.seed;
        o.device = self.device.to_raw();
        o.device_index = self.device_index;
        o.loss_scale_init = self.loss_scale_init;
        o.loss_scale_growth_factor = self.loss_scale_growth_factor;
        o.loss_scale_backoff_factor = self.loss_scale_backoff_factor;
        o.loss_scale_growth_interval = self.loss_scale_growth_interval;
        o.num_threads = self.num_threads;
        o.strategy = self.strategy.to_raw();
        o.bucket_bytes = self.bucket_bytes;
        o.backend = self.backend.to_raw();
        o.timeout_seconds = self.timeout_seconds;
        Ok(o)
    }
}

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

/// `accel_lm_options`: how a language model is loaded or created.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct LmOptions {
    /// The parameters' dtype: `DType::F32` (default) or `DType::BF16`.
    pub dtype: DType,
    /// Recompute each transformer block's activations in backward (less memory, same gradients).
    pub gradient_checkpointing: bool,
}

impl Default for LmOptions {
    /// `ACCEL_LM_OPTIONS_INIT`
    fn default() -> LmOptions {
        LmOptions { dtype: DType::F32, gradient_checkpointing: false }
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
        Ok(o)
    }
}

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
        Ok((o, names))
    }
}

/// `accel_lm_data_options`: how a causal-LM loader makes samples and pads them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct LmDataOptions {
    /// Without offsets: fixed blocks of this many tokens (>= 2).
    pub block_size: i64,
    /// With offsets: each sequence cut to this many tokens (0: whole).
    pub max_length: i64,
    /// The id of padding positions in input_ids.
    pub pad_id: i64,
    /// Dynamic padding to a multiple of this (0: the longest sequence of the batch).
    pub pad_to_multiple_of: i64,
    /// Length-grouped sampling (transformers' LengthGroupedSampler).
    pub group_by_length: bool,
}

impl LmDataOptions {
    /// The raw struct.
    pub fn to_sys(&self) -> Result<sys::accel_lm_data_options> {
        let mut o = sys::ACCEL_LM_DATA_OPTIONS_INIT;
        // SAFETY: `o` is a writable struct of this version (the init writes only that version's bytes).
        check(unsafe { sys::accel_lm_data_options_init(&mut o, sys::ACCEL_LM_DATA_OPTIONS_VERSION) }, std::ptr::null())?;
        o.block_size = self.block_size;
        o.max_length = self.max_length;
        o.pad_id = self.pad_id;
        o.pad_to_multiple_of = self.pad_to_multiple_of;
        o.group_by_length = self.group_by_length as i32;
        Ok(o)
    }
}

/// `accel_sgd_options`
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct SgdOptions {
    pub lr: f64,
    pub momentum: f64,
    pub dampening: f64,
    pub weight_decay: f64,
    pub nesterov: bool,
}

impl Default for SgdOptions {
    /// `ACCEL_SGD_OPTIONS_INIT`
    fn default() -> SgdOptions {
        SgdOptions { lr: 0.01, momentum: 0.0, dampening: 0.0, weight_decay: 0.0, nesterov: false }
    }
}

impl SgdOptions {
    /// The raw struct: the library's defaults of this version (`accel_*_options_init`), then every field.
    pub fn to_sys(&self) -> Result<sys::accel_sgd_options> {
        let mut o = sys::ACCEL_SGD_OPTIONS_INIT;
        // SAFETY: `o` is a writable struct of this version (the init writes only that version's bytes).
        check(unsafe { sys::accel_sgd_options_init(&mut o, sys::ACCEL_SGD_OPTIONS_VERSION) }, std::ptr::null())?;
        o.lr = self.lr;
        o.momentum = self.momentum;
        o.dampening = self.dampening;
        o.weight_decay = self.weight_decay;
        o.nesterov = self.nesterov as i32;
        Ok(o)
    }
}

/// `accel_adamw_options`
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct AdamWOptions {
    pub lr: f64,
    pub beta1: f64,
    pub beta2: f64,
    pub eps: f64,
    pub weight_decay: f64,
}

impl Default for AdamWOptions {
    /// `ACCEL_ADAMW_OPTIONS_INIT`
    fn default() -> AdamWOptions {
        AdamWOptions { lr: 1e-3, beta1: 0.9, beta2: 0.999, eps: 1e-8, weight_decay: 0.01 }
    }
}

impl AdamWOptions {
    /// The raw struct: the library's defaults of this version (`accel_*_options_init`), then every field.
    pub fn to_sys(&self) -> Result<sys::accel_adamw_options> {
        let mut o = sys::ACCEL_ADAMW_OPTIONS_INIT;
        // SAFETY: `o` is a writable struct of this version (the init writes only that version's bytes).
        check(unsafe { sys::accel_adamw_options_init(&mut o, sys::ACCEL_ADAMW_OPTIONS_VERSION) }, std::ptr::null())?;
        o.lr = self.lr;
        o.beta1 = self.beta1;
        o.beta2 = self.beta2;
        o.eps = self.eps;
        o.weight_decay = self.weight_decay;
        Ok(o)
    }
}

/// `accel_lamb_options`
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct LambOptions {
    pub lr: f64,
    pub beta1: f64,
    pub beta2: f64,
    pub eps: f64,
    pub weight_decay: f64,
}

impl Default for LambOptions {
    /// `ACCEL_LAMB_OPTIONS_INIT`
    fn default() -> LambOptions {
        LambOptions { lr: 1e-3, beta1: 0.9, beta2: 0.999, eps: 1e-6, weight_decay: 0.01 }
    }
}

impl LambOptions {
    /// The raw struct: the library's defaults of this version (`accel_*_options_init`), then every field.
    pub fn to_sys(&self) -> Result<sys::accel_lamb_options> {
        let mut o = sys::ACCEL_LAMB_OPTIONS_INIT;
        // SAFETY: `o` is a writable struct of this version (the init writes only that version's bytes).
        check(unsafe { sys::accel_lamb_options_init(&mut o, sys::ACCEL_LAMB_OPTIONS_VERSION) }, std::ptr::null())?;
        o.lr = self.lr;
        o.beta1 = self.beta1;
        o.beta2 = self.beta2;
        o.eps = self.eps;
        o.weight_decay = self.weight_decay;
        Ok(o)
    }
}

/// `accel_adafactor_options` (transformers' Adafactor defaults; `beta1` 0 is no first moment,
/// `lr` 0 with `relative_step`).
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct AdafactorOptions {
    pub lr: f64,
    pub eps1: f64,
    pub eps2: f64,
    pub clip_threshold: f64,
    pub decay_rate: f64,
    pub beta1: f64,
    pub weight_decay: f64,
    pub scale_parameter: bool,
    pub relative_step: bool,
    pub warmup_init: bool,
}

impl Default for AdafactorOptions {
    /// `ACCEL_ADAFACTOR_OPTIONS_INIT`
    fn default() -> AdafactorOptions {
        AdafactorOptions {
            lr: 0.0,
            eps1: 1e-30,
            eps2: 1e-3,
            clip_threshold: 1.0,
            decay_rate: -0.8,
            beta1: 0.0,
            weight_decay: 0.0,
            scale_parameter: true,
            relative_step: true,
            warmup_init: false,
        }
    }
}

impl AdafactorOptions {
    /// The raw struct: the library's defaults of this version, then every field.
    pub fn to_sys(&self) -> Result<sys::accel_adafactor_options> {
        let mut o = sys::ACCEL_ADAFACTOR_OPTIONS_INIT;
        // SAFETY: `o` is a writable struct of this version (the init writes only that version's bytes).
        check(unsafe { sys::accel_adafactor_options_init(&mut o, sys::ACCEL_ADAFACTOR_OPTIONS_VERSION) }, std::ptr::null())?;
        o.lr = self.lr;
        o.eps1 = self.eps1;
        o.eps2 = self.eps2;
        o.clip_threshold = self.clip_threshold;
        o.decay_rate = self.decay_rate;
        o.beta1 = self.beta1;
        o.weight_decay = self.weight_decay;
        o.scale_parameter = self.scale_parameter as i32;
        o.relative_step = self.relative_step as i32;
        o.warmup_init = self.warmup_init as i32;
        Ok(o)
    }
}

/// `accel_scheduler_options`
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct SchedulerOptions {
    pub kind: Schedule,
    pub warmup_steps: i64,
    pub total_steps: i64,
    pub min_lr_ratio: f64,
}

impl Default for SchedulerOptions {
    /// `ACCEL_SCHEDULER_OPTIONS_INIT`
    fn default() -> SchedulerOptions {
        SchedulerOptions { kind: Schedule::Constant, warmup_steps: 0, total_steps: 0, min_lr_ratio: 0.0 }
    }
}

impl SchedulerOptions {
    /// The raw struct: the library's defaults of this version (`accel_*_options_init`), then every field.
    pub fn to_sys(&self) -> Result<sys::accel_scheduler_options> {
        let mut o = sys::ACCEL_SCHEDULER_OPTIONS_INIT;
        check(
            // SAFETY: `o` is a writable struct of this version (the init writes only that version's bytes).
            unsafe { sys::accel_scheduler_options_init(&mut o, sys::ACCEL_SCHEDULER_OPTIONS_VERSION) },
            std::ptr::null(),
        )?;
        o.kind = self.kind.to_raw();
        o.warmup_steps = self.warmup_steps;
        o.total_steps = self.total_steps;
        o.min_lr_ratio = self.min_lr_ratio;
        Ok(o)
    }
}

/// `accel_dataloader_options` (version 3)
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct DataLoaderOptions {
    pub batch_size: i64,
    pub shuffle: bool,
    pub seed: u64,
    pub drop_last: bool,
    pub even_batches: bool,
    pub split_batches: bool,
    /// the samples as a stream, read in their order and sharded as Accelerate's
    /// `IterableDatasetShard`; needs `shuffle: false`
    pub iterable: bool,
}

impl Default for DataLoaderOptions {
    /// `ACCEL_DATALOADER_OPTIONS_INIT`
    fn default() -> DataLoaderOptions {
        DataLoaderOptions {
            batch_size: 1,
            shuffle: false,
            seed: 0,
            drop_last: false,
            even_batches: true,
            split_batches: false,
            iterable: false,
        }
    }
}

impl DataLoaderOptions {
    /// The raw struct: the library's defaults of this version (`accel_*_options_init`), then every field.
    pub fn to_sys(&self) -> Result<sys::accel_dataloader_options> {
        let mut o = sys::ACCEL_DATALOADER_OPTIONS_INIT;
        check(
            // SAFETY: `o` is a writable struct of this version (the init writes only that version's bytes).
            unsafe { sys::accel_dataloader_options_init(&mut o, sys::ACCEL_DATALOADER_OPTIONS_VERSION) },
            std::ptr::null(),
        )?;
        o.batch_size = self.batch_size;
        o.shuffle = self.shuffle as i32;
        o.seed = self.seed;
        o.drop_last = self.drop_last as i32;
        o.even_batches = self.even_batches as i32;
        o.split_batches = self.split_batches as i32;
        o.iterable = self.iterable as i32;
        Ok(o)
    }
}

/// `accel_sim_options`. `None` strings are NULL in C.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct SimOptions {
    pub world_size: i32,
    /// per-rank capacity, "80GiB", "64MiB", ...; None = unlimited
    pub device_memory: Option<String>,
    /// cost-model preset, "8xH100" (default), "8xA100", "8xPCIe", "Nx8xH100-IB"
    pub topology: Option<String>,
    pub timeout_seconds: f64,
    /// fault injection ("kill:RANK@collective:K", ...); None = none
    pub faults: Option<String>,
    /// Chrome trace JSON output; None = none
    pub trace_path: Option<PathBuf>,
    pub engine_threads: i32,
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
        Ok(RawSimOptions { raw: o, _strings: [device_memory, topology, faults, trace_path] })
    }
}

/// A raw `accel_sim_options` with the strings it points to (moving this struct does not
/// move the strings' heap buffers, so `raw` stays valid as long as this value lives).
pub struct RawSimOptions {
    pub raw: sys::accel_sim_options,
    _strings: [Option<CString>; 4],
}

/// `accel_project_options`
#[derive(Debug, Clone, PartialEq, Default)]
#[non_exhaustive]
pub struct ProjectOptions {
    /// non-empty; checkpoints go to `<project_dir>/checkpoints/checkpoint_N`
    pub project_dir: PathBuf,
    /// keep the newest N automatic checkpoints; 0 = keep all (the default)
    pub total_limit: i32,
}

impl ProjectOptions {
    /// A project in `project_dir`, the other fields at their defaults.
    pub fn new(project_dir: impl Into<PathBuf>) -> ProjectOptions {
        ProjectOptions { project_dir: project_dir.into(), ..ProjectOptions::default() }
    }

    /// The raw struct (version and defaults from `accel_project_options_init`) and the
    /// C string its `project_dir` points into.
    pub fn to_sys(&self) -> Result<(sys::accel_project_options, CString)> {
        let mut o = sys::ACCEL_PROJECT_OPTIONS_INIT;
        check(
            // SAFETY: `o` is a writable struct of this version (the init writes only that version's bytes).
            unsafe { sys::accel_project_options_init(&mut o, sys::ACCEL_PROJECT_OPTIONS_VERSION) },
            std::ptr::null(),
        )?;
        let dir = path_cstring(&self.project_dir, "ProjectOptions.project_dir")?;
        o.project_dir = dir.as_ptr();
        o.total_limit = self.total_limit;
        Ok((o, dir))
    }
}


/// A set of `accel_log_writer`s: where [`Context::log`](crate::Context::log) writes a step's
/// scalars. Combine with `|`: `LogWriters::JSONL | LogWriters::CSV`. The empty set (the
/// default) leaves the choice to the library: the environment's `ACCEL_LOG_WITH` ("jsonl",
/// "csv", "tensorboard", "all", comma-separated), else JSON lines.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct LogWriters(u32);

impl LogWriters {
    /// `LOG_DIR/metrics.jsonl`, appended to: `{"step":S,"wall_time":T,"values":{"NAME":V,...}}`
    /// a line per call (a value that is not finite is `null`) (`ACCEL_LOG_JSONL`)
    pub const JSONL: LogWriters = LogWriters(sys::ACCEL_LOG_JSONL as u32);
    /// `LOG_DIR/metrics.csv`, appended to: `wall_time,step,name,value`, a row per scalar
    /// (`ACCEL_LOG_CSV`)
    pub const CSV: LogWriters = LogWriters(sys::ACCEL_LOG_CSV as u32);
    /// `LOG_DIR/events.out.tfevents.TIME.HOST.PID`, a new one for each `init_trackers`, that
    /// TensorBoard reads (scalars as `f32`) (`ACCEL_LOG_TENSORBOARD`)
    pub const TENSORBOARD: LogWriters = LogWriters(sys::ACCEL_LOG_TENSORBOARD as u32);
    /// The three writers.
    pub const ALL: LogWriters = LogWriters(Self::JSONL.0 | Self::CSV.0 | Self::TENSORBOARD.0);

    /// The empty set: the environment's `ACCEL_LOG_WITH`, else `JSONL`.
    pub const fn empty() -> LogWriters {
        LogWriters(0)
    }
    /// No writer named (the library chooses).
    pub const fn is_empty(self) -> bool {
        self.0 == 0
    }
    /// Every writer of `other` is in `self`.
    pub const fn contains(self, other: LogWriters) -> bool {
        self.0 & other.0 == other.0
    }
    /// The raw OR of `accel_log_writer` values.
    pub const fn bits(self) -> u32 {
        self.0
    }
    /// The set for a raw OR of `accel_log_writer` values (None when it has another bit).
    pub const fn from_bits(bits: u32) -> Option<LogWriters> {
        if bits & !Self::ALL.0 == 0 {
            Some(LogWriters(bits))
        } else {
            None
        }
    }
}

impl std::ops::BitOr for LogWriters {
    type Output = LogWriters;
    fn bitor(self, rhs: LogWriters) -> LogWriters {
        LogWriters(self.0 | rhs.0)
    }
}

impl std::ops::BitOrAssign for LogWriters {
    fn bitor_assign(&mut self, rhs: LogWriters) {
        self.0 |= rhs.0;
    }
}

impl std::fmt::Debug for LogWriters {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let all = [(LogWriters::JSONL, "JSONL"), (LogWriters::CSV, "CSV"), (LogWriters::TENSORBOARD, "TENSORBOARD")];
        let names: Vec<&str> = all
            .iter()
            .filter(|(w, _)| self.contains(*w))
            .map(|(_, n)| *n)
            .collect();
        if names.is_empty() {
            f.write_str("LogWriters(empty)")
        } else {
            write!(f, "LogWriters({})", names.join(" | "))
        }
    }
}

/// `accel_tracker_options`: where and how [`Context::init_trackers`](crate::Context::init_trackers)
/// opens the trackers (Accelerate's `init_trackers`).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct TrackerOptions {
    /// Required (empty is NULL in C, which `init_trackers` refuses); created where missing.
    pub log_dir: PathBuf,
    /// Empty (the default): the environment's `ACCEL_LOG_WITH`, else `LogWriters::JSONL`.
    pub writers: LogWriters,
    /// true: every process writes, into `LOG_DIR/process-RANK`; false (the default): the main
    /// process alone writes, into `LOG_DIR`, and the others check their arguments and write nothing.
    pub all_processes: bool,
}

impl TrackerOptions {
    /// Trackers in `log_dir`, the other fields at their defaults.
    pub fn new(log_dir: impl Into<PathBuf>) -> TrackerOptions {
        TrackerOptions { log_dir: log_dir.into(), ..TrackerOptions::default() }
    }

    /// The raw struct (version and defaults from `accel_tracker_options_init`) and the C string
    /// its `log_dir` points into (keep it alive; None: an empty `log_dir`, NULL).
    pub fn to_sys(&self) -> Result<(sys::accel_tracker_options, Option<CString>)> {
        let mut o = sys::ACCEL_TRACKER_OPTIONS_INIT;
        check(
            // SAFETY: `o` is a writable struct of this version (the init writes only that version's bytes).
            unsafe { sys::accel_tracker_options_init(&mut o, sys::ACCEL_TRACKER_OPTIONS_VERSION) },
            std::ptr::null(),
        )?;
        let dir = if self.log_dir.as_os_str().is_empty() {
            None
        } else {
            Some(path_cstring(&self.log_dir, "TrackerOptions.log_dir")?)
        };
        o.log_dir = dir.as_ref().map_or(std::ptr::null(), |c| c.as_ptr());
        o.writers = self.writers.bits();
        o.all_processes = self.all_processes as i32;
        Ok((o, dir))
    }
}

/// `accel_inference_options`: how [`Context::inference`](crate::Context::inference) makes an
/// inference copy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct InferenceOptions {
    /// The intra-op threads of the thread that calls [`Inference::run`](crate::Inference::run)
    /// (libtorch counts them per thread: this sets the calling thread's, leaving the trainer's);
    /// in [1, 4096], default 1.
    pub num_threads: i32,
}

impl Default for InferenceOptions {
    /// `ACCEL_INFERENCE_OPTIONS_INIT`
    fn default() -> InferenceOptions {
        InferenceOptions { num_threads: 1 }
    }
}

impl InferenceOptions {
    /// The raw struct: the library's defaults of this version (`accel_inference_options_init`), then every field.
    pub fn to_sys(&self) -> Result<sys::accel_inference_options> {
        let mut o = sys::ACCEL_INFERENCE_OPTIONS_INIT;
        check(
            // SAFETY: `o` is a writable struct of this version (the init writes only that version's bytes).
            unsafe { sys::accel_inference_options_init(&mut o, sys::ACCEL_INFERENCE_OPTIONS_VERSION) },
            std::ptr::null(),
        )?;
        o.num_threads = self.num_threads;
        Ok(o)
    }
}

setters!(Options {
    with_mixed_precision mixed_precision: Precision,
    with_gradient_accumulation_steps gradient_accumulation_steps: i32,
    with_seed seed: u64,
    with_device device: Device,
    with_device_index device_index: i32,
    with_loss_scale_init loss_scale_init: f64,
    with_loss_scale_growth_factor loss_scale_growth_factor: f64,
    with_loss_scale_backoff_factor loss_scale_backoff_factor: f64,
    with_loss_scale_growth_interval loss_scale_growth_interval: i32,
    with_num_threads num_threads: i32,
    with_strategy strategy: Strategy,
    with_bucket_bytes bucket_bytes: i64,
    with_backend backend: Backend,
    with_timeout_seconds timeout_seconds: f64,
});

setters!(MlpOptions {
    with_layer_sizes layer_sizes: &[i64] => |v| v.to_vec(),
    with_activation activation: Activation,
    with_dropout dropout: f64,
    with_bias bias: bool,
});

setters!(LmOptions {
    with_dtype dtype: DType,
    with_gradient_checkpointing gradient_checkpointing: bool,
});

setters!(LoraOptions {
    with_r r: i32,
    with_alpha alpha: f64,
    with_dropout dropout: f64,
    with_target_modules target_modules: Vec<String>,
    with_use_rslora use_rslora: bool,
});

setters!(GenerateOptions {
    with_max_new_tokens max_new_tokens: i64,
    with_temperature temperature: f64,
    with_top_k top_k: i64,
    with_eos_token_id eos_token_id: Option<i64>,
    with_seed seed: u64,
    with_use_cache use_cache: bool,
});

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
});

setters!(LmDataOptions {
    with_block_size block_size: i64,
    with_max_length max_length: i64,
    with_pad_id pad_id: i64,
    with_pad_to_multiple_of pad_to_multiple_of: i64,
    with_group_by_length group_by_length: bool,
});

setters!(SgdOptions {
    with_lr lr: f64,
    with_momentum momentum: f64,
    with_dampening dampening: f64,
    with_weight_decay weight_decay: f64,
    with_nesterov nesterov: bool,
});

setters!(AdamWOptions {
    with_lr lr: f64,
    with_beta1 beta1: f64,
    with_beta2 beta2: f64,
    with_eps eps: f64,
    with_weight_decay weight_decay: f64,
});

setters!(LambOptions {
    with_lr lr: f64,
    with_beta1 beta1: f64,
    with_beta2 beta2: f64,
    with_eps eps: f64,
    with_weight_decay weight_decay: f64,
});

setters!(AdafactorOptions {
    with_lr lr: f64,
    with_eps1 eps1: f64,
    with_eps2 eps2: f64,
    with_clip_threshold clip_threshold: f64,
    with_decay_rate decay_rate: f64,
    with_beta1 beta1: f64,
    with_weight_decay weight_decay: f64,
    with_scale_parameter scale_parameter: bool,
    with_relative_step relative_step: bool,
    with_warmup_init warmup_init: bool,
});

setters!(SchedulerOptions {
    with_kind kind: Schedule,
    with_warmup_steps warmup_steps: i64,
    with_total_steps total_steps: i64,
    with_min_lr_ratio min_lr_ratio: f64,
});

setters!(DataLoaderOptions {
    with_batch_size batch_size: i64,
    with_shuffle shuffle: bool,
    with_seed seed: u64,
    with_drop_last drop_last: bool,
    with_even_batches even_batches: bool,
    with_split_batches split_batches: bool,
    with_iterable iterable: bool,
});

setters!(SimOptions {
    with_device_memory device_memory: Option<&str> => |v| v.map(str::to_string),
    with_topology topology: Option<&str> => |v| v.map(str::to_string),
    with_timeout_seconds timeout_seconds: f64,
    with_faults faults: Option<&str> => |v| v.map(str::to_string),
    with_trace_path trace_path: Option<&Path> => |v| v.map(Path::to_path_buf),
    with_engine_threads engine_threads: i32,
});

setters!(ProjectOptions {
    with_project_dir project_dir: impl Into<PathBuf> => |v| v.into(),
    with_total_limit total_limit: i32,
});

setters!(TrackerOptions {
    with_log_dir log_dir: impl Into<PathBuf> => |v| v.into(),
    with_writers writers: LogWriters,
    with_all_processes all_processes: bool,
});

setters!(InferenceOptions {
    with_num_threads num_threads: i32,
});
