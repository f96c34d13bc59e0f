//! The data loaders' options.

use crate::error::{check, Result};
use crate::sys;
use super::enums::{ChatFormat, Side};

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

setters!(DataLoaderOptions {
    with_batch_size batch_size: i64,
    with_shuffle shuffle: bool,
    with_seed seed: u64,
    with_drop_last drop_last: bool,
    with_even_batches even_batches: bool,
    with_split_batches split_batches: bool,
    with_iterable iterable: bool,
});

/// `accel_lm_data_options` (version 2): how a causal-LM loader makes samples and pads them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
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
    /// Where a batch's padding goes (default `Right`). With `Left`, pass
    /// [`DataLoader::attention_mask`](crate::DataLoader::attention_mask) to
    /// [`Model::lm_forward`](crate::Model::lm_forward).
    pub padding_side: Side,
}

impl Default for LmDataOptions {
    /// `ACCEL_LM_DATA_OPTIONS_INIT`
    fn default() -> LmDataOptions {
        LmDataOptions {
            block_size: 0,
            max_length: 0,
            pad_id: 0,
            pad_to_multiple_of: 0,
            group_by_length: false,
            padding_side: Side::Right,
        }
    }
}

impl LmDataOptions {
    /// The raw struct: the library's defaults of this version (`accel_lm_data_options_init`), then every field.
    pub fn to_sys(&self) -> Result<sys::accel_lm_data_options> {
        let mut o = sys::ACCEL_LM_DATA_OPTIONS_INIT;
        // SAFETY: `o` is a writable struct of this version (the init writes only that version's bytes).
        check(unsafe { sys::accel_lm_data_options_init(&mut o, sys::ACCEL_LM_DATA_OPTIONS_VERSION) }, std::ptr::null())?;
        o.block_size = self.block_size;
        o.max_length = self.max_length;
        o.pad_id = self.pad_id;
        o.pad_to_multiple_of = self.pad_to_multiple_of;
        o.group_by_length = self.group_by_length as i32;
        o.padding_side = self.padding_side.to_raw();
        Ok(o)
    }
}

setters!(LmDataOptions {
    with_block_size block_size: i64,
    with_max_length max_length: i64,
    with_pad_id pad_id: i64,
    with_pad_to_multiple_of pad_to_multiple_of: i64,
    with_group_by_length group_by_length: bool,
    with_padding_side padding_side: Side,
});

/// `accel_sft_options`: how [`Context::sft_dataloader`](crate::Context::sft_dataloader) makes
/// fine-tuning examples from a JSONL file and pads them. The library checks the values
/// (`Status::InvalidArgument` naming the field).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct SftOptions {
    /// The chat format of `"messages"` lines (default `ChatFormat::Auto`: the tokenizer's
    /// `chat_template`).
    pub chat_format: ChatFormat,
    /// true (the default): labels only on the completion of a prompt/completion line and on the
    /// assistant turns of a conversation (their end-of-turn token included), -100 elsewhere;
    /// false: labels on every token.
    pub completion_only_loss: bool,
    /// true (the default): `"text"` and prompt/completion lines end with the EOS token
    /// (conversations: the template's end of turn).
    pub add_eos: bool,
    /// Each example cut to this many tokens (the end dropped), when positive; with `packing`,
    /// the length of a block. 0 (the default): whole examples.
    pub max_length: i64,
    /// The examples concatenated and cut into blocks of `max_length` tokens (attention crosses
    /// example boundaries, as TRL's packing without position resets). Default false.
    pub packing: bool,
    /// Where a batch's padding goes (default `Right`).
    pub padding_side: Side,
    /// The batch's width rounded up to a multiple of this (0, the default: the longest example).
    pub pad_to_multiple_of: i64,
    /// The padding id; None (the default, -1 in C): the tokenizer's padding token, else its
    /// EOS, else 0.
    pub pad_id: Option<i64>,
}

impl Default for SftOptions {
    /// `ACCEL_SFT_OPTIONS_INIT`
    fn default() -> SftOptions {
        SftOptions {
            chat_format: ChatFormat::Auto,
            completion_only_loss: true,
            add_eos: true,
            max_length: 0,
            packing: false,
            padding_side: Side::Right,
            pad_to_multiple_of: 0,
            pad_id: None,
        }
    }
}

impl SftOptions {
    /// The raw struct: the library's defaults of this version (`accel_sft_options_init`), then every field.
    pub fn to_sys(&self) -> Result<sys::accel_sft_options> {
        let mut o = sys::ACCEL_SFT_OPTIONS_INIT;
        // SAFETY: `o` is a writable struct of this version (the init writes only that version's bytes).
        check(unsafe { sys::accel_sft_options_init(&mut o, sys::ACCEL_SFT_OPTIONS_VERSION) }, std::ptr::null())?;
        o.chat_format = self.chat_format.to_raw();
        o.completion_only_loss = self.completion_only_loss as i32;
        o.add_eos = self.add_eos as i32;
        o.max_length = self.max_length;
        o.packing = self.packing as i32;
        o.padding_side = self.padding_side.to_raw();
        o.pad_to_multiple_of = self.pad_to_multiple_of;
        o.pad_id = self.pad_id.unwrap_or(-1);
        Ok(o)
    }
}

setters!(SftOptions {
    with_chat_format chat_format: ChatFormat,
    with_completion_only_loss completion_only_loss: bool,
    with_add_eos add_eos: bool,
    with_max_length max_length: i64,
    with_packing packing: bool,
    with_padding_side padding_side: Side,
    with_pad_to_multiple_of pad_to_multiple_of: i64,
    with_pad_id pad_id: Option<i64>,
});
