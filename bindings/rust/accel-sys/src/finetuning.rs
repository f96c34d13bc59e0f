//! `include/accel/accel.h`: Fine-tuning data (supervised fine-tuning).

use std::os::raw::c_char;

use crate::{
    ACCEL_CHAT_AUTO, ACCEL_SIDE_RIGHT, accel_chat_format, accel_context, accel_dataloader, accel_dataloader_options,
    accel_generate_options, accel_model, accel_side, accel_status, accel_tensor, accel_tokenizer,
};

// ---- Fine-tuning data ----------------------------------------------------------------

pub const ACCEL_SFT_OPTIONS_VERSION: u32 = 1;

/// How `accel_sft_dataloader_create` makes fine-tuning examples and pads them (see the header
/// for each field).
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct accel_sft_options {
    pub version: u32,
    pub chat_format: accel_chat_format,
    pub completion_only_loss: i32,
    pub add_eos: i32,
    pub max_length: i64,
    pub packing: i32,
    pub padding_side: accel_side,
    pub pad_to_multiple_of: i64,
    pub pad_id: i64,
}

/// `ACCEL_SFT_OPTIONS_INIT`
pub const ACCEL_SFT_OPTIONS_INIT: accel_sft_options = accel_sft_options {
    version: ACCEL_SFT_OPTIONS_VERSION,
    chat_format: ACCEL_CHAT_AUTO,
    completion_only_loss: 1,
    add_eos: 1,
    max_length: 0,
    packing: 0,
    padding_side: ACCEL_SIDE_RIGHT,
    pad_to_multiple_of: 0,
    pad_id: -1,
};

extern "C" {
    pub fn accel_sft_options_init(opts: *mut accel_sft_options, version: u32) -> accel_status;
    pub fn accel_sft_dataloader_create(
        ctx: *mut accel_context,
        tokenizer: *const accel_tokenizer,
        path: *const c_char,
        sft_opts: *const accel_sft_options,
        loader_opts: *const accel_dataloader_options,
        out: *mut *mut accel_dataloader,
    ) -> accel_status;
    pub fn accel_dataloader_attention_mask(
        ctx: *mut accel_context,
        loader: *const accel_dataloader,
        out: *mut *mut accel_tensor,
    ) -> accel_status;
    pub fn accel_lm_generate_padded(
        ctx: *mut accel_context,
        model: *mut accel_model,
        input_ids: *const accel_tensor,
        attention_mask: *const accel_tensor,
        opts: *const accel_generate_options,
        out: *mut *mut accel_tensor,
    ) -> accel_status;
}
