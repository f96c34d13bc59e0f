package accel

/*
#include "shim.h"

static void ag_encode_options_init(accel_encode_options *o) {
    if (accel_encode_options_init(o, ACCEL_ENCODE_OPTIONS_VERSION) != ACCEL_OK) { accel_encode_options d = ACCEL_ENCODE_OPTIONS_INIT; *o = d; }
}
static ag_res ag_tokenizer_load(const char *p, accel_tokenizer **out) { return ag_fail(accel_tokenizer_load(p, out)); }
static ag_res ag_tokenizer_vocab_size(const accel_tokenizer *t, int64_t *out) { return ag_fail(accel_tokenizer_vocab_size(t, out)); }
static ag_res ag_tokenizer_special_id(const accel_tokenizer *t, int32_t which, int64_t *out) {
    return ag_fail(accel_tokenizer_special_id(t, (accel_special_token)which, out));
}
static ag_res ag_tokenizer_token_to_id(const accel_tokenizer *t, const char *tok, int64_t *out) {
    return ag_fail(accel_tokenizer_token_to_id(t, tok, out));
}
static ag_res ag_tokenizer_id_to_token(const accel_tokenizer *t, int64_t id, const char **out, int *special) {
    return ag_fail(accel_tokenizer_id_to_token(t, id, out, special));
}
// Encodes and sizes the result in one call (the tensor is destroyed when numel fails).
static ag_res ag_tokenizer_encode(const accel_tokenizer *t, const char *text, size_t len, const accel_encode_options *o,
                                  accel_tensor **out, int64_t *n) {
    accel_status st = accel_tokenizer_encode(t, text, len, o, out);
    if (st == ACCEL_OK) {
        st = accel_tensor_numel(*out, n);
        if (st != ACCEL_OK) { accel_tensor_destroy(*out); *out = NULL; }
    }
    return ag_fail(st);
}
// Copies an int64 tensor's elements to dst (nbytes) and destroys the tensor, in any case.
static ag_res ag_take_ids(accel_tensor *t, int64_t *dst, size_t nbytes) {
    accel_status st = nbytes == 0 ? ACCEL_OK : accel_tensor_copy_to_host(t, dst, nbytes);
    ag_res r = ag_fail(st);
    accel_tensor_destroy(t);
    return r;
}
// The texts arrive as one buffer (Go memory, no pointers in it) and their lengths: the
// array of pointers the C function takes is built here, in C memory (Go memory passed to C
// may not hold Go pointers).
static ag_res ag_tokenizer_encode_batch(const accel_tokenizer *t, const char *base, const size_t *lengths, size_t count,
                                        const accel_encode_options *o, accel_tensor **ids, accel_tensor **mask) {
    static const char *const none[1] = {""};
    if (count == 0) return ag_fail(accel_tokenizer_encode_batch(t, none, NULL, 0, o, ids, mask));
    const char **texts = (const char **)malloc(count * sizeof *texts);
    if (texts == NULL) {
        ag_res r = {ACCEL_ERR_OUT_OF_MEMORY, strdup("accel_tokenizer_encode_batch: no memory for the texts' pointers")};
        return r;
    }
    size_t off = 0;
    for (size_t i = 0; i < count; ++i) {
        texts[i] = base != NULL ? base + off : "";
        off += lengths[i];
    }
    ag_res r = ag_fail(accel_tokenizer_encode_batch(t, texts, lengths, count, o, ids, mask));
    free(texts);
    return r;
}
static ag_res ag_tokenizer_decode(const accel_tokenizer *t, const int64_t *ids, size_t n, int skip, char *buf, size_t cap,
                                  size_t *len) {
    return ag_fail(accel_tokenizer_decode(t, ids, n, skip, buf, cap, len));
}
static ag_res ag_tokenizer_apply_chat(const accel_tokenizer *t, int32_t format, const accel_chat_message *m, size_t n,
                                      int gen, char *buf, size_t cap, size_t *len) {
    return ag_fail(accel_tokenizer_apply_chat(t, (accel_chat_format)format, m, n, gen, buf, cap, len));
}
*/
import "C"

import (
	"fmt"
	"reflect"
	"runtime"
	"unsafe"
)

// ---- tokenizers (docs/lm.md, "Tokenizers") ----

// Side is accel_side: where truncation drops ids, or where padding goes.
type Side int32

const (
	SideRight Side = C.ACCEL_SIDE_RIGHT // the end (the default of both)
	SideLeft  Side = C.ACCEL_SIDE_LEFT  // the start (padding a batch of prompts for generation)
)

// SpecialToken is accel_special_token: which special token Tokenizer.SpecialID names.
type SpecialToken int32

const (
	TokenBOS SpecialToken = C.ACCEL_TOKEN_BOS // beginning of sequence
	TokenEOS SpecialToken = C.ACCEL_TOKEN_EOS // end of sequence (generation's stop)
	TokenPad SpecialToken = C.ACCEL_TOKEN_PAD // padding
	TokenUnk SpecialToken = C.ACCEL_TOKEN_UNK // unknown
)

// EncodeOptions is accel_encode_options: how Encode and EncodeBatch turn text into ids.
// Start from DefaultEncodeOptions(): the zero value is not the defaults (it adds no
// special tokens and pads with id 0).
type EncodeOptions struct {
	// AddSpecialTokens adds the post-processor's tokens (Llama's BOS...), as Hugging Face's
	// add_special_tokens=True (default true).
	AddSpecialTokens bool
	// ReplaceInvalidUTF8 replaces each invalid UTF-8 sequence with U+FFFD first, as Python's
	// bytes.decode("utf-8", "replace"); false (default): such text is ErrInvalidArgument,
	// naming the byte offset.
	ReplaceInvalidUTF8 bool
	MaxLength          int64 // > 0: truncate to this many ids, special tokens included; 0 (default): no truncation
	TruncationSide     Side  // where truncation drops ids (default SideRight)
	PaddingSide        Side  // batches: where padding goes (default SideRight)
	PadToMaxLength     bool  // batches: pad every row to MaxLength (> 0); false (default): to the longest row
	PadToMultipleOf    int64 // batches: round the width up to a multiple of this (0, default: not rounded)
	PadID              int64 // batches: the padding id; -1 (default): the tokenizer's padding token, else 0
}

// DefaultEncodeOptions returns the library's defaults (accel_encode_options_init): special
// tokens added, invalid UTF-8 refused, no truncation, padding on the right with the
// tokenizer's padding token.
func DefaultEncodeOptions() EncodeOptions {
	var c C.accel_encode_options
	C.ag_encode_options_init(&c)
	return EncodeOptions{AddSpecialTokens: c.add_special_tokens != 0, ReplaceInvalidUTF8: c.replace_invalid_utf8 != 0,
		MaxLength: int64(c.max_length), TruncationSide: Side(c.truncation_side), PaddingSide: Side(c.padding_side),
		PadToMaxLength: c.pad_to_max_length != 0, PadToMultipleOf: int64(c.pad_to_multiple_of), PadID: int64(c.pad_id)}
}

// toC fills a C struct (nil: the defaults).
func (o *EncodeOptions) toC() C.accel_encode_options {
	var c C.accel_encode_options
	C.ag_encode_options_init(&c)
	if o == nil {
		return c
	}
	c.add_special_tokens = C.int32_t(cbool(o.AddSpecialTokens))
	c.replace_invalid_utf8 = C.int32_t(cbool(o.ReplaceInvalidUTF8))
	c.max_length = C.int64_t(o.MaxLength)
	c.truncation_side = C.accel_side(o.TruncationSide)
	c.padding_side = C.accel_side(o.PaddingSide)
	c.pad_to_max_length = C.int32_t(cbool(o.PadToMaxLength))
	c.pad_to_multiple_of = C.int64_t(o.PadToMultipleOf)
	c.pad_id = C.int64_t(o.PadID)
	return c
}

// Tokenizer turns text into the ids a model was trained with, and back (accel_tokenizer): a
// Hugging Face tokenizer.json (byte-level BPE as GPT-2, Llama 3 and Qwen2 publish it, or
// BPE with byte fallback as Llama 2, Mistral, Gemma and Phi-3 do) gives the ids Hugging
// Face tokenizers gives; a SentencePiece .model gives SentencePiece's own.
//
// A Tokenizer is independent of contexts and immutable once loaded: any number of
// goroutines may use it at once, with no lock. Close may run concurrently with uses (and
// other Closes): the C tokenizer is destroyed when the last use in flight ends, and uses
// that start after Close return ErrClosed. A finalizer is the safety net. The state lives
// behind a pointer: a copy of a Tokenizer value shares it.
type Tokenizer struct {
	s *tokenizerState
}

type tokenizerState struct {
	ref refState
	h   *C.accel_tokenizer
}

func (s *tokenizerState) finalize() {
	if s.ref.close() {
		C.accel_tokenizer_destroy(s.h)
	}
}

func (s *tokenizerState) release() {
	if s.ref.release() {
		C.accel_tokenizer_destroy(s.h)
	}
}

// acquire starts a use of the C tokenizer (the caller calls s.release()), or returns an
// error matching ErrClosed (a closed tokenizer, a nil *Tokenizer or a zero value).
func (t *Tokenizer) acquire(op string) (*tokenizerState, error) {
	if t == nil || t.s == nil {
		return nil, &Error{Status: StatusInvalidState, Op: op, closed: true,
			Message: op + ": a nil or zero Tokenizer (tokenizers come from LoadTokenizer, as *Tokenizer)"}
	}
	if !t.s.ref.acquire() {
		return nil, &Error{Status: StatusInvalidState, Op: op, closed: true, Message: op + ": the tokenizer is closed"}
	}
	return t.s, nil
}

// LoadTokenizer loads a tokenizer (accel_tokenizer_load) from a tokenizer.json, a
// SentencePiece .model, or a model directory holding tokenizer.json (preferred) or
// tokenizer.model; tokenizer_config.json and special_tokens_map.json beside it, when
// present, name the special tokens. Errors match ErrIO for a missing file (or a directory
// with neither file), ErrFormat for a file that is not a tokenizer, ErrUnsupported for a
// model type or component this version lacks (Unigram, WordPiece, ...), ErrInvalidArgument
// for an empty path or one with a NUL byte. Close the tokenizer when done.
func LoadTokenizer(path string) (*Tokenizer, error) {
	const op = "accel_tokenizer_load"
	if err := libCheck(); err != nil {
		return nil, err
	}
	cs, err := cString(op, "path", path)
	if err != nil {
		return nil, err
	}
	defer C.free(unsafe.Pointer(cs))
	var out *C.accel_tokenizer
	if err := resErr(op, C.ag_tokenizer_load(cs, &out)); err != nil {
		return nil, err
	}
	s := &tokenizerState{h: out}
	runtime.SetFinalizer(s, (*tokenizerState).finalize)
	return &Tokenizer{s: s}, nil
}

// Close releases the tokenizer (accel_tokenizer_destroy), at once or, when other
// goroutines are using it, as the last of those uses ends. Idempotent, and safe to call
// concurrently.
func (t *Tokenizer) Close() error {
	if t == nil || t.s == nil {
		return nil
	}
	if t.s.ref.close() {
		runtime.SetFinalizer(t.s, nil)
		C.accel_tokenizer_destroy(t.s.h)
	}
	return nil
}

// VocabSize returns the number of ids: one more than the largest id of the vocabulary and
// the added tokens (accel_tokenizer_vocab_size).
func (t *Tokenizer) VocabSize() (int64, error) {
	const op = "accel_tokenizer_vocab_size"
	s, err := t.acquire(op)
	if err != nil {
		return 0, err
	}
	defer s.release()
	var out C.int64_t
	if err := resErr(op, C.ag_tokenizer_vocab_size(s.h, &out)); err != nil {
		return 0, err
	}
	return int64(out), nil
}

// SpecialID returns the id of a special token, or -1 when the tokenizer has none
// (accel_tokenizer_special_id; -1 is also what GenerateOptions.EOSTokenID takes for "no
// stop"). Errors match ErrInvalidArgument for an unknown which.
func (t *Tokenizer) SpecialID(which SpecialToken) (int64, error) {
	const op = "accel_tokenizer_special_id"
	s, err := t.acquire(op)
	if err != nil {
		return 0, err
	}
	defer s.release()
	out := C.int64_t(-1)
	if err := resErr(op, C.ag_tokenizer_special_id(s.h, C.int32_t(which), &out)); err != nil {
		return 0, err
	}
	return int64(out), nil
}

// BOSID is SpecialID(TokenBOS): the beginning-of-sequence id, -1 when there is none.
func (t *Tokenizer) BOSID() (int64, error) { return t.SpecialID(TokenBOS) }

// EOSID is SpecialID(TokenEOS): the end-of-sequence id, -1 when there is none.
func (t *Tokenizer) EOSID() (int64, error) { return t.SpecialID(TokenEOS) }

// PadID is SpecialID(TokenPad): the padding id, -1 when there is none.
func (t *Tokenizer) PadID() (int64, error) { return t.SpecialID(TokenPad) }

// UnkID is SpecialID(TokenUnk): the unknown token's id, -1 when there is none.
func (t *Tokenizer) UnkID() (int64, error) { return t.SpecialID(TokenUnk) }

// TokenToID returns the id of the token whose text is token (byte-level tokens in their
// mapped form, "Ġthe"), or -1 when the vocabulary has none (accel_tokenizer_token_to_id).
// A token with a NUL byte is refused (ErrInvalidArgument): C would look up its prefix.
func (t *Tokenizer) TokenToID(token string) (int64, error) {
	const op = "accel_tokenizer_token_to_id"
	cs, err := cString(op, "token", token)
	if err != nil {
		return 0, err
	}
	defer C.free(unsafe.Pointer(cs))
	s, err := t.acquire(op)
	if err != nil {
		return 0, err
	}
	defer s.release()
	out := C.int64_t(-1)
	if err := resErr(op, C.ag_tokenizer_token_to_id(s.h, cs, &out)); err != nil {
		return 0, err
	}
	return int64(out), nil
}

// IDToToken returns the text of token id (a copy) and whether it is a special token, one
// Decode skips with skipSpecial (accel_tokenizer_id_to_token). Errors match
// ErrInvalidArgument for an id outside [0, VocabSize()).
func (t *Tokenizer) IDToToken(id int64) (token string, special bool, err error) {
	const op = "accel_tokenizer_id_to_token"
	s, err := t.acquire(op)
	if err != nil {
		return "", false, err
	}
	defer s.release() // the text belongs to the tokenizer: copied before the use ends
	var out *C.char
	var sp C.int
	if err := resErr(op, C.ag_tokenizer_id_to_token(s.h, C.int64_t(id), &out, &sp)); err != nil {
		return "", false, err
	}
	return goStr(out), sp != 0, nil
}

// stringData is the address of a string's bytes (Go 1.19 has no unsafe.StringData). C only
// reads them, during the call.
func stringData(s string) unsafe.Pointer {
	if len(s) == 0 {
		return nil
	}
	return unsafe.Pointer((*reflect.StringHeader)(unsafe.Pointer(&s)).Data)
}

// Encode encodes text (UTF-8; it may hold any bytes, NUL included) into ids
// (accel_tokenizer_encode). Special tokens written in the text ("<|im_start|>") become
// their ids, as in Hugging Face tokenizers (a SentencePiece .model reads them as text, as
// SentencePiece does). opts nil: the defaults (special tokens added). The library reads
// the string's bytes in place, without a copy. Errors match ErrInvalidArgument for text
// that is not valid UTF-8 without ReplaceInvalidUTF8 (the message names the byte offset),
// a MaxLength below the number of special tokens added, a negative MaxLength,
// PadToMultipleOf or a PadID below -1, an unknown side.
func (t *Tokenizer) Encode(text string, opts *EncodeOptions) ([]int64, error) {
	return t.encode(stringData(text), len(text), opts)
}

// EncodeBytes is Encode of a byte slice (read in place, without a copy).
func (t *Tokenizer) EncodeBytes(text []byte, opts *EncodeOptions) ([]int64, error) {
	var p unsafe.Pointer
	if len(text) > 0 {
		p = unsafe.Pointer(&text[0])
	}
	return t.encode(p, len(text), opts)
}

func (t *Tokenizer) encode(text unsafe.Pointer, length int, opts *EncodeOptions) ([]int64, error) {
	const op = "accel_tokenizer_encode"
	s, err := t.acquire(op)
	if err != nil {
		return nil, err
	}
	defer s.release()
	co := opts.toC()
	var out *C.accel_tensor
	var n C.int64_t
	if err := resErr(op, C.ag_tokenizer_encode(s.h, (*C.char)(text), C.size_t(length), &co, &out, &n)); err != nil {
		return nil, err
	}
	ids := make([]int64, int(n))
	var p *C.int64_t
	if n > 0 {
		p = (*C.int64_t)(unsafe.Pointer(&ids[0]))
	}
	if err := resErr("accel_tensor_copy_to_host", C.ag_take_ids(out, p, C.size_t(n)*8)); err != nil {
		return nil, err
	}
	return ids, nil
}

// EncodeBatch encodes texts (at least one; any bytes each, as Encode) into two new int64
// tensors [len(texts), T] (accel_tokenizer_encode_batch), on several threads for large
// batches: the ids, truncated and padded as opts says, and the attention mask (1 for a
// token, 0 for padding): LMForward's inputIDs and mask. opts nil: the defaults (special
// tokens added, each row padded on the right to the longest with the tokenizer's padding
// token, else 0). The texts are copied once into one buffer for the call. Errors as
// Encode's, naming the text's index (texts[3]); also an empty batch, PadToMaxLength without
// MaxLength, a PadID outside the vocabulary. Close both tensors when done.
func (t *Tokenizer) EncodeBatch(texts []string, opts *EncodeOptions) (ids, mask *Tensor, err error) {
	const op = "accel_tokenizer_encode_batch"
	s, err := t.acquire(op)
	if err != nil {
		return nil, nil, err
	}
	defer s.release()
	total := 0
	for _, x := range texts {
		total += len(x)
	}
	buf := make([]byte, 0, total)
	lengths := make([]C.size_t, len(texts))
	for i, x := range texts {
		buf = append(buf, x...)
		lengths[i] = C.size_t(len(x))
	}
	var base *C.char
	if total > 0 {
		base = (*C.char)(unsafe.Pointer(&buf[0]))
	}
	var lp *C.size_t
	if len(lengths) > 0 {
		lp = &lengths[0]
	}
	co := opts.toC()
	var oi, om *C.accel_tensor
	if err := resErr(op, C.ag_tokenizer_encode_batch(s.h, base, lp, C.size_t(len(texts)), &co, &oi, &om)); err != nil {
		return nil, nil, err
	}
	return wrapTensor(oi), wrapTensor(om), nil
}

// Decode turns ids into text (accel_tokenizer_decode): the decoder's (byte-level bytes, byte
// fallback, SentencePiece's spaces), special tokens dropped when skipSpecial, bytes that
// do not form UTF-8 replaced by U+FFFD, as Hugging Face's decode. The text is written
// straight into a Go buffer; when the first guess of its size is short, the library says
// the size and a second call fills a buffer of that size. Errors match ErrInvalidArgument
// for an id outside [0, VocabSize()) (the message names its index).
func (t *Tokenizer) Decode(ids []int64, skipSpecial bool) (string, error) {
	const op = "accel_tokenizer_decode"
	s, err := t.acquire(op)
	if err != nil {
		return "", err
	}
	defer s.release()
	var ip *C.int64_t
	if len(ids) > 0 {
		ip = (*C.int64_t)(unsafe.Pointer(&ids[0]))
	}
	skip := cbool(skipSpecial)
	buf := make([]byte, 8*len(ids)+64) // most tokens are a few bytes
	for {
		n := C.size_t(0)
		r := C.ag_tokenizer_decode(s.h, ip, C.size_t(len(ids)), skip, (*C.char)(unsafe.Pointer(&buf[0])), C.size_t(len(buf)), &n)
		if r.status == C.ACCEL_OK {
			return string(buf[:n]), nil
		}
		if uint64(n) < uint64(len(buf)) { // not a short buffer (which sets n to the length): an error
			return "", resErr(op, r)
		}
		if r.msg != nil {
			C.free(unsafe.Pointer(r.msg))
		}
		buf = make([]byte, int(n)+1)
	}
}

// ChatFormat is accel_chat_format: the chat template ApplyChat (and a fine-tuning loader's
// "messages" lines) renders a conversation with.
type ChatFormat int32

const (
	// ChatAuto reads the template from tokenizer_config.json's chat_template and recognises
	// it by its markers (the default).
	ChatAuto    ChatFormat = C.ACCEL_CHAT_AUTO
	ChatChatML  ChatFormat = C.ACCEL_CHAT_CHATML  // <|im_start|>role\n...<|im_end|> (Qwen2, Qwen2.5, Qwen3, SmolLM2/3...)
	ChatLlama3  ChatFormat = C.ACCEL_CHAT_LLAMA3  // <|start_header_id|>role<|end_header_id|>\n\n...<|eot_id|>
	ChatGemma   ChatFormat = C.ACCEL_CHAT_GEMMA   // <start_of_turn>user|model\n...<end_of_turn>
	ChatPhi3    ChatFormat = C.ACCEL_CHAT_PHI3    // <|user|>\n...<|end|>
	ChatMistral ChatFormat = C.ACCEL_CHAT_MISTRAL // [INST] ... [/INST] (Mistral-7B-Instruct, Llama 2 chat)
)

// ChatMessage is one message of a conversation (accel_chat_message): a Role, "system",
// "user" or "assistant", and its Content (UTF-8).
type ChatMessage struct {
	Role    string
	Content string
}

// chatMessages copies messages into one C allocation: the accel_chat_message array, then
// every role and content NUL-terminated (the array holds pointers, so it may not be Go
// memory). It returns nil for no messages, and a guess of the rendered text's size. A
// string with a NUL byte is refused (C would read it cut short). The caller frees the block.
func chatMessages(op string, messages []ChatMessage) (*C.accel_chat_message, int, error) {
	text := 0
	for i, m := range messages {
		if err := checkNUL(op, fmt.Sprintf("messages[%d].Role", i), m.Role); err != nil {
			return nil, 0, err
		}
		if err := checkNUL(op, fmt.Sprintf("messages[%d].Content", i), m.Content); err != nil {
			return nil, 0, err
		}
		text += len(m.Role) + len(m.Content) + 2
	}
	guess := text + 32*len(messages) + 256 // the templates' markers, a default system prompt
	if len(messages) == 0 {
		return nil, guess, nil
	}
	head := len(messages) * int(C.sizeof_accel_chat_message)
	block := C.malloc(C.size_t(head + text)) // cgo's C.malloc never returns nil (it aborts)
	msgs := unsafe.Slice((*C.accel_chat_message)(block), len(messages))
	bytes := unsafe.Slice((*byte)(unsafe.Add(block, head)), text)
	off := 0
	put := func(s string) *C.char {
		p := (*C.char)(unsafe.Pointer(&bytes[off]))
		off += copy(bytes[off:], s)
		bytes[off] = 0
		off++
		return p
	}
	for i, m := range messages {
		msgs[i].role = put(m.Role)
		msgs[i].content = put(m.Content)
	}
	return &msgs[0], guess, nil
}

// ApplyChat renders a conversation as the model's chat template does
// (accel_tokenizer_apply_chat): each format renders exactly what the family's published
// template renders with transformers' apply_chat_template (accel runs no Jinja). ChatAuto
// reads the template from tokenizer_config.json's chat_template and recognises it. With
// addGenerationPrompt the text ends with the assistant's header, for generation. Encode the
// text with AddSpecialTokens false: the template holds the BOS where the family has one.
// The messages are copied to C memory for the call; the text is written straight into a Go
// buffer (a second call when the first guess of its size is short, as Decode). Errors
// match ErrInvalidArgument for an unknown format, a conversation the template refuses
// (Gemma: a system role; Gemma and Mistral: roles that do not alternate user/assistant),
// content that is not UTF-8, a format that needs a BOS or EOS token the tokenizer lacks, no
// chat_template with ChatAuto, a role or content with a NUL byte (refused in Go, naming
// it); ErrUnsupported for a chat_template that is none of the formats.
func (t *Tokenizer) ApplyChat(format ChatFormat, messages []ChatMessage, addGenerationPrompt bool) (string, error) {
	const op = "accel_tokenizer_apply_chat"
	s, err := t.acquire(op)
	if err != nil {
		return "", err
	}
	defer s.release()
	msgs, guess, err := chatMessages(op, messages)
	if err != nil {
		return "", err
	}
	defer C.free(unsafe.Pointer(msgs))
	gen := cbool(addGenerationPrompt)
	buf := make([]byte, guess)
	for try := 0; ; try++ {
		n := C.size_t(0)
		r := C.ag_tokenizer_apply_chat(s.h, C.int32_t(format), msgs, C.size_t(len(messages)), gen,
			(*C.char)(unsafe.Pointer(&buf[0])), C.size_t(len(buf)), &n)
		if r.status == C.ACCEL_OK {
			return string(buf[:n]), nil
		}
		// a short buffer sets n to the text's length; any other error leaves it 0
		if try > 0 || uint64(n) < uint64(len(buf)) {
			return "", resErr(op, r)
		}
		if r.msg != nil {
			C.free(unsafe.Pointer(r.msg))
		}
		buf = make([]byte, int(n)+1)
	}
}
