package accel

/*
#include "shim.h"

static void ag_sft_options_init(accel_sft_options *o) {
    if (accel_sft_options_init(o, ACCEL_SFT_OPTIONS_VERSION) != ACCEL_OK) { accel_sft_options d = ACCEL_SFT_OPTIONS_INIT; *o = d; }
}
*/
import "C"

import "unsafe"

// ---- fine-tuning data (docs/lm.md, "Fine-tuning data") ----

// SFTOptions is accel_sft_options: how NewSFTDataLoader turns a JSONL file into
// fine-tuning batches. Start from DefaultSFTOptions() (or pass nil): the zero value is not
// the defaults (it puts labels on every token, adds no EOS and pads with id 0).
type SFTOptions struct {
	ChatFormat ChatFormat // the template of "messages" lines (default ChatAuto: the tokenizer's chat_template)
	// CompletionOnlyLoss puts labels only on the completion of a prompt/completion line and
	// on the assistant turns of a conversation (their end-of-turn token included), -100
	// elsewhere (default true); false: labels on every token.
	CompletionOnlyLoss bool
	// AddEOS ends "text" and prompt/completion lines with the EOS token (default true;
	// conversations end as their template does).
	AddEOS bool
	// MaxLength > 0 cuts each example to this many tokens (the end dropped); with Packing,
	// the length of a block. 0 (default): whole examples.
	MaxLength int64
	// Packing concatenates the examples and cuts them into blocks of MaxLength tokens
	// (attention crosses example boundaries, as TRL's packing without position resets).
	Packing         bool
	PaddingSide     Side  // where each row's padding goes (default SideRight)
	PadToMultipleOf int64 // the batch's width rounded up to a multiple of this (0, default: the longest example)
	PadID           int64 // -1 (default): the tokenizer's padding token, else its EOS, else 0
}

// DefaultSFTOptions returns the library's defaults (accel_sft_options_init): the
// tokenizer's chat template, completion-only labels, EOS added, whole examples, no packing,
// padding on the right with the tokenizer's padding token.
func DefaultSFTOptions() SFTOptions {
	var c C.accel_sft_options
	C.ag_sft_options_init(&c)
	return SFTOptions{ChatFormat: ChatFormat(c.chat_format), CompletionOnlyLoss: c.completion_only_loss != 0,
		AddEOS: c.add_eos != 0, MaxLength: int64(c.max_length), Packing: c.packing != 0,
		PaddingSide: Side(c.padding_side), PadToMultipleOf: int64(c.pad_to_multiple_of), PadID: int64(c.pad_id)}
}

// toC fills a C struct (nil: the defaults).
func (o *SFTOptions) toC() C.accel_sft_options {
	var c C.accel_sft_options
	C.ag_sft_options_init(&c)
	if o == nil {
		return c
	}
	c.chat_format = C.accel_chat_format(o.ChatFormat)
	c.completion_only_loss = C.int32_t(cbool(o.CompletionOnlyLoss))
	c.add_eos = C.int32_t(cbool(o.AddEOS))
	c.max_length = C.int64_t(o.MaxLength)
	c.packing = C.int32_t(cbool(o.Packing))
	c.padding_side = C.accel_side(o.PaddingSide)
	c.pad_to_multiple_of = C.int64_t(o.PadToMultipleOf)
	c.pad_id = C.int64_t(o.PadID)
	return c
}

// NewSFTDataLoader makes a loader of fine-tuning batches from a JSONL file
// (accel_sft_dataloader_create), tokenized with tok once, here (the loader keeps no
// reference to it). Each non-blank line is an object with "messages" (an array of {"role",
// "content"}, rendered with sft.ChatFormat as Tokenizer.ApplyChat renders it), "prompt"
// and "completion", or "text". NextBatch (or Next and Batch) yields input_ids (int64
// [batch, T]) and labels (int64 [batch, T], -100 on masked and padding positions), padded
// to the batch's longest example on sft.PaddingSide; AttentionMask gives the batch's mask.
// Pass all three to LMForward (or train with TrainMicroBatches, which does). sft nil: the
// defaults; opts nil: DefaultDataLoaderOptions(). The loader shuffles, shards, checkpoints
// and resumes like the others. Errors match ErrIO for a missing file; ErrFormat naming the
// file and line ("data.jsonl:3") for a line that is not a JSON object, not UTF-8, or of
// none of the three shapes; ErrInvalidArgument for a nil tokenizer, a path with a NUL
// byte, a file with no example, a conversation the chat format refuses (file and line
// named), an unknown chat format or side, a negative MaxLength or PadToMultipleOf, Packing
// with MaxLength < 2, a PadID below -1 or outside the vocabulary; ErrUnsupported as
// ApplyChat's; ErrClosed for a closed tokenizer.
func (c *Context) NewSFTDataLoader(tok *Tokenizer, path string, sft *SFTOptions, opts *DataLoaderOptions) (*DataLoader, error) {
	const op = "accel_sft_dataloader_create"
	if tok == nil {
		return nil, errArg(op, "tokenizer is nil")
	}
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
	ts, err := tok.acquire(op)
	if err != nil {
		return nil, err
	}
	defer ts.release()
	so := sft.toC()
	lo := DefaultDataLoaderOptions()
	if opts != nil {
		lo = *opts
	}
	co := lo.toC()
	var out *C.accel_dataloader
	if err = c.err(op, C.accel_sft_dataloader_create(h, ts.h, cs, &so, &co, &out)); err != nil {
		return nil, err
	}
	return c.st.wrapLoader(out), nil
}

// AttentionMask returns the attention mask (int64 [batch, T]: 1 for a token, 0 for padding)
// of the batch the last Next or NextBatch yielded, as a new tensor the caller closes
// (accel_dataloader_attention_mask), for the causal-LM loaders (NewLMDataLoader,
// NewSFTDataLoader): LMForward's mask. Errors match ErrInvalidArgument for a loader whose
// batches have no mask (NewDataLoader's rows of tensors), ErrInvalidState before the first
// batch and after the end of an epoch (no batch), ErrClosed for a closed loader.
func (l *DataLoader) AttentionMask() (*Tensor, error) {
	const op = "accel_dataloader_attention_mask"
	h, err := l.obj().lock(op, "data loader")
	if err != nil {
		return nil, err
	}
	defer l.l.ctx.unlock()
	var out *C.accel_tensor
	if err = l.l.ctx.err(op, C.accel_dataloader_attention_mask(l.l.ctx.h, (*C.accel_dataloader)(h), &out)); err != nil {
		return nil, err
	}
	return wrapTensor(out), nil
}
