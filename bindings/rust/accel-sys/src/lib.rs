//! The raw C ABI of accel, mirrored BY HAND from `include/accel/accel.h` (version 0.1.0).
//!
//! Every type, struct, enum constant, function and `ACCEL_*_OPTIONS_INIT` default of the
//! header has its counterpart here, `#[repr(C)]`. C enums are `c_int` type aliases with one
//! `pub const` per enumerator (a C function may return a value this version does not know,
//! which a Rust `enum` could not hold). The `accel` crate's `tests/abi_layout.rs` checks every
//! struct's size, alignment and field offsets, every constant and default, and the function
//! list against the table printed by the C program `abi_layout_probe`, built from the real
//! header.
//!
//! Everything here is `unsafe` and follows the header's rules; the safe layer is the `accel`
//! crate, which re-exports this crate as `accel::sys`.
//!
//! Linking: `build.rs` finds `libaccel` (`$ACCEL_LIB_DIR`, else `pkg-config accel`, else the
//! linker's default path) and, as the `links = "accel"` package, exports the directory it
//! found to the build scripts of the packages that depend on this one directly, as
//! `DEP_ACCEL_LIB_DIR`, so that they can set an rpath (see the accel crate's README).
#![allow(non_camel_case_types)]

use std::os::raw::{c_char, c_int, c_void};

// ---- Versions ----------------------------------------------------------------------

pub const ACCEL_VERSION_MAJOR: c_int = 0;
pub const ACCEL_VERSION_MINOR: c_int = 1;
pub const ACCEL_VERSION_PATCH: c_int = 0;
pub const ACCEL_VERSION_NUMBER: c_int =
    ACCEL_VERSION_MAJOR * 10000 + ACCEL_VERSION_MINOR * 100 + ACCEL_VERSION_PATCH;
pub const ACCEL_VERSION_STRING: &str = "0.1.0";

// ---- Status codes ------------------------------------------------------------------

pub type accel_status = c_int;
pub const ACCEL_OK: accel_status = 0;
pub const ACCEL_ERR_INVALID_ARGUMENT: accel_status = -1;
pub const ACCEL_ERR_INVALID_STATE: accel_status = -2;
pub const ACCEL_ERR_OUT_OF_MEMORY: accel_status = -3;
pub const ACCEL_ERR_COMMUNICATION: accel_status = -4;
pub const ACCEL_ERR_TIMEOUT: accel_status = -5;
pub const ACCEL_ERR_IO: accel_status = -6;
pub const ACCEL_ERR_FORMAT: accel_status = -7;
pub const ACCEL_ERR_UNSUPPORTED: accel_status = -8;
pub const ACCEL_ERR_INTERNAL: accel_status = -9;
pub const ACCEL_ERR_NON_FINITE: accel_status = -10;

/// Opaque handles (never constructed in Rust; only pointed to).
#[repr(C)]
pub struct accel_context {
    _private: [u8; 0],
}
#[repr(C)]
pub struct accel_tensor {
    _private: [u8; 0],
}
#[repr(C)]
pub struct accel_model {
    _private: [u8; 0],
}
#[repr(C)]
pub struct accel_optimizer {
    _private: [u8; 0],
}
#[repr(C)]
pub struct accel_scheduler {
    _private: [u8; 0],
}
#[repr(C)]
pub struct accel_dataloader {
    _private: [u8; 0],
}
#[repr(C)]
pub struct accel_sim_report {
    _private: [u8; 0],
}
#[repr(C)]
pub struct accel_inference {
    _private: [u8; 0],
}

// ---- Tensors -----------------------------------------------------------------------

pub type accel_dtype = c_int;
pub const ACCEL_FLOAT32: accel_dtype = 0;
pub const ACCEL_FLOAT16: accel_dtype = 1;
pub const ACCEL_BFLOAT16: accel_dtype = 2;
pub const ACCEL_INT64: accel_dtype = 3;
pub const ACCEL_INT32: accel_dtype = 4;
pub const ACCEL_UINT8: accel_dtype = 5;
pub const ACCEL_FLOAT64: accel_dtype = 6;
pub const ACCEL_INT8: accel_dtype = 7;

// ---- The context -------------------------------------------------------------------

pub type accel_precision = c_int;
pub const ACCEL_PRECISION_NO: accel_precision = 0;
pub const ACCEL_PRECISION_BF16: accel_precision = 1;
pub const ACCEL_PRECISION_FP16: accel_precision = 2;
pub const ACCEL_PRECISION_AUTO: accel_precision = 3;

pub type accel_device = c_int;
pub const ACCEL_DEVICE_AUTO: accel_device = 0;
pub const ACCEL_DEVICE_CPU: accel_device = 1;
pub const ACCEL_DEVICE_CUDA: accel_device = 2;

pub type accel_strategy = c_int;
pub const ACCEL_STRATEGY_NO: accel_strategy = 0;
pub const ACCEL_STRATEGY_DDP: accel_strategy = 1;
pub const ACCEL_STRATEGY_ZERO1: accel_strategy = 2;
pub const ACCEL_STRATEGY_ZERO2: accel_strategy = 3;
pub const ACCEL_STRATEGY_ZERO3: accel_strategy = 4;
pub const ACCEL_STRATEGY_SHARD_GRAD_OP: accel_strategy = ACCEL_STRATEGY_ZERO2;
pub const ACCEL_STRATEGY_FULL_SHARD: accel_strategy = ACCEL_STRATEGY_ZERO3;

pub type accel_backend = c_int;
pub const ACCEL_BACKEND_AUTO: accel_backend = 0;
pub const ACCEL_BACKEND_GLOO: accel_backend = 1;
pub const ACCEL_BACKEND_NCCL: accel_backend = 2;
pub const ACCEL_BACKEND_SIM: accel_backend = 3;

pub const ACCEL_OPTIONS_VERSION: u32 = 3;

#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct accel_options {
    pub version: u32,
    pub mixed_precision: accel_precision,
    pub gradient_accumulation_steps: i32,
    pub seed: u64,
    pub device: accel_device,
    pub device_index: i32,
    pub loss_scale_init: f64,
    pub loss_scale_growth_factor: f64,
    pub loss_scale_backoff_factor: f64,
    pub loss_scale_growth_interval: i32,
    pub num_threads: i32,
    // version 2
    pub strategy: accel_strategy,
    pub bucket_bytes: i64,
    // version 3
    pub backend: accel_backend,
    pub timeout_seconds: f64,
}

/// `ACCEL_OPTIONS_INIT`
pub const ACCEL_OPTIONS_INIT: accel_options = accel_options {
    version: ACCEL_OPTIONS_VERSION,
    mixed_precision: ACCEL_PRECISION_NO,
    gradient_accumulation_steps: 1,
    seed: 0,
    device: ACCEL_DEVICE_AUTO,
    device_index: 0,
    loss_scale_init: 65536.0,
    loss_scale_growth_factor: 2.0,
    loss_scale_backoff_factor: 0.5,
    loss_scale_growth_interval: 2000,
    num_threads: 0,
    strategy: ACCEL_STRATEGY_NO,
    bucket_bytes: 25 * 1024 * 1024,
    backend: ACCEL_BACKEND_AUTO,
    timeout_seconds: 0.0,
};

// ---- Models ------------------------------------------------------------------------

pub type accel_activation = c_int;
pub const ACCEL_ACT_RELU: accel_activation = 0;
pub const ACCEL_ACT_GELU: accel_activation = 1;
pub const ACCEL_ACT_TANH: accel_activation = 2;
pub const ACCEL_ACT_SIGMOID: accel_activation = 3;

pub const ACCEL_MLP_OPTIONS_VERSION: u32 = 1;

#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct accel_mlp_options {
    pub version: u32,
    pub layer_sizes: *const i64,
    pub num_layer_sizes: usize,
    pub activation: accel_activation,
    pub dropout: f64,
    pub bias: i32,
}

/// `ACCEL_MLP_OPTIONS_INIT`
pub const ACCEL_MLP_OPTIONS_INIT: accel_mlp_options = accel_mlp_options {
    version: ACCEL_MLP_OPTIONS_VERSION,
    layer_sizes: std::ptr::null(),
    num_layer_sizes: 0,
    activation: ACCEL_ACT_RELU,
    dropout: 0.0,
    bias: 1,
};

// ---- Optimizers and schedulers -----------------------------------------------------

pub const ACCEL_SGD_OPTIONS_VERSION: u32 = 1;

#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct accel_sgd_options {
    pub version: u32,
    pub lr: f64,
    pub momentum: f64,
    pub dampening: f64,
    pub weight_decay: f64,
    pub nesterov: i32,
}

/// `ACCEL_SGD_OPTIONS_INIT`
pub const ACCEL_SGD_OPTIONS_INIT: accel_sgd_options = accel_sgd_options {
    version: ACCEL_SGD_OPTIONS_VERSION,
    lr: 0.01,
    momentum: 0.0,
    dampening: 0.0,
    weight_decay: 0.0,
    nesterov: 0,
};

pub const ACCEL_ADAMW_OPTIONS_VERSION: u32 = 1;

#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct accel_adamw_options {
    pub version: u32,
    pub lr: f64,
    pub beta1: f64,
    pub beta2: f64,
    pub eps: f64,
    pub weight_decay: f64,
}

/// `ACCEL_ADAMW_OPTIONS_INIT`
pub const ACCEL_ADAMW_OPTIONS_INIT: accel_adamw_options = accel_adamw_options {
    version: ACCEL_ADAMW_OPTIONS_VERSION,
    lr: 1e-3,
    beta1: 0.9,
    beta2: 0.999,
    eps: 1e-8,
    weight_decay: 0.01,
};

pub const ACCEL_LAMB_OPTIONS_VERSION: u32 = 1;

#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct accel_lamb_options {
    pub version: u32,
    pub lr: f64,
    pub beta1: f64,
    pub beta2: f64,
    pub eps: f64,
    pub weight_decay: f64,
}

/// `ACCEL_LAMB_OPTIONS_INIT`
pub const ACCEL_LAMB_OPTIONS_INIT: accel_lamb_options = accel_lamb_options {
    version: ACCEL_LAMB_OPTIONS_VERSION,
    lr: 1e-3,
    beta1: 0.9,
    beta2: 0.999,
    eps: 1e-6,
    weight_decay: 0.01,
};

pub type accel_schedule = c_int;
pub const ACCEL_SCHEDULE_CONSTANT: accel_schedule = 0;
pub const ACCEL_SCHEDULE_LINEAR: accel_schedule = 1;
pub const ACCEL_SCHEDULE_COSINE: accel_schedule = 2;

pub const ACCEL_SCHEDULER_OPTIONS_VERSION: u32 = 1;

#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct accel_scheduler_options {
    pub version: u32,
    pub kind: accel_schedule,
    pub warmup_steps: i64,
    pub total_steps: i64,
    pub min_lr_ratio: f64,
}

/// `ACCEL_SCHEDULER_OPTIONS_INIT`
pub const ACCEL_SCHEDULER_OPTIONS_INIT: accel_scheduler_options = accel_scheduler_options {
    version: ACCEL_SCHEDULER_OPTIONS_VERSION,
    kind: ACCEL_SCHEDULE_CONSTANT,
    warmup_steps: 0,
    total_steps: 0,
    min_lr_ratio: 0.0,
};

// ---- Data loading ------------------------------------------------------------------

pub const ACCEL_DATALOADER_OPTIONS_VERSION: u32 = 3;

#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct accel_dataloader_options {
    pub version: u32,
    pub batch_size: i64,
    pub shuffle: i32,
    pub seed: u64,
    pub drop_last: i32,
    // version 2
    pub even_batches: i32,
    pub split_batches: i32,
    // version 3
    pub iterable: i32,
}

/// `ACCEL_DATALOADER_OPTIONS_INIT`
pub const ACCEL_DATALOADER_OPTIONS_INIT: accel_dataloader_options = accel_dataloader_options {
    version: ACCEL_DATALOADER_OPTIONS_VERSION,
    batch_size: 1,
    shuffle: 0,
    seed: 0,
    drop_last: 0,
    even_batches: 1,
    split_batches: 0,
    iterable: 0,
};

// ---- Training ----------------------------------------------------------------------

#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct accel_step_result {
    pub stepped: i32,
    pub skipped: i32,
    pub sync_step: i32,
    pub loss_scale: f64,
    pub optimizer_steps: i64,
    pub micro_steps: i64,
}

// ---- Processes ---------------------------------------------------------------------

pub type accel_reduce_op = c_int;
pub const ACCEL_REDUCE_SUM: accel_reduce_op = 0;
pub const ACCEL_REDUCE_MEAN: accel_reduce_op = 1;
pub const ACCEL_REDUCE_MAX: accel_reduce_op = 2;
pub const ACCEL_REDUCE_MIN: accel_reduce_op = 3;
pub const ACCEL_REDUCE_PROD: accel_reduce_op = 4;

// ---- The simulator -----------------------------------------------------------------

pub const ACCEL_SIM_OPTIONS_VERSION: u32 = 1;

#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct accel_sim_options {
    pub version: u32,
    pub world_size: i32,
    pub device_memory: *const c_char,
    pub topology: *const c_char,
    pub timeout_seconds: f64,
    pub faults: *const c_char,
    pub trace_path: *const c_char,
    pub engine_threads: i32,
}

/// The default topology of `ACCEL_SIM_OPTIONS_INIT`, NUL-terminated.
pub const ACCEL_SIM_DEFAULT_TOPOLOGY: &[u8] = b"8xH100\0";

/// `ACCEL_SIM_OPTIONS_INIT` (`topology` points at the static [`ACCEL_SIM_DEFAULT_TOPOLOGY`]).
pub const ACCEL_SIM_OPTIONS_INIT: accel_sim_options = accel_sim_options {
    version: ACCEL_SIM_OPTIONS_VERSION,
    world_size: 2,
    device_memory: std::ptr::null(),
    topology: ACCEL_SIM_DEFAULT_TOPOLOGY.as_ptr() as *const c_char,
    timeout_seconds: 60.0,
    faults: std::ptr::null(),
    trace_path: std::ptr::null(),
    engine_threads: 0,
};

/// `accel_rank_fn`: a rank's function (the header's typedef is a non-NULL function pointer;
/// `Option` gives it C's nullable representation).
pub type accel_rank_fn =
    Option<unsafe extern "C" fn(ctx: *mut accel_context, user: *mut c_void) -> accel_status>;

// ---- Checkpoints -------------------------------------------------------------------

pub const ACCEL_PROJECT_OPTIONS_VERSION: u32 = 1;

#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct accel_project_options {
    pub version: u32,
    pub project_dir: *const c_char,
    pub total_limit: i32,
}

/// `ACCEL_PROJECT_OPTIONS_INIT`
pub const ACCEL_PROJECT_OPTIONS_INIT: accel_project_options = accel_project_options {
    version: ACCEL_PROJECT_OPTIONS_VERSION,
    project_dir: std::ptr::null(),
    total_limit: 0,
};

// ---- Language models -----------------------------------------------------------------

pub const ACCEL_LM_OPTIONS_VERSION: u32 = 1;

#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct accel_lm_options {
    pub version: u32,
    pub dtype: accel_dtype,
    pub gradient_checkpointing: i32,
}

/// `ACCEL_LM_OPTIONS_INIT`
pub const ACCEL_LM_OPTIONS_INIT: accel_lm_options =
    accel_lm_options { version: ACCEL_LM_OPTIONS_VERSION, dtype: ACCEL_FLOAT32, gradient_checkpointing: 0 };

pub const ACCEL_LM_DATA_OPTIONS_VERSION: u32 = 1;

#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct accel_lm_data_options {
    pub version: u32,
    pub block_size: i64,
    pub max_length: i64,
    pub pad_id: i64,
    pub pad_to_multiple_of: i64,
    pub group_by_length: i32,
}

/// `ACCEL_LM_DATA_OPTIONS_INIT`
pub const ACCEL_LM_DATA_OPTIONS_INIT: accel_lm_data_options = accel_lm_data_options {
    version: ACCEL_LM_DATA_OPTIONS_VERSION,
    block_size: 0,
    max_length: 0,
    pad_id: 0,
    pad_to_multiple_of: 0,
    group_by_length: 0,
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

// ---- Memory estimates ----------------------------------------------------------------

pub type accel_optimizer_kind = c_int;
pub const ACCEL_OPTIMIZER_SGD: accel_optimizer_kind = 0;
pub const ACCEL_OPTIMIZER_SGD_MOMENTUM: accel_optimizer_kind = 1;
pub const ACCEL_OPTIMIZER_ADAMW: accel_optimizer_kind = 2;
pub const ACCEL_OPTIMIZER_ADAFACTOR: accel_optimizer_kind = 3;
pub const ACCEL_OPTIMIZER_LAMB: accel_optimizer_kind = 4;

pub const ACCEL_MEMORY_ESTIMATE_OPTIONS_VERSION: u32 = 1;

#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct accel_memory_estimate_options {
    pub version: u32,
    pub mixed_precision: accel_precision,
    pub weights_dtype: accel_dtype,
    pub optimizer: accel_optimizer_kind,
    pub strategy: accel_strategy,
    pub world_size: i32,
    pub micro_batch: i64,
    pub seq_len: i64,
    pub gradient_checkpointing: i32,
    pub lora_rank: i32,
    pub lora_target_modules: *const c_char,
    pub attention: i32,
}

/// `ACCEL_MEMORY_ESTIMATE_OPTIONS_INIT`
pub const ACCEL_MEMORY_ESTIMATE_OPTIONS_INIT: accel_memory_estimate_options = accel_memory_estimate_options {
    version: ACCEL_MEMORY_ESTIMATE_OPTIONS_VERSION,
    mixed_precision: ACCEL_PRECISION_NO,
    weights_dtype: ACCEL_FLOAT32,
    optimizer: ACCEL_OPTIMIZER_ADAMW,
    strategy: ACCEL_STRATEGY_NO,
    world_size: 1,
    micro_batch: 1,
    seq_len: 0,
    gradient_checkpointing: 0,
    lora_rank: 0,
    lora_target_modules: std::ptr::null(),
    attention: 0,
};

pub const ACCEL_MEMORY_ESTIMATE_VERSION: u32 = 1;

/// An estimate in bytes per GPU; the caller sets `version` (`ACCEL_MEMORY_ESTIMATE_VERSION`).
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct accel_memory_estimate {
    pub version: u32,
    pub parameters: i64,
    pub trainable_parameters: i64,
    pub seq_len: i64,
    pub attention: i32,
    pub weights: u64,
    pub gradients: u64,
    pub optimizer_state: u64,
    pub activations: u64,
    pub temporaries: u64,
    pub total: u64,
}

// ---- Trackers ------------------------------------------------------------------------

pub type accel_log_writer = c_int;
pub const ACCEL_LOG_JSONL: accel_log_writer = 1;
pub const ACCEL_LOG_CSV: accel_log_writer = 2;
pub const ACCEL_LOG_TENSORBOARD: accel_log_writer = 4;

pub const ACCEL_TRACKER_OPTIONS_VERSION: u32 = 1;

/// `writers` is an OR of `accel_log_writer` values (as `u32`); 0: the environment's
/// `ACCEL_LOG_WITH`, else `ACCEL_LOG_JSONL`.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct accel_tracker_options {
    pub version: u32,
    pub log_dir: *const c_char,
    pub writers: u32,
    pub all_processes: i32,
}

/// `ACCEL_TRACKER_OPTIONS_INIT`
pub const ACCEL_TRACKER_OPTIONS_INIT: accel_tracker_options = accel_tracker_options {
    version: ACCEL_TRACKER_OPTIONS_VERSION,
    log_dir: std::ptr::null(),
    writers: 0,
    all_processes: 0,
};

// ---- Real time: inference beside training ----------------------------------------------

pub const ACCEL_INFERENCE_OPTIONS_VERSION: u32 = 1;

/// `num_threads`: the intra-op threads of the thread that calls `accel_inference_run`, in
/// [1, 4096].
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct accel_inference_options {
    pub version: u32,
    pub num_threads: i32,
}

/// `ACCEL_INFERENCE_OPTIONS_INIT`
pub const ACCEL_INFERENCE_OPTIONS_INIT: accel_inference_options =
    accel_inference_options { version: ACCEL_INFERENCE_OPTIONS_VERSION, num_threads: 1 };

pub type accel_loss = c_int;
pub const ACCEL_LOSS_MSE: accel_loss = 0;
pub const ACCEL_LOSS_CROSS_ENTROPY: accel_loss = 1;
pub const ACCEL_LOSS_CAUSAL_LM: accel_loss = 2;

pub const ACCEL_TRAIN_RESULT_VERSION: u32 = 1;

/// What `accel_train_micro_batches` did; the caller sets `version` (`ACCEL_TRAIN_RESULT_VERSION`).
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct accel_train_result {
    pub version: u32,
    pub micro_batches: i32,
    pub optimizer_steps: i32,
    pub skipped_steps: i32,
    pub epoch_ended: i32,
    pub mean_loss: f64,
    pub seconds: f64,
}

// ---- Functions (112, in the header's order) -----------------------------------------
// The library is linked by build.rs (cargo:rustc-link-lib=dylib=accel), for this crate and
// every crate that depends on it.

extern "C" {
    pub fn accel_version_number() -> c_int;
    pub fn accel_version_string() -> *const c_char;

    pub fn accel_status_name(status: accel_status) -> *const c_char;
    pub fn accel_last_error(ctx: *const accel_context) -> *const c_char;

    pub fn accel_dtype_size(dtype: accel_dtype) -> usize;
    pub fn accel_tensor_create(
        dtype: accel_dtype,
        shape: *const i64,
        ndim: usize,
        data: *const c_void,
        out: *mut *mut accel_tensor,
    ) -> accel_status;
    pub fn accel_tensor_destroy(tensor: *mut accel_tensor);
    pub fn accel_tensor_copy_to_host(tensor: *const accel_tensor, dst: *mut c_void, dst_bytes: usize) -> accel_status;
    pub fn accel_tensor_copy_to_host_as(
        tensor: *const accel_tensor,
        dtype: accel_dtype,
        dst: *mut c_void,
        dst_bytes: usize,
    ) -> accel_status;
    pub fn accel_tensor_item(tensor: *const accel_tensor, out: *mut f64) -> accel_status;
    pub fn accel_tensor_dtype(tensor: *const accel_tensor, out: *mut accel_dtype) -> accel_status;
    pub fn accel_tensor_ndim(tensor: *const accel_tensor, out: *mut usize) -> accel_status;
    pub fn accel_tensor_shape(tensor: *const accel_tensor, out: *mut i64, capacity: usize) -> accel_status;
    pub fn accel_tensor_numel(tensor: *const accel_tensor, out: *mut i64) -> accel_status;
    pub fn accel_tensor_nbytes(tensor: *const accel_tensor, out: *mut usize) -> accel_status;

    pub fn accel_options_init(opts: *mut accel_options, version: u32) -> accel_status;
    pub fn accel_init(opts: *const accel_options, out: *mut *mut accel_context) -> accel_status;
    pub fn accel_destroy(ctx: *mut accel_context);
    pub fn accel_device_kind(ctx: *const accel_context, out: *mut accel_device) -> accel_status;
    pub fn accel_mixed_precision(ctx: *const accel_context, out: *mut accel_precision) -> accel_status;

    pub fn accel_mlp_options_init(opts: *mut accel_mlp_options, version: u32) -> accel_status;
    pub fn accel_model_create_mlp(
        ctx: *mut accel_context,
        opts: *const accel_mlp_options,
        out: *mut *mut accel_model,
    ) -> accel_status;
    pub fn accel_model_load_torchscript(
        ctx: *mut accel_context,
        path: *const c_char,
        out: *mut *mut accel_model,
    ) -> accel_status;
    pub fn accel_model_destroy(model: *mut accel_model);
    pub fn accel_model_forward(
        ctx: *mut accel_context,
        model: *mut accel_model,
        inputs: *const *mut accel_tensor,
        num_inputs: usize,
        out: *mut *mut accel_tensor,
    ) -> accel_status;
    pub fn accel_model_set_training(ctx: *mut accel_context, model: *mut accel_model, training: c_int) -> accel_status;
    pub fn accel_model_num_parameters(
        model: *const accel_model,
        out_tensors: *mut usize,
        out_elements: *mut i64,
    ) -> accel_status;
    pub fn accel_model_parameter_name(model: *const accel_model, index: usize, out: *mut *const c_char) -> accel_status;
    pub fn accel_model_parameter(
        ctx: *mut accel_context,
        model: *const accel_model,
        index: usize,
        out: *mut *mut accel_tensor,
    ) -> accel_status;
    pub fn accel_save_model(ctx: *mut accel_context, model: *const accel_model, path: *const c_char) -> accel_status;

    pub fn accel_loss_cross_entropy(
        ctx: *mut accel_context,
        logits: *const accel_tensor,
        targets: *const accel_tensor,
        out: *mut *mut accel_tensor,
    ) -> accel_status;
    pub fn accel_loss_mse(
        ctx: *mut accel_context,
        input: *const accel_tensor,
        target: *const accel_tensor,
        out: *mut *mut accel_tensor,
    ) -> accel_status;

    pub fn accel_sgd_options_init(opts: *mut accel_sgd_options, version: u32) -> accel_status;
    pub fn accel_adamw_options_init(opts: *mut accel_adamw_options, version: u32) -> accel_status;
    pub fn accel_optimizer_create_sgd(
        ctx: *mut accel_context,
        model: *mut accel_model,
        opts: *const accel_sgd_options,
        out: *mut *mut accel_optimizer,
    ) -> accel_status;
    pub fn accel_optimizer_create_adamw(
        ctx: *mut accel_context,
        model: *mut accel_model,
        opts: *const accel_adamw_options,
        out: *mut *mut accel_optimizer,
    ) -> accel_status;
    pub fn accel_lamb_options_init(opts: *mut accel_lamb_options, version: u32) -> accel_status;
    pub fn accel_optimizer_create_lamb(
        ctx: *mut accel_context,
        model: *mut accel_model,
        opts: *const accel_lamb_options,
        out: *mut *mut accel_optimizer,
    ) -> accel_status;
    pub fn accel_optimizer_destroy(optimizer: *mut accel_optimizer);
    pub fn accel_optimizer_lr(optimizer: *const accel_optimizer, out: *mut f64) -> accel_status;

    pub fn accel_scheduler_options_init(opts: *mut accel_scheduler_options, version: u32) -> accel_status;
    pub fn accel_scheduler_create(
        ctx: *mut accel_context,
        optimizer: *mut accel_optimizer,
        opts: *const accel_scheduler_options,
        out: *mut *mut accel_scheduler,
    ) -> accel_status;
    pub fn accel_scheduler_destroy(scheduler: *mut accel_scheduler);
    pub fn accel_scheduler_steps(scheduler: *const accel_scheduler, out: *mut i64) -> accel_status;

    pub fn accel_dataloader_options_init(opts: *mut accel_dataloader_options, version: u32) -> accel_status;
    pub fn accel_dataloader_create(
        ctx: *mut accel_context,
        inputs: *const accel_tensor,
        targets: *const accel_tensor,
        opts: *const accel_dataloader_options,
        out: *mut *mut accel_dataloader,
    ) -> accel_status;
    pub fn accel_dataloader_destroy(loader: *mut accel_dataloader);
    pub fn accel_dataloader_next(
        ctx: *mut accel_context,
        loader: *mut accel_dataloader,
        out_inputs: *mut *mut accel_tensor,
        out_targets: *mut *mut accel_tensor,
    ) -> accel_status;
    pub fn accel_dataloader_epoch(loader: *const accel_dataloader, out: *mut i64) -> accel_status;
    pub fn accel_dataloader_num_batches(loader: *const accel_dataloader, out: *mut i64) -> accel_status;
    pub fn accel_dataloader_set_epoch(loader: *mut accel_dataloader, epoch: i64) -> accel_status;

    pub fn accel_prepare(
        ctx: *mut accel_context,
        model: *mut accel_model,
        optimizer: *mut accel_optimizer,
        scheduler: *mut accel_scheduler,
        loader: *mut accel_dataloader,
    ) -> accel_status;
    pub fn accel_backward(ctx: *mut accel_context, loss: *const accel_tensor) -> accel_status;
    pub fn accel_sync_gradients(ctx: *const accel_context, out: *mut c_int) -> accel_status;
    pub fn accel_clip_grad_norm(ctx: *mut accel_context, max_norm: f64, out: *mut f64) -> accel_status;
    pub fn accel_step(ctx: *mut accel_context, out: *mut accel_step_result) -> accel_status;
    pub fn accel_loss_scale(ctx: *const accel_context, out: *mut f64) -> accel_status;

    pub fn accel_process_index(ctx: *const accel_context, out: *mut i32) -> accel_status;
    pub fn accel_num_processes(ctx: *const accel_context, out: *mut i32) -> accel_status;
    pub fn accel_barrier(ctx: *mut accel_context) -> accel_status;
    pub fn accel_reduce(
        ctx: *mut accel_context,
        tensor: *const accel_tensor,
        op: accel_reduce_op,
        out: *mut *mut accel_tensor,
    ) -> accel_status;
    pub fn accel_local_process_index(ctx: *const accel_context, out: *mut i32) -> accel_status;
    pub fn accel_is_main_process(ctx: *const accel_context, out: *mut c_int) -> accel_status;
    pub fn accel_is_local_main_process(ctx: *const accel_context, out: *mut c_int) -> accel_status;
    pub fn accel_broadcast(
        ctx: *mut accel_context,
        tensor: *const accel_tensor,
        root: i32,
        out: *mut *mut accel_tensor,
    ) -> accel_status;
    pub fn accel_gather(ctx: *mut accel_context, tensor: *const accel_tensor, out: *mut *mut accel_tensor) -> accel_status;
    pub fn accel_gather_for_metrics(
        ctx: *mut accel_context,
        tensor: *const accel_tensor,
        out: *mut *mut accel_tensor,
    ) -> accel_status;
    pub fn accel_pad_across_processes(
        ctx: *mut accel_context,
        tensor: *const accel_tensor,
        dim: i32,
        pad_value: f64,
        pad_first: c_int,
        out: *mut *mut accel_tensor,
    ) -> accel_status;
    pub fn accel_print(ctx: *mut accel_context, message: *const c_char) -> accel_status;
    pub fn accel_set_seed(ctx: *mut accel_context, seed: u64, per_process: c_int) -> accel_status;

    pub fn accel_sim_options_init(opts: *mut accel_sim_options, version: u32) -> accel_status;
    pub fn accel_sim_run(
        sim: *const accel_sim_options,
        ctx_opts: *const accel_options,
        fn_: accel_rank_fn,
        user: *mut c_void,
        out: *mut *mut accel_sim_report,
    ) -> accel_status;
    pub fn accel_sim_report_destroy(report: *mut accel_sim_report);
    pub fn accel_sim_report_world_size(report: *const accel_sim_report, out: *mut i32) -> accel_status;
    pub fn accel_sim_report_rank(
        report: *const accel_sim_report,
        rank: i32,
        out_status: *mut accel_status,
        out_error: *mut *const c_char,
        out_peak_bytes: *mut u64,
    ) -> accel_status;
    pub fn accel_sim_report_predicted_seconds(report: *const accel_sim_report, out: *mut f64) -> accel_status;
    pub fn accel_sim_charge_compute(ctx: *mut accel_context, seconds: f64, label: *const c_char) -> accel_status;

    pub fn accel_project_options_init(opts: *mut accel_project_options, version: u32) -> accel_status;
    pub fn accel_set_project(ctx: *mut accel_context, opts: *const accel_project_options) -> accel_status;
    pub fn accel_save_state(ctx: *mut accel_context, dir: *const c_char) -> accel_status;
    pub fn accel_load_state(ctx: *mut accel_context, dir: *const c_char) -> accel_status;
    pub fn accel_last_checkpoint(ctx: *const accel_context, out: *mut *const c_char) -> accel_status;

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
    pub fn accel_memory_estimate_options_init(opts: *mut accel_memory_estimate_options, version: u32) -> accel_status;
    pub fn accel_estimate_memory(
        model: *const c_char,
        opts: *const accel_memory_estimate_options,
        out: *mut accel_memory_estimate,
    ) -> accel_status;

    pub fn accel_tracker_options_init(opts: *mut accel_tracker_options, version: u32) -> accel_status;
    pub fn accel_init_trackers(ctx: *mut accel_context, opts: *const accel_tracker_options) -> accel_status;
    pub fn accel_log(
        ctx: *mut accel_context,
        step: i64,
        names: *const *const c_char,
        values: *const f64,
        count: i32,
    ) -> accel_status;
    pub fn accel_end_training(ctx: *mut accel_context) -> accel_status;

    pub fn accel_inference_options_init(opts: *mut accel_inference_options, version: u32) -> accel_status;
    pub fn accel_inference_create(
        ctx: *mut accel_context,
        model: *const accel_model,
        opts: *const accel_inference_options,
        out: *mut *mut accel_inference,
    ) -> accel_status;
    pub fn accel_inference_destroy(inference: *mut accel_inference);
    pub fn accel_publish_weights(ctx: *mut accel_context, model: *const accel_model, out: *mut u64) -> accel_status;
    pub fn accel_inference_run(
        inference: *mut accel_inference,
        inputs: *const *mut accel_tensor,
        num_inputs: usize,
        out: *mut *mut accel_tensor,
    ) -> accel_status;
    pub fn accel_inference_weights(
        inference: *const accel_inference,
        out_version: *mut u64,
        out_age_seconds: *mut f64,
    ) -> accel_status;
    pub fn accel_train_micro_batches(
        ctx: *mut accel_context,
        model: *mut accel_model,
        loader: *mut accel_dataloader,
        loss: accel_loss,
        max_micro_batches: i32,
        max_seconds: f64,
        out: *mut accel_train_result,
    ) -> accel_status;
}
