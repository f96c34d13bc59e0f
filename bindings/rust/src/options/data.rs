//! The data loaders' options.

use crate::error::{check, Result};
use crate::sys;

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

/// `accel_lm_data_options`: how a causal-LM loader makes samples and pads them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
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
}

impl LmDataOptions {
    /// The raw struct.
    pub fn to_sys(&self) -> Result<sys::accel_lm_data_options> {
        let mut o = sys::ACCEL_LM_DATA_OPTIONS_INIT;
        // SAFETY: `o` is a writable struct of this version (the init writes only that version's bytes).
        check(unsafe { sys::accel_lm_data_options_init(&mut o, sys::ACCEL_LM_DATA_OPTIONS_VERSION) }, std::ptr::null())?;
        o.block_size = self.block_size;
        o.max_length = self.max_length;
        o.pad_id = self.pad_id;
        o.pad_to_multiple_of = self.pad_to_multiple_of;
        o.group_by_length = self.group_by_length as i32;
        Ok(o)
    }
}

setters!(LmDataOptions {
    with_block_size block_size: i64,
    with_max_length max_length: i64,
    with_pad_id pad_id: i64,
    with_pad_to_multiple_of pad_to_multiple_of: i64,
    with_group_by_length group_by_length: bool,
});
