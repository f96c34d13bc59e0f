package accel

/*
#include "shim.h"

static void ag_lm_options_init(accel_lm_options *o) {
    if (accel_lm_options_init(o, ACCEL_LM_OPTIONS_VERSION) != ACCEL_OK) { accel_lm_options d = ACCEL_LM_OPTIONS_INIT; *o = d; }
}
static void ag_generate_options_init(accel_generate_options *o) {
    if (accel_generate_options_init(o, ACCEL_GENERATE_OPTIONS_VERSION) != ACCEL_OK) { accel_generate_options d = ACCEL_GENERATE_OPTIONS_INIT; *o = d; }
}
static void ag_adafactor_options_init(accel_adafactor_options *o) {
    if (accel_adafactor_options_init(o, ACCEL_ADAFACTOR_OPTIONS_VERSION) != ACCEL_OK) { accel_adafactor_options d = ACCEL_ADAFACTOR_OPTIONS_INIT; *o = d; }
}
static void ag_lora_options_init(accel_lora_options *o) {
    if (accel_lora_options_init(o, ACCEL_LORA_OPTIONS_VERSION) != ACCEL_OK) { accel_lora_options d = ACCEL_LORA_OPTIONS_INIT; *o = d; }
}
static void ag_lm_data_options_init(accel_lm_data_options *o) {
    if (accel_lm_data_options_init(o, ACCEL_LM_DATA_OPTIONS_VERSION) != ACCEL_OK) { accel_lm_data_options d = ACCEL_LM_DATA_OPTIONS_INIT; *o = d; }
}
static ag_res ag_token_file_write(const char *p, const accel_tensor *t, int32_t w) { return ag_fail(accel_token_file_write(p, t, w)); }
static ag_res ag_token_file_read(const char *p, accel_tensor **out) { return ag_fail(accel_token_file_read(p, out)); }
*/
import "C"

import (
	"strings"
	"unsafe"
)

// ---- language models (GPT-2, Llama in Hugging Face's formats) ----

// Quantization is accel_quantization: how LoadPretrained and NewLM quantize the linear
// weights of a causal LM's transformer blocks at load (QLoRA: the frozen base byte for byte as
// bitsandbytes quantizes it). Such a model trains through LoRA adapters only (an optimizer
// without them fails with ErrInvalidState) and SavePretrained refuses it (ErrInvalidArgument;
// save the adapters).
type Quantization int32

const (
	QuantNone Quantization = C.ACCEL_QUANT_NONE // the weights in LMOptions.DType (the default)
	QuantNF4  Quantization = C.ACCEL_QUANT_NF4  // 4-bit NormalFloat, one float32 absmax per 64 values (bitsandbytes' nf4)
	QuantFP4  Quantization = C.ACCEL_QUANT_FP4  // 4-bit float, the same blocks (bitsandbytes' fp4)
	QuantInt8 Quantization = C.ACCEL_QUANT_INT8 // LLM.int8's row-wise int8 (load_in_8bit)
)

// LMOptions says how a language model is loaded or created (accel_lm_options).
type LMOptions struct {
	DType                 DType        // the parameters' dtype: Float32 (default) or BFloat16
	GradientCheckpointing bool         // recompute each block's activations in backward (less memory)
	Quantization          Quantization // the blocks' linear weights quantized at load (default QuantNone)
	DoubleQuant           bool         // NF4's/FP4's absmax quantized again (bnb_4bit_use_double_quant); not with QuantInt8
}

// DefaultLMOptions returns the library's defaults.
func DefaultLMOptions() LMOptions {
	var c C.accel_lm_options
	C.ag_lm_options_init(&c)
	return LMOptions{DType: DType(c.dtype), GradientCheckpointing: c.gradient_checkpointing != 0,
		Quantization: Quantization(c.quantization), DoubleQuant: c.double_quant != 0}
}

func (o *LMOptions) toC() C.accel_lm_options {
	var c C.accel_lm_options
	C.ag_lm_options_init(&c)
	if o == nil {
		return c
	}
	c.dtype = C.accel_dtype(o.DType)
	c.gradient_checkpointing = cbool(o.GradientCheckpointing)
	c.quantization = C.accel_quantization(o.Quantization)
	c.double_quant = cbool(o.DoubleQuant)
	return c
}

// LoadPretrained loads a GPT-2 or Llama causal LM from a Hugging Face directory:
// config.json and model.safetensors or a sharded index (accel_model_load_pretrained).
// opts nil: the defaults.
func (c *Context) LoadPretrained(dir string, opts *LMOptions) (*Model, error) {
	return c.newLM("accel_model_load_pretrained", dir, opts, true)
}

// NewLM creates a causal LM with random weights from a config.json (the file or its
// directory), drawn from the context's seed as transformers initialises them
// (accel_model_create_lm).
func (c *Context) NewLM(config string, opts *LMOptions) (*Model, error) {
	return c.newLM("accel_model_create_lm", config, opts, false)
}

func (c *Context) newLM(op, path string, opts *LMOptions, pretrained bool) (*Model, error) {
	cs, err := cString(op, "path", path)
	if err != nil {
		return nil, err
	}
	defer C.free(unsafe.Pointer(cs))
	h, err := c.lock(op)
	if err != nil {
		return nil, err
	}
	defer c.st.unlock()
	co := opts.toC()
	var out *C.accel_model
	if pretrained {
		err = c.err(op, C.accel_model_load_pretrained(h, cs, &co, &out))
	} else {
		err = c.err(op, C.accel_model_create_lm(h, cs, &co, &out))
	}
	if err != nil {
		return nil, err
	}
	return c.st.wrapModel(out), nil
}

// SavePretrained writes a causal LM as a Hugging Face directory (config.json,
// model.safetensors) that transformers loads (accel_save_pretrained; every process calls it).
func (m *Model) SavePretrained(dir string) error {
	return m.pathOp("accel_save_pretrained", "dir", dir, func(c *C.accel_context, h *C.accel_model, p *C.char) C.accel_status {
		return C.accel_save_pretrained(c, h, p)
	})
}

// GenerateOptions says how a causal LM continues prompts (accel_generate_options).
type GenerateOptions struct {
	MaxNewTokens int64
	Temperature  float64 // 0: greedy; > 0: sampling
	TopK         int64   // sampling among the k most likely tokens (0: all)
	EOSTokenID   int64   // a row that emits it has finished; -1: never
	Seed         uint64
	UseCache     bool
}

// DefaultGenerateOptions returns the library's defaults (32 greedy tokens, the KV cache).
func DefaultGenerateOptions() GenerateOptions {
	var c C.accel_generate_options
	C.ag_generate_options_init(&c)
	return GenerateOptions{int64(c.max_new_tokens), float64(c.temperature), int64(c.top_k), int64(c.eos_token_id),
		uint64(c.seed), c.use_cache != 0}
}

// Generate continues the prompts inputIDs ([batch, seq], int64, no padding) (accel_lm_generate)
// and returns the prompts followed by the new tokens. opts nil: the defaults. Call
// SetTraining(false) first (dropout).
func (m *Model) Generate(inputIDs *Tensor, opts *GenerateOptions) (*Tensor, error) {
	const op = "accel_lm_generate"
	if inputIDs == nil {
		return nil, errArg(op, "inputIDs is nil")
	}
	h, err := m.lock(op)
	if err != nil {
		return nil, err
	}
	ctx := m.o.ctx
	defer ctx.unlock()
	is, ih, err := inputIDs.acquire(op)
	if err != nil {
		return nil, err
	}
	defer is.release()
	c := opts.toC()
	var out *C.accel_tensor
	err = ctx.err(op, C.accel_lm_generate(ctx.h, h, ih, &c, &out))
	if err != nil {
		return nil, err
	}
	return wrapTensor(out), nil
}

// toC fills a C struct (nil: the defaults).
func (o *GenerateOptions) toC() C.accel_generate_options {
	var c C.accel_generate_options
	C.ag_generate_options_init(&c)
	if o != nil {
		c.max_new_tokens, c.temperature, c.top_k = C.int64_t(o.MaxNewTokens), C.double(o.Temperature), C.int64_t(o.TopK)
		c.eos_token_id, c.seed, c.use_cache = C.int64_t(o.EOSTokenID), C.uint64_t(o.Seed), cbool(o.UseCache)
	}
	return c
}

// GeneratePadded continues a padded batch of prompts (accel_lm_generate_padded): inputIDs
// (int64 [batch, seq]) with mask ([batch, seq], int64, int32 or bool: 1 for a token, 0 for
// padding), the padding on the LEFT of each row, as Tokenizer.EncodeBatch gives with
// EncodeOptions.PaddingSide = SideLeft. Each row's positions count its own tokens, so every
// row continues as its prompt alone would (transformers' generate with an attention mask).
// It returns int64 [batch, seq + n]: the padded prompts, then the new tokens (a row that
// emitted EOSTokenID repeats it). opts nil: the defaults. Call SetTraining(false) first.
// Errors as Generate's; also ErrInvalidArgument for a nil mask, a mask of another shape or
// dtype, a row without tokens, or padding after a token (right padding).
func (m *Model) GeneratePadded(inputIDs, mask *Tensor, opts *GenerateOptions) (*Tensor, error) {
	const op = "accel_lm_generate_padded"
	if inputIDs == nil {
		return nil, errArg(op, "inputIDs is nil")
	}
	if mask == nil {
		return nil, errArg(op, "mask is nil (the attention mask: 1 for a token, 0 for the left padding)")
	}
	h, err := m.lock(op)
	if err != nil {
		return nil, err
	}
	ctx := m.o.ctx
	defer ctx.unlock()
	is, ih, err := inputIDs.acquire(op)
	if err != nil {
		return nil, err
	}
	defer is.release()
	ms, mh, err := mask.acquire(op)
	if err != nil {
		return nil, err
	}
	defer ms.release()
	c := opts.toC()
	var out *C.accel_tensor
	if err = ctx.err(op, C.accel_lm_generate_padded(ctx.h, h, ih, mh, &c, &out)); err != nil {
		return nil, err
	}
	return wrapTensor(out), nil
}

// LoRAOptions are PEFT's LoraConfig fields (accel_lora_options).
type LoRAOptions struct {
	R             int32
	Alpha         float64
	Dropout       float64
	TargetModules []string // module names ("q_proj", "v_proj"), or {"all-linear"}; nil: PEFT's default for the family
	UseRSLoRA     bool
}

// DefaultLoRAOptions returns the library's defaults (r 8, alpha 8).
func DefaultLoRAOptions() LoRAOptions {
	var c C.accel_lora_options
	C.ag_lora_options_init(&c)
	return LoRAOptions{R: int32(c.r), Alpha: float64(c.alpha), Dropout: float64(c.dropout), UseRSLoRA: c.use_rslora != 0}
}

// AddLoRA adds LoRA adapters (accel_model_add_lora): the base weights freeze and the model's
// parameters become the adapters. Call it before NewAdamW/NewSGD and before Prepare.
func (m *Model) AddLoRA(opts LoRAOptions) error {
	const op = "accel_model_add_lora"
	for _, t := range opts.TargetModules {
		if err := checkNUL(op, "TargetModules", t); err != nil {
			return err
		}
	}
	h, err := m.lock(op)
	if err != nil {
		return err
	}
	ctx := m.o.ctx
	defer ctx.unlock()
	var c C.accel_lora_options
	C.ag_lora_options_init(&c)
	c.r = C.int32_t(opts.R)
	c.alpha = C.double(opts.Alpha)
	c.dropout = C.double(opts.Dropout)
	c.use_rslora = cbool(opts.UseRSLoRA)
	if len(opts.TargetModules) > 0 {
		cs := C.CString(strings.Join(opts.TargetModules, ","))
		defer C.free(unsafe.Pointer(cs))
		c.target_modules = cs
	}
	return ctx.err(op, C.accel_model_add_lora(ctx.h, h, &c))
}

// LoadAdapter loads a PEFT LoRA adapter directory onto this base model
// (accel_model_load_adapter), as peft.PeftModel.from_pretrained(base, dir).
func (m *Model) LoadAdapter(dir string) error {
	return m.pathOp("accel_model_load_adapter", "dir", dir, func(c *C.accel_context, h *C.accel_model, p *C.char) C.accel_status {
		return C.accel_model_load_adapter(c, h, p)
	})
}

// SaveAdapter writes the adapters as a PEFT adapter directory (accel_save_adapter; every
// process calls it).
func (m *Model) SaveAdapter(dir string) error {
	return m.pathOp("accel_save_adapter", "dir", dir, func(c *C.accel_context, h *C.accel_model, p *C.char) C.accel_status {
		return C.accel_save_adapter(c, h, p)
	})
}

// CausalLMOutput is what LMForward returns (transformers' CausalLMOutput fields).
type CausalLMOutput struct {
	Loss      *Tensor // the mean over the real targets; nil without labels
	Logits    *Tensor // fp32 [batch, seq, vocab]
	NumTokens int64   // the real targets Loss averages (0 without labels)
}

// LMForward runs a causal LM's forward and loss (accel_lm_forward). mask and labels may be
// nil. labels (usually inputIDs with -100 where padded; shifted inside, as in transformers)
// give the loss, a token mean for Backward: the step's gradients are those of the mean over
// every real target of the global batch.
func (m *Model) LMForward(inputIDs, mask, labels *Tensor) (CausalLMOutput, error) {
	const op = "accel_lm_forward"
	var res CausalLMOutput
	if inputIDs == nil {
		return res, errArg(op, "inputIDs is nil")
	}
	h, err := m.lock(op)
	if err != nil {
		return res, err
	}
	ctx := m.o.ctx
	defer ctx.unlock()
	is, ih, err := inputIDs.acquire(op)
	if err != nil {
		return res, err
	}
	defer is.release()
	ms, mh, err := mask.acquire(op)
	if err != nil {
		return res, err
	}
	defer ms.release()
	ls, lh, err := labels.acquire(op)
	if err != nil {
		return res, err
	}
	defer ls.release()
	var logits, loss *C.accel_tensor
	var tokens C.int64_t
	if labels != nil {
		err = ctx.err(op, C.accel_lm_forward(ctx.h, h, ih, mh, lh, &logits, &loss, &tokens))
	} else {
		err = ctx.err(op, C.accel_lm_forward(ctx.h, h, ih, mh, lh, &logits, nil, nil))
	}
	if err != nil {
		return res, err
	}
	res.Logits = wrapTensor(logits)
	res.Loss = wrapTensor(loss)
	res.NumTokens = int64(tokens)
	return res, nil
}

// ---- causal-LM data ----

// WriteTokenFile writes int64/int32 tokens (a 1-D tensor) as a packed token file of 2- or
// 4-byte tokens (accel_token_file_write); it replaces only nothing or an earlier token file.
func WriteTokenFile(path string, tokens *Tensor, tokenBytes int) error {
	const op = "accel_token_file_write"
	if tokens == nil {
		return errArg(op, "tokens is nil")
	}
	cs, err := cString(op, "path", path)
	if err != nil {
		return err
	}
	defer C.free(unsafe.Pointer(cs))
	ts, th, err := tokens.acquire(op)
	if err != nil {
		return err
	}
	defer ts.release()
	return resErr(op, C.ag_token_file_write(cs, th, C.int32_t(tokenBytes)))
}

// ReadTokenFile reads a packed token file into an int64 tensor [count] (accel_token_file_read).
func ReadTokenFile(path string) (*Tensor, error) {
	const op = "accel_token_file_read"
	cs, err := cString(op, "path", path)
	if err != nil {
		return nil, err
	}
	defer C.free(unsafe.Pointer(cs))
	var out *C.accel_tensor
	if err := resErr(op, C.ag_token_file_read(cs, &out)); err != nil {
		return nil, err
	}
	return wrapTensor(out), nil
}

// LMDataOptions says how a causal-LM loader makes samples and pads them (accel_lm_data_options).
type LMDataOptions struct {
	BlockSize       int64 // without offsets: fixed blocks of this many tokens (>= 2)
	MaxLength       int64 // with offsets: each sequence cut to this many tokens (0: whole)
	PadID           int64 // the id of padding positions in input_ids
	PadToMultipleOf int64 // dynamic padding to a multiple of this (0: the longest of the batch)
	GroupByLength   bool  // length-grouped sampling (transformers' LengthGroupedSampler)
	// PaddingSide is where each row's padding goes (version 2): SideRight (default; no mask
	// needed) or SideLeft (pass the loader's AttentionMask to LMForward then).
	PaddingSide Side
}

// DefaultLMDataOptions returns the library's defaults.
func DefaultLMDataOptions() LMDataOptions {
	var c C.accel_lm_data_options
	C.ag_lm_data_options_init(&c)
	return LMDataOptions{BlockSize: int64(c.block_size), MaxLength: int64(c.max_length), PadID: int64(c.pad_id),
		PadToMultipleOf: int64(c.pad_to_multiple_of), GroupByLength: c.group_by_length != 0,
		PaddingSide: Side(c.padding_side)}
}

func (o *LMDataOptions) toC() C.accel_lm_data_options {
	var c C.accel_lm_data_options
	C.ag_lm_data_options_init(&c)
	c.block_size = C.int64_t(o.BlockSize)
	c.max_length = C.int64_t(o.MaxLength)
	c.pad_id = C.int64_t(o.PadID)
	c.pad_to_multiple_of = C.int64_t(o.PadToMultipleOf)
	c.group_by_length = cbool(o.GroupByLength)
	c.padding_side = C.int32_t(o.PaddingSide)
	return c
}

// NewLMDataLoader makes a loader of causal-LM batches (accel_lm_dataloader_create) over a
// 1-D token tensor: offsets nil gives fixed blocks of lm.BlockSize tokens; offsets
// ([sequences + 1]) one sequence each, with dynamic padding. NextBatch yields (input_ids,
// labels), labels -100 at padding: pass both to LMForward (no mask needed with padding on
// the right; with lm.PaddingSide = SideLeft pass the loader's AttentionMask too).
func (c *Context) NewLMDataLoader(tokens, offsets *Tensor, lm LMDataOptions, opts DataLoaderOptions) (*DataLoader, error) {
	const op = "accel_lm_dataloader_create"
	h, err := c.lock(op)
	if err != nil {
		return nil, err
	}
	defer c.st.unlock()
	if tokens == nil {
		return nil, errArg(op, "tokens is nil")
	}
	ts, th, err := tokens.acquire(op)
	if err != nil {
		return nil, err
	}
	defer ts.release()
	ofs, oh, err := offsets.acquire(op)
	if err != nil {
		return nil, err
	}
	defer ofs.release()
	cl := lm.toC()
	co := opts.toC()
	var out *C.accel_dataloader
	err = c.err(op, C.accel_lm_dataloader_create(h, th, oh, &cl, &co, &out))
	if err != nil {
		return nil, err
	}
	return c.st.wrapLoader(out), nil
}

// ---- Adafactor ----

// AdafactorOptions is accel_adafactor_options (transformers' Adafactor; Beta1 0 is no first
// moment; LR 0 with RelativeStep).
type AdafactorOptions struct {
	LR, Eps1, Eps2, ClipThreshold, DecayRate, Beta1, WeightDecay float64
	ScaleParameter, RelativeStep, WarmupInit                     bool
}

// DefaultAdafactorOptions returns the library's defaults (transformers' Adafactor defaults).
func DefaultAdafactorOptions() AdafactorOptions {
	var c C.accel_adafactor_options
	C.ag_adafactor_options_init(&c)
	return AdafactorOptions{float64(c.lr), float64(c.eps1), float64(c.eps2), float64(c.clip_threshold),
		float64(c.decay_rate), float64(c.beta1), float64(c.weight_decay), c.scale_parameter != 0,
		c.relative_step != 0, c.warmup_init != 0}
}

// NewAdafactor makes Adafactor over the model's parameters (accel_optimizer_create_adafactor;
// under ZeRO too). opts nil: the defaults.
func (c *Context) NewAdafactor(model *Model, opts *AdafactorOptions) (*Optimizer, error) {
	return c.newOptimizer("accel_optimizer_create_adafactor", model, func(h *C.accel_context, m *C.accel_model, out **C.accel_optimizer) C.accel_status {
		if opts == nil {
			return C.accel_optimizer_create_adafactor(h, m, nil, out)
		}
		var co C.accel_adafactor_options
		C.ag_adafactor_options_init(&co)
		co.lr, co.eps1, co.eps2 = C.double(opts.LR), C.double(opts.Eps1), C.double(opts.Eps2)
		co.clip_threshold, co.decay_rate = C.double(opts.ClipThreshold), C.double(opts.DecayRate)
		co.beta1, co.weight_decay = C.double(opts.Beta1), C.double(opts.WeightDecay)
		co.scale_parameter, co.relative_step, co.warmup_init = cbool(opts.ScaleParameter), cbool(opts.RelativeStep), cbool(opts.WarmupInit)
		return C.accel_optimizer_create_adafactor(h, m, &co, out)
	})
}
