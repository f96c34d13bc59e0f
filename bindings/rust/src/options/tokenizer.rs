//! The options of tokenizers' encoding.

use crate::error::{check, Result};
use crate::sys;
use super::enums::Side;

/// `accel_encode_options`: how [`Tokenizer::encode`](crate::Tokenizer::encode) and
/// [`Tokenizer::encode_batch`](crate::Tokenizer::encode_batch) encode. The library checks the
/// values (`Status::InvalidArgument` naming the field).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct EncodeOptions {
    /// The post-processor's tokens (Llama's BOS, ...), as Hugging Face's
    /// `add_special_tokens=True` (the default).
    pub add_special_tokens: bool,
    /// false (the default): text that is not valid UTF-8 is `Status::InvalidArgument`, naming
    /// the byte offset; true: each invalid sequence becomes U+FFFD first, as Python's
    /// `bytes.decode("utf-8", "replace")` does.
    pub replace_invalid_utf8: bool,
    /// Truncation to this many ids (when positive), the special tokens added included; 0 (the
    /// default): no truncation.
    pub max_length: i64,
    /// Where truncation drops ids (default `Right`: the end).
    pub truncation_side: Side,
    /// Batches: where padding goes (default `Right`; `Left` for generation from a batch of prompts).
    pub padding_side: Side,
    /// Batches: true pads every row to `max_length` (> 0); false (the default): to the longest row.
    pub pad_to_max_length: bool,
    /// Batches: the width is rounded up to a multiple of this (0, the default: not rounded).
    pub pad_to_multiple_of: i64,
    /// Batches: the padding id; None (the default, -1 in C): the tokenizer's padding token, else 0.
    pub pad_id: Option<i64>,
}

impl Default for EncodeOptions {
    /// `ACCEL_ENCODE_OPTIONS_INIT`
    fn default() -> EncodeOptions {
        EncodeOptions {
            add_special_tokens: true,
            replace_invalid_utf8: false,
            max_length: 0,
            truncation_side: Side::Right,
            padding_side: Side::Right,
            pad_to_max_length: false,
            pad_to_multiple_of: 0,
            pad_id: None,
        }
    }
}

impl EncodeOptions {
    /// The raw struct: the library's defaults of this version (`accel_encode_options_init`), then every field.
    pub fn to_sys(&self) -> Result<sys::accel_encode_options> {
        let mut o = sys::ACCEL_ENCODE_OPTIONS_INIT;
        check(
            // SAFETY: `o` is a writable struct of this version (the init writes only that version's bytes).
            unsafe { sys::accel_encode_options_init(&mut o, sys::ACCEL_ENCODE_OPTIONS_VERSION) },
            std::ptr::null(),
        )?;
        o.add_special_tokens = self.add_special_tokens as i32;
        o.replace_invalid_utf8 = self.replace_invalid_utf8 as i32;
        o.max_length = self.max_length;
        o.truncation_side = self.truncation_side.to_raw();
        o.padding_side = self.padding_side.to_raw();
        o.pad_to_max_length = self.pad_to_max_length as i32;
        o.pad_to_multiple_of = self.pad_to_multiple_of;
        o.pad_id = self.pad_id.unwrap_or(-1);
        Ok(o)
    }
}

setters!(EncodeOptions {
    with_add_special_tokens add_special_tokens: bool,
    with_replace_invalid_utf8 replace_invalid_utf8: bool,
    with_max_length max_length: i64,
    with_truncation_side truncation_side: Side,
    with_padding_side padding_side: Side,
    with_pad_to_max_length pad_to_max_length: bool,
    with_pad_to_multiple_of pad_to_multiple_of: i64,
    with_pad_id pad_id: Option<i64>,
});
