//! The C enums as Rust enums, and [`Attention`].

use crate::sys;

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
    /// `accel_offload`: what lives in host memory instead of the device's
    /// ([`Options::offload`](crate::Options::offload))
    Offload: sys::accel_offload {
    /// everything on the device (the default)
    None = sys::ACCEL_OFFLOAD_NONE,
    /// ZeRO-Offload: the optimizer's state and the fp32 master weights in host memory, each
    /// step on the CPU; the same weights, bit for bit, as without
    Optimizer = sys::ACCEL_OFFLOAD_OPTIMIZER,
    /// ZeRO-3 only: the optimizer's, and each rank's shard of the working weights in host
    /// memory, copied to the device unit by unit for its gathers; the same weights, bit for bit
    Parameters = sys::ACCEL_OFFLOAD_PARAMETERS,
});

impl Default for Offload {
    /// `Offload::None` (`ACCEL_OFFLOAD_NONE`), the C options' default
    fn default() -> Offload {
        Offload::None
    }
}

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

c_enum!(
    /// `accel_side`: where [`EncodeOptions`](crate::EncodeOptions)' truncation drops ids, or where
    /// a batch's padding goes
    Side: sys::accel_side {
    /// the end (the default of both)
    Right = sys::ACCEL_SIDE_RIGHT,
    /// the start (padding: for generation from a batch of prompts)
    Left = sys::ACCEL_SIDE_LEFT,
});

c_enum!(
    /// `accel_special_token`: which special token [`Tokenizer::special_id`](crate::Tokenizer::special_id)
    /// looks up
    SpecialToken: sys::accel_special_token {
    /// beginning of sequence
    Bos = sys::ACCEL_TOKEN_BOS,
    /// end of sequence (generation's stop)
    Eos = sys::ACCEL_TOKEN_EOS,
    /// padding
    Pad = sys::ACCEL_TOKEN_PAD,
    /// unknown
    Unk = sys::ACCEL_TOKEN_UNK,
});

c_enum!(
    /// `accel_chat_format`: the chat template [`Tokenizer::apply_chat`](crate::Tokenizer::apply_chat)
    /// and [`SftOptions::chat_format`](crate::SftOptions::chat_format) render a conversation with.
    /// Each format renders exactly what the family's published template renders (transformers'
    /// `apply_chat_template`); accel does not run Jinja.
    ChatFormat: sys::accel_chat_format {
    /// the tokenizer's `chat_template` (tokenizer_config.json), recognised by its markers (the default)
    Auto = sys::ACCEL_CHAT_AUTO,
    /// `<|im_start|>role\n...<|im_end|>` (Qwen2, Qwen2.5, Qwen3, SmolLM2/3...)
    ChatMl = sys::ACCEL_CHAT_CHATML,
    /// `<|start_header_id|>role<|end_header_id|>\n\n...<|eot_id|>` (Llama 3)
    Llama3 = sys::ACCEL_CHAT_LLAMA3,
    /// `<start_of_turn>user|model\n...<end_of_turn>` (Gemma: no system role, alternating turns)
    Gemma = sys::ACCEL_CHAT_GEMMA,
    /// `<|user|>\n...<|end|>` (Phi-3)
    Phi3 = sys::ACCEL_CHAT_PHI3,
    /// `[INST] ... [/INST]` (Mistral-7B-Instruct, Llama 2 chat: alternating turns)
    Mistral = sys::ACCEL_CHAT_MISTRAL,
});

impl Default for ChatFormat {
    /// `ChatFormat::Auto` (`ACCEL_CHAT_AUTO`), the C options' default
    fn default() -> ChatFormat {
        ChatFormat::Auto
    }
}

c_enum!(
    /// `accel_quantization`: how [`LmOptions::quantization`](crate::LmOptions::quantization)
    /// quantizes a causal LM's block linear weights at load (QLoRA: the frozen base byte for byte
    /// as bitsandbytes quantizes it). Such a model trains through LoRA adapters only: an
    /// optimizer without them is `Status::InvalidState`, and `save_pretrained` refuses it
    /// (`Status::InvalidArgument`; save the adapters).
    Quantization: sys::accel_quantization {
    /// the weights in `LmOptions::dtype` (the default)
    None = sys::ACCEL_QUANT_NONE,
    /// 4-bit NormalFloat, one float32 absmax per 64 values (bitsandbytes' `nf4`)
    Nf4 = sys::ACCEL_QUANT_NF4,
    /// 4-bit float, the same blocks (bitsandbytes' `fp4`)
    Fp4 = sys::ACCEL_QUANT_FP4,
    /// LLM.int8's row-wise int8 (`load_in_8bit`)
    Int8 = sys::ACCEL_QUANT_INT8,
});

impl Default for Quantization {
    /// `Quantization::None` (`ACCEL_QUANT_NONE`), the C options' default
    fn default() -> Quantization {
        Quantization::None
    }
}
