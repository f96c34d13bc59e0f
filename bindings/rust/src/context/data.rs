//! Data loading: the context's methods that make loaders, [`DataLoader`], [`Batch`] and [`Batches`].

use std::path::Path;
use std::sync::Arc;

use crate::error::{check, Result};
use crate::options::{DataLoaderOptions, LmDataOptions, SftOptions};
use crate::sys;
use crate::tensor::Tensor;
use crate::tokenizer::Tokenizer;
use crate::util::path_cstring;
use super::{Context, Owned};

impl Context {
    // ---- loaders --------------------------------------------------------------------

    /// A data loader over host tensors (copied) (`accel_dataloader_create`).
    pub fn dataloader(&self, inputs: &Tensor, targets: Option<&Tensor>, opts: &DataLoaderOptions) -> Result<DataLoader<'_>> {
        let o = opts.to_sys()?;
        let mut out = std::ptr::null_mut();
        let t = targets.map_or(std::ptr::null(), |t| t.as_raw() as *const _);
        // SAFETY: a live context (`self`), live arguments borrowed for the call, local out-parameters.
        self.ck(unsafe { sys::accel_dataloader_create(self.raw.as_ptr(), inputs.as_raw(), t, &o, &mut out) })?;
        Ok(DataLoader { raw: Owned::new(out), ctx: self })
    }

    /// Causal-LM batches (`accel_lm_dataloader_create`) over a 1-D token tensor: without
    /// `offsets`, fixed blocks of `lm.block_size` tokens; with offsets ([sequences + 1]), one
    /// sequence each with dynamic padding. Batches are (input_ids, labels), labels -100 at padding,
    /// padded on `lm.padding_side`; [`DataLoader::attention_mask`] gives each batch's mask.
    pub fn lm_dataloader(
        &self,
        tokens: &Tensor,
        offsets: Option<&Tensor>,
        lm: &LmDataOptions,
        opts: &DataLoaderOptions,
    ) -> Result<DataLoader<'_>> {
        let l = lm.to_sys()?;
        let o = opts.to_sys()?;
        let mut out = std::ptr::null_mut();
        let off = offsets.map_or(std::ptr::null(), |t| t.as_raw() as *const _);
        // SAFETY: a live context (`self`), live arguments borrowed for the call, local out-parameters.
        self.ck(unsafe { sys::accel_lm_dataloader_create(self.raw.as_ptr(), tokens.as_raw(), off, &l, &o, &mut out) })?;
        Ok(DataLoader { raw: Owned::new(out), ctx: self })
    }

    /// Fine-tuning batches from a JSONL file (`accel_sft_dataloader_create`), tokenized with
    /// `tokenizer`. Each non-blank line is an object with `"messages"` (an array of
    /// `{"role", "content"}`, rendered with `sft.chat_format` as [`Tokenizer::apply_chat`]
    /// does), `"prompt"` and `"completion"` (encoded together with the tokenizer's special
    /// tokens), or `"text"`. Batches are (input_ids, labels): labels -100 on masked
    /// (the prompts, with `completion_only_loss`) and padding positions, padded to the batch's
    /// longest example on `sft.padding_side`; [`DataLoader::attention_mask`] gives the mask.
    /// Pass all three to [`Model::lm_forward`](crate::Model::lm_forward), or train with
    /// [`Context::train_micro_batches`] and `Loss::CausalLm`, which does. `opts` gives the batch
    /// size, shuffling and sharding, as for the other loaders.
    ///
    /// The examples are tokenized once, here: the loader keeps no reference to the tokenizer,
    /// which may be dropped right after.
    ///
    /// Errors: `Status::Io` for a missing file; `Status::Format` naming the file and line
    /// (`"data.jsonl:3"`) for a line that is not a JSON object, not UTF-8, or has none of the
    /// three shapes or a field of the wrong type; `Status::InvalidArgument` for a file with no
    /// example, a conversation the chat format refuses (file and line named), options out of
    /// their domain (negative `max_length` or `pad_to_multiple_of`, `packing` with `max_length`
    /// < 2, a `pad_id` outside the vocabulary), a path with a NUL byte; `Status::Unsupported`
    /// as [`Tokenizer::apply_chat`].
    pub fn sft_dataloader(
        &self,
        tokenizer: &Tokenizer,
        path: impl AsRef<Path>,
        sft: &SftOptions,
        opts: &DataLoaderOptions,
    ) -> Result<DataLoader<'_>> {
        let p = path_cstring(path.as_ref(), "path")?;
        let s = sft.to_sys()?;
        let o = opts.to_sys()?;
        let mut out = std::ptr::null_mut();
        // SAFETY: a live context (`self`) and tokenizer (only read), the C string and options
        // outlive the call, a local out-parameter.
        self.ck(unsafe {
            sys::accel_sft_dataloader_create(self.raw.as_ptr(), tokenizer.as_raw(), p.as_ptr(), &s, &o, &mut out)
        })?;
        Ok(DataLoader { raw: Owned::new(out), ctx: self })
    }
}

/// One batch: the inputs and, when the loader has them, the targets (on the context's device).
/// A causal-LM loader's batch is (input_ids, labels); its attention mask is
/// [`DataLoader::attention_mask`].
#[derive(Debug)]
pub struct Batch {
    pub inputs: Tensor,
    pub targets: Option<Tensor>,
}

/// A data loader over host data.
pub struct DataLoader<'ctx> {
    pub(super) raw: Arc<Owned<sys::accel_dataloader>>,
    ctx: &'ctx Context,
}

impl<'ctx> DataLoader<'ctx> {
    /// The raw handle (still owned by this object; do not destroy it).
    pub fn as_raw(&self) -> *mut sys::accel_dataloader {
        self.raw.ptr()
    }

    /// The context this object was created on.
    pub fn context(&self) -> &'ctx Context {
        self.ctx
    }

    /// The next batch of the epoch, or None at its end (the loader then moves to the next
    /// epoch) (`accel_dataloader_next`).
    #[allow(clippy::should_implement_trait)]
    pub fn next(&mut self) -> Result<Option<Batch>> {
        let (mut x, mut y) = (std::ptr::null_mut(), std::ptr::null_mut());
        // SAFETY: new tensors owned by the caller, or NULL (end of epoch / no targets).
        self.ctx.ck(unsafe { sys::accel_dataloader_next(self.ctx.raw.as_ptr(), self.raw.ptr(), &mut x, &mut y) })?;
        // SAFETY: on ACCEL_OK, new tensors owned by the caller, or NULL (end of epoch, no
        // targets): each wrapped once.
        let (inputs, targets) = unsafe { (Tensor::from_raw(x), Tensor::from_raw(y)) };
        Ok(inputs.map(|inputs| Batch { inputs, targets }))
    }

    /// The attention mask (int64 `[batch, T]`: 1 for a token, 0 for padding) of the batch the
    /// last [`DataLoader::next`] returned, on the context's device
    /// (`accel_dataloader_attention_mask`), for the causal-LM loaders
    /// ([`Context::lm_dataloader`], [`Context::sft_dataloader`]): `lm_forward`'s
    /// `attention_mask`.
    ///
    /// Errors: `Status::InvalidArgument` for a loader whose batches have no mask (a
    /// [`Context::dataloader`] of tensors); `Status::InvalidState` before the loader's first
    /// batch or after the end of an epoch (no batch).
    pub fn attention_mask(&self) -> Result<Tensor> {
        // SAFETY: a live context and loader (borrowed for the call; the loader is only read);
        // `out` is tensor_out's local.
        self.ctx.tensor_out(|out| unsafe { sys::accel_dataloader_attention_mask(self.ctx.raw.as_ptr(), self.raw.ptr(), out) })
    }

    /// An iterator over the rest of the current epoch: `Result<Batch>` items until the
    /// epoch ends (after an error it yields nothing more).
    pub fn epoch_iter(&mut self) -> Batches<'_, 'ctx> {
        Batches { loader: self, done: false }
    }

    /// Same as [`DataLoader::epoch_iter`].
    pub fn iter(&mut self) -> Batches<'_, 'ctx> {
        self.epoch_iter()
    }

    /// The current epoch, 0-based (`accel_dataloader_epoch`).
    pub fn epoch(&self) -> Result<i64> {
        let mut v = 0;
        // SAFETY: a live handle (`self` holds an `Arc` to it), local out-parameters.
        check(unsafe { sys::accel_dataloader_epoch(self.raw.ptr(), &mut v) }, std::ptr::null())?;
        Ok(v)
    }

    /// Batches per epoch (this process's share once prepared) (`accel_dataloader_num_batches`).
    pub fn num_batches(&self) -> Result<i64> {
        let mut v = 0;
        // SAFETY: a live handle (`self` holds an `Arc` to it), local out-parameters.
        check(unsafe { sys::accel_dataloader_num_batches(self.raw.ptr(), &mut v) }, std::ptr::null())?;
        Ok(v)
    }

    /// Sets the epoch and rewinds to its first batch (`accel_dataloader_set_epoch`).
    pub fn set_epoch(&mut self, epoch: i64) -> Result<()> {
        // SAFETY: a live handle (`self` holds an `Arc` to it), local out-parameters.
        check(unsafe { sys::accel_dataloader_set_epoch(self.raw.ptr(), epoch) }, std::ptr::null())
    }
}

/// The batches of one epoch; see [`DataLoader::epoch_iter`].
pub struct Batches<'a, 'ctx> {
    loader: &'a mut DataLoader<'ctx>,
    done: bool,
}

impl<'a, 'ctx> Iterator for Batches<'a, 'ctx> {
    type Item = Result<Batch>;
    fn next(&mut self) -> Option<Result<Batch>> {
        if self.done {
            return None;
        }
        match self.loader.next() {
            Ok(Some(b)) => Some(Ok(b)),
            Ok(None) => {
                self.done = true;
                None
            }
            Err(e) => {
                self.done = true;
                Some(Err(e))
            }
        }
    }
}
