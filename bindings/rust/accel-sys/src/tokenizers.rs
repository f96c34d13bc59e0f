//! `include/accel/accel.h`: Tokenizers.

use std::os::raw::{c_char, c_int};

use crate::{accel_status, accel_tensor, accel_tokenizer};

// ---- Tokenizers ----------------------------------------------------------------------

pub type accel_special_token = c_int;
/// beginning of sequence
pub const ACCEL_TOKEN_BOS: accel_special_token = 0;
/// end of sequence (generation's stop)
pub const ACCEL_TOKEN_EOS: accel_special_token = 1;
/// padding
pub const ACCEL_TOKEN_PAD: accel_special_token = 2;
/// unknown
pub const ACCEL_TOKEN_UNK: accel_special_token = 3;

pub type accel_side = c_int;
pub const ACCEL_SIDE_RIGHT: accel_side = 0;
pub const ACCEL_SIDE_LEFT: accel_side = 1;

pub const ACCEL_ENCODE_OPTIONS_VERSION: u32 = 1;

/// How `accel_tokenizer_encode` and `accel_tokenizer_encode_batch` encode (see the header for
/// each field).
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct accel_encode_options {
    pub version: u32,
    pub add_special_tokens: i32,
    pub replace_invalid_utf8: i32,
    pub max_length: i64,
    pub truncation_side: accel_side,
    pub padding_side: accel_side,
    pub pad_to_max_length: i32,
    pub pad_to_multiple_of: i64,
    pub pad_id: i64,
}

/// `ACCEL_ENCODE_OPTIONS_INIT`
pub const ACCEL_ENCODE_OPTIONS_INIT: accel_encode_options = accel_encode_options {
    version: ACCEL_ENCODE_OPTIONS_VERSION,
    add_special_tokens: 1,
    replace_invalid_utf8: 0,
    max_length: 0,
    truncation_side: ACCEL_SIDE_RIGHT,
    padding_side: ACCEL_SIDE_RIGHT,
    pad_to_max_length: 0,
    pad_to_multiple_of: 0,
    pad_id: -1,
};

pub type accel_chat_format = c_int;
/// the tokenizer's chat_template
pub const ACCEL_CHAT_AUTO: accel_chat_format = 0;
/// `<|im_start|>role\n...<|im_end|>` (Qwen2, Qwen2.5, Qwen3, SmolLM2/3...)
pub const ACCEL_CHAT_CHATML: accel_chat_format = 1;
/// `<|start_header_id|>role<|end_header_id|>\n\n...<|eot_id|>`
pub const ACCEL_CHAT_LLAMA3: accel_chat_format = 2;
/// `<start_of_turn>user|model\n...<end_of_turn>`
pub const ACCEL_CHAT_GEMMA: accel_chat_format = 3;
/// `<|user|>\n...<|end|>`
pub const ACCEL_CHAT_PHI3: accel_chat_format = 4;
/// `[INST] ... [/INST]` (Mistral-7B-Instruct, Llama 2 chat)
pub const ACCEL_CHAT_MISTRAL: accel_chat_format = 5;

/// One message of a conversation for `accel_tokenizer_apply_chat`: a role ("system", "user",
/// "assistant") and its content, both NUL-terminated UTF-8.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct accel_chat_message {
    pub role: *const c_char,
    pub content: *const c_char,
}

extern "C" {
    pub fn accel_tokenizer_load(path: *const c_char, out: *mut *mut accel_tokenizer) -> accel_status;
    pub fn accel_tokenizer_destroy(tokenizer: *mut accel_tokenizer);
    pub fn accel_tokenizer_vocab_size(tokenizer: *const accel_tokenizer, out: *mut i64) -> accel_status;
    pub fn accel_tokenizer_special_id(
        tokenizer: *const accel_tokenizer,
        which: accel_special_token,
        out: *mut i64,
    ) -> accel_status;
    pub fn accel_tokenizer_token_to_id(
        tokenizer: *const accel_tokenizer,
        token: *const c_char,
        out: *mut i64,
    ) -> accel_status;
    pub fn accel_tokenizer_id_to_token(
        tokenizer: *const accel_tokenizer,
        id: i64,
        out: *mut *const c_char,
        out_special: *mut c_int,
    ) -> accel_status;
    pub fn accel_encode_options_init(opts: *mut accel_encode_options, version: u32) -> accel_status;
    pub fn accel_tokenizer_encode(
        tokenizer: *const accel_tokenizer,
        text: *const c_char,
        length: usize,
        opts: *const accel_encode_options,
        out: *mut *mut accel_tensor,
    ) -> accel_status;
    pub fn accel_tokenizer_encode_batch(
        tokenizer: *const accel_tokenizer,
        texts: *const *const c_char,
        lengths: *const usize,
        count: usize,
        opts: *const accel_encode_options,
        out_ids: *mut *mut accel_tensor,
        out_mask: *mut *mut accel_tensor,
    ) -> accel_status;
    pub fn accel_tokenizer_decode(
        tokenizer: *const accel_tokenizer,
        ids: *const i64,
        count: usize,
        skip_special_tokens: c_int,
        buf: *mut c_char,
        capacity: usize,
        out_length: *mut usize,
    ) -> accel_status;
    pub fn accel_tokenizer_apply_chat(
        tokenizer: *const accel_tokenizer,
        format: accel_chat_format,
        messages: *const accel_chat_message,
        count: usize,
        add_generation_prompt: c_int,
        buf: *mut c_char,
        capacity: usize,
        out_length: *mut usize,
    ) -> accel_status;
}
