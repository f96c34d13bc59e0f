package accel

/*
#include "shim.h"

static void ag_memory_estimate_options_init(accel_memory_estimate_options *o) {
    if (accel_memory_estimate_options_init(o, ACCEL_MEMORY_ESTIMATE_OPTIONS_VERSION) != ACCEL_OK) { accel_memory_estimate_options d = ACCEL_MEMORY_ESTIMATE_OPTIONS_INIT; *o = d; }
}
static ag_res ag_estimate_memory(const char *m, const accel_memory_estimate_options *o, accel_memory_estimate *out) { return ag_fail(accel_estimate_memory(m, o, out)); }
*/
import "C"

import (
	"strings"
	"unsafe"
)

// ---- memory estimates ----

// OptimizerKind is accel_optimizer_kind: the optimizer EstimateMemory assumes.
type OptimizerKind int32

const (
	OptimizerSGD         OptimizerKind = C.ACCEL_OPTIMIZER_SGD          // no state
	OptimizerSGDMomentum OptimizerKind = C.ACCEL_OPTIMIZER_SGD_MOMENTUM // one buffer per parameter
	OptimizerAdamW       OptimizerKind = C.ACCEL_OPTIMIZER_ADAMW        // two moments per parameter
	OptimizerAdafactor   OptimizerKind = C.ACCEL_OPTIMIZER_ADAFACTOR    // factored second moments (the factors whole on every GPU under ZeRO)
	OptimizerLAMB        OptimizerKind = C.ACCEL_OPTIMIZER_LAMB         // two moments per parameter (not under ZeRO)
)

// Attention is the attention kernel EstimateMemory assumes
// (accel_memory_estimate_options.attention, a plain int32_t in C).
type Attention int32

const (
	AttentionAuto  Attention = 0 // this build's: fused with libtorch >= 2.1, else eager
	AttentionEager Attention = 1 // the T x T probabilities are saved for backward
	AttentionFused Attention = 2 // a GPU's flash or memory-efficient attention
)

// MemoryEstimateOptions is accel_memory_estimate_options: what EstimateMemory assumes of the
// training run. Start from DefaultMemoryEstimateOptions(): the zero value is not the
// defaults (a zero WorldSize or MicroBatch is refused).
type MemoryEstimateOptions struct {
	MixedPrecision        Precision     // autocast with fp32 master weights
	WeightsDType          DType         // Float32, or BFloat16 (no autocast)
	Optimizer             OptimizerKind // default OptimizerAdamW
	Strategy              Strategy      // needed when WorldSize > 1
	WorldSize             int32         // processes (GPUs), >= 1
	MicroBatch            int64         // sequences per micro-batch and GPU, >= 1
	SeqLen                int64         // tokens per sequence; 0: min(1024, max_position_embeddings)
	GradientCheckpointing bool
	LoRARank              int32    // > 0: LoRA adapters of this rank, the base frozen; 0: full fine-tuning
	LoRATargetModules     []string // e.g. {"q_proj", "v_proj"} or {"all-linear"}; nil: PEFT's default for the family
	Attention             Attention
	Offload               Offload      // OffloadOptimizer: the optimizer's state and ZeRO's master in host memory
	Quantization          Quantization // the LoRA base's linear weights (NF4, FP4, int8); needs LoRARank > 0
	DoubleQuant           bool         // NF4's or FP4's absmax quantized again
}

// DefaultMemoryEstimateOptions returns the library's defaults (fp32 AdamW on one process,
// micro-batch 1).
func DefaultMemoryEstimateOptions() MemoryEstimateOptions {
	var c C.accel_memory_estimate_options
	C.ag_memory_estimate_options_init(&c)
	return MemoryEstimateOptions{MixedPrecision: Precision(c.mixed_precision), WeightsDType: DType(c.weights_dtype),
		Optimizer: OptimizerKind(c.optimizer), Strategy: Strategy(c.strategy), WorldSize: int32(c.world_size),
		MicroBatch: int64(c.micro_batch), SeqLen: int64(c.seq_len), GradientCheckpointing: c.gradient_checkpointing != 0,
		LoRARank: int32(c.lora_rank), Attention: Attention(c.attention), Offload: Offload(c.offload),
		Quantization: Quantization(c.quantization), DoubleQuant: c.double_quant != 0}
}

// toC fills a C struct; the LoRA targets are copied to C memory, which s holds until free.
func (o *MemoryEstimateOptions) toC(s *cstrs) C.accel_memory_estimate_options {
	var c C.accel_memory_estimate_options
	C.ag_memory_estimate_options_init(&c)
	c.mixed_precision = C.accel_precision(o.MixedPrecision)
	c.weights_dtype = C.accel_dtype(o.WeightsDType)
	c.optimizer = C.accel_optimizer_kind(o.Optimizer)
	c.strategy = C.accel_strategy(o.Strategy)
	c.world_size = C.int32_t(o.WorldSize)
	c.micro_batch = C.int64_t(o.MicroBatch)
	c.seq_len = C.int64_t(o.SeqLen)
	c.gradient_checkpointing = cbool(o.GradientCheckpointing)
	c.lora_rank = C.int32_t(o.LoRARank)
	c.lora_target_modules = s.str("accel_estimate_memory", "LoRATargetModules", strings.Join(o.LoRATargetModules, ","))
	c.attention = C.int32_t(o.Attention)
	c.offload = C.accel_offload(o.Offload)
	c.quantization = C.accel_quantization(o.Quantization)
	c.double_quant = cbool(o.DoubleQuant)
	return c
}

// MemoryEstimate is accel_memory_estimate: the bytes per GPU of a training step.
type MemoryEstimate struct {
	Parameters          int64     // the model's parameters
	TrainableParameters int64     // those trained (the adapters under LoRA)
	SeqLen              int64     // the sequence length used
	Attention           Attention // the attention kernel assumed: AttentionEager or AttentionFused
	Weights             uint64    // working weights, ZeRO's master shards, a LoRA base
	Gradients           uint64    // the gradients the strategy holds at the step
	OptimizerState      uint64    // the optimizer's state on this GPU
	Activations         uint64    // saved for backward at the end of the forward
	Temporaries         uint64    // the rest of the peak (the logits' gradient, a recomputed block, ...)
	Total               uint64    // the peak of a training step (device memory)
	Host                uint64    // the peak of host memory (offload: state, master, the step's copies)
	TransferBytes       uint64    // bytes between device and host per optimizer step (offload)
	// of TransferBytes, the gradients' copies to the host, beside the backward
	GradientTransferBytes uint64
}

// EstimateMemory estimates the memory per GPU of training model (accel_estimate_memory; no
// Context needed): a named shape ("gpt2", "gpt2-medium", "gpt2-large", "gpt2-xl",
// "llama-7b", "llama-13b", "llama-70b", "tiny-llama"), a Hugging Face config.json, or a
// directory holding one. opts nil: the defaults. Errors match ErrIO for a model that is
// neither a named shape nor a readable config, ErrInvalidArgument for a bad option (a
// WorldSize > 1 without a strategy, ...), ErrUnsupported for what Prepare refuses (LAMB under
// ZeRO, ...).
func EstimateMemory(model string, opts *MemoryEstimateOptions) (MemoryEstimate, error) {
	const op = "accel_estimate_memory"
	if err := libCheck(); err != nil {
		return MemoryEstimate{}, err
	}
	if strings.IndexByte(model, 0) >= 0 {
		return MemoryEstimate{}, errArg(op, "model contains a NUL byte: %q", model)
	}
	var s cstrs
	defer s.free()
	var c C.accel_memory_estimate_options
	if opts == nil {
		C.ag_memory_estimate_options_init(&c)
	} else {
		c = opts.toC(&s)
		if s.err != nil {
			return MemoryEstimate{}, s.err
		}
	}
	cm := C.CString(model)
	defer C.free(unsafe.Pointer(cm))
	out := C.accel_memory_estimate{version: C.ACCEL_MEMORY_ESTIMATE_VERSION} // the fields of this version
	if err := resErr(op, C.ag_estimate_memory(cm, &c, &out)); err != nil {
		return MemoryEstimate{}, err
	}
	return MemoryEstimate{Parameters: int64(out.parameters), TrainableParameters: int64(out.trainable_parameters),
		SeqLen: int64(out.seq_len), Attention: Attention(out.attention), Weights: uint64(out.weights),
		Gradients: uint64(out.gradients), OptimizerState: uint64(out.optimizer_state),
		Activations: uint64(out.activations), Temporaries: uint64(out.temporaries), Total: uint64(out.total),
		Host: uint64(out.host), TransferBytes: uint64(out.transfer_bytes),
		GradientTransferBytes: uint64(out.gradient_transfer_bytes)}, nil
}
