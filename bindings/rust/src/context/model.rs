//! Models and losses: the context's methods that make models and compute losses, and [`Model`].

use std::os::raw::{c_char, c_int};
use std::path::Path;
use std::sync::Arc;

use crate::error::{check, Result};
use crate::options::{GenerateOptions, LmOptions, LoraOptions, MlpOptions};
use crate::sys;
use crate::tensor::Tensor;
use crate::util::{owned_string, path_cstring};
use super::{Context, Owned};

impl Context {
    // ---- models ---------------------------------------------------------------------

    /// The built-in MLP (`accel_model_create_mlp`).
    pub fn mlp(&self, opts: &MlpOptions) -> Result<Model<'_>> {
        let o = opts.to_sys()?;
        let mut out = std::ptr::null_mut();
        // SAFETY: a live context (`self`), live arguments borrowed for the call, local out-parameters.
        self.ck(unsafe { sys::accel_model_create_mlp(self.raw.as_ptr(), &o, &mut out) })?;
        Ok(Model { raw: Owned::new(out), ctx: self })
    }

    /// A TorchScript module (`accel_model_load_torchscript`).
    pub fn load_torchscript(&self, path: impl AsRef<Path>) -> Result<Model<'_>> {
        let p = path_cstring(path.as_ref(), "path")?;
        let mut out = std::ptr::null_mut();
        // SAFETY: the context and the handles passed are live (borrowed for the call); the C strings outlive the call.
        self.ck(unsafe { sys::accel_model_load_torchscript(self.raw.as_ptr(), p.as_ptr(), &mut out) })?;
        Ok(Model { raw: Owned::new(out), ctx: self })
    }

    /// A GPT-2 or Llama causal LM from a Hugging Face directory: config.json and
    /// model.safetensors or a sharded index (`accel_model_load_pretrained`).
    pub fn load_pretrained(&self, dir: impl AsRef<Path>, opts: &LmOptions) -> Result<Model<'_>> {
        let p = path_cstring(dir.as_ref(), "dir")?;
        let o = opts.to_sys()?;
        let mut out = std::ptr::null_mut();
        // SAFETY: a live context (`self`), the C string and options outlive the call, local out-parameter.
        self.ck(unsafe { sys::accel_model_load_pretrained(self.raw.as_ptr(), p.as_ptr(), &o, &mut out) })?;
        Ok(Model { raw: Owned::new(out), ctx: self })
    }

    /// A causal LM with random weights from a config.json (the file or its directory), drawn
    /// from the context's seed as transformers initialises them (`accel_model_create_lm`).
    pub fn create_lm(&self, config: impl AsRef<Path>, opts: &LmOptions) -> Result<Model<'_>> {
        let p = path_cstring(config.as_ref(), "config")?;
        let o = opts.to_sys()?;
        let mut out = std::ptr::null_mut();
        // SAFETY: a live context (`self`), the C string and options outlive the call, local out-parameter.
        self.ck(unsafe { sys::accel_model_create_lm(self.raw.as_ptr(), p.as_ptr(), &o, &mut out) })?;
        Ok(Model { raw: Owned::new(out), ctx: self })
    }

    /// Writes a causal LM as a Hugging Face directory that transformers loads
    /// (`accel_save_pretrained`; a collective under several processes).
    pub fn save_pretrained(&self, model: &Model<'_>, dir: impl AsRef<Path>) -> Result<()> {
        let p = path_cstring(dir.as_ref(), "dir")?;
        // SAFETY: the context and the handles passed are live (borrowed for the call); the C strings outlive the call.
        self.ck(unsafe { sys::accel_save_pretrained(self.raw.as_ptr(), model.raw.ptr(), p.as_ptr()) })
    }

    /// Writes the model's weights (`accel_save_model`): safetensors, or TorchScript for a
    /// `.pt` path and a TorchScript model.
    pub fn save_model(&self, model: &Model<'_>, path: impl AsRef<Path>) -> Result<()> {
        let p = path_cstring(path.as_ref(), "path")?;
        // SAFETY: the context and the handles passed are live (borrowed for the call); the C strings outlive the call.
        self.ck(unsafe { sys::accel_save_model(self.raw.as_ptr(), model.raw.ptr(), p.as_ptr()) })
    }

    // ---- losses ---------------------------------------------------------------------

    /// Mean cross-entropy (`accel_loss_cross_entropy`): logits [batch, classes], int64 or
    /// int32 targets \[batch\]. A new scalar tensor.
    pub fn cross_entropy(&self, logits: &Tensor, targets: &Tensor) -> Result<Tensor> {
        // SAFETY: a live context (`self`), live arguments borrowed for the call; `out` is tensor_out's local.
        self.tensor_out(|out| unsafe {
            sys::accel_loss_cross_entropy(self.raw.as_ptr(), logits.as_raw(), targets.as_raw(), out)
        })
    }

    /// Mean squared error (`accel_loss_mse`).
    pub fn mse(&self, input: &Tensor, target: &Tensor) -> Result<Tensor> {
        // SAFETY: a live context (`self`), live arguments borrowed for the call; `out` is tensor_out's local.
        self.tensor_out(|out| unsafe { sys::accel_loss_mse(self.raw.as_ptr(), input.as_raw(), target.as_raw(), out) })
    }
}

/// A model (MLP or TorchScript), usable only while its context lives.
pub struct Model<'ctx> {
    pub(super) raw: Arc<Owned<sys::accel_model>>,
    ctx: &'ctx Context,
}

impl<'ctx> Model<'ctx> {
    /// The raw handle.
    pub fn as_raw(&self) -> *mut sys::accel_model {
        self.raw.ptr()
    }

    /// The context this model was created on.
    pub fn context(&self) -> &'ctx Context {
        self.ctx
    }

    /// Forward on several inputs (`accel_model_forward`; the inputs are borrowed).
    pub fn forward(&self, inputs: &[&Tensor]) -> Result<Tensor> {
        let ptrs: Vec<*mut sys::accel_tensor> = inputs.iter().map(|t| t.as_raw()).collect();
        // SAFETY: a live context (`self`), live arguments borrowed for the call; `out` is tensor_out's local.
        self.ctx.tensor_out(|out| unsafe {
            sys::accel_model_forward(self.ctx.raw.as_ptr(), self.raw.ptr(), ptrs.as_ptr(), ptrs.len(), out)
        })
    }

    /// Forward on one input.
    pub fn forward1(&self, input: &Tensor) -> Result<Tensor> {
        let p = input.as_raw();
        self.ctx
            // SAFETY: a live context (`self`), live arguments borrowed for the call; `out` is tensor_out's local.
            .tensor_out(|out| unsafe { sys::accel_model_forward(self.ctx.raw.as_ptr(), self.raw.ptr(), &p, 1, out) })
    }

    /// Training (true) or evaluation (false) mode (`accel_model_set_training`).
    pub fn set_training(&self, training: bool) -> Result<()> {
        self.ctx
            // SAFETY: a live context (borrowed for 'ctx), live handle and arguments, local out-parameters.
            .ck(unsafe { sys::accel_model_set_training(self.ctx.raw.as_ptr(), self.raw.ptr(), training as c_int) })
    }

    /// (parameter tensors, scalar parameters) (`accel_model_num_parameters`).
    pub fn num_parameters(&self) -> Result<(usize, i64)> {
        let (mut t, mut e) = (0usize, 0i64);
        // SAFETY: a live handle (`self` holds an `Arc` to it), local out-parameters.
        check(unsafe { sys::accel_model_num_parameters(self.raw.ptr(), &mut t, &mut e) }, std::ptr::null())?;
        Ok((t, e))
    }

    /// The name of parameter `index`, e.g. "layers.0.weight" (`accel_model_parameter_name`).
    pub fn parameter_name(&self, index: usize) -> Result<String> {
        let mut p: *const c_char = std::ptr::null();
        // SAFETY: on ACCEL_OK `p` is the model's NUL-terminated string; it is copied at once.
        check(unsafe { sys::accel_model_parameter_name(self.raw.ptr(), index, &mut p) }, std::ptr::null())?;
        // SAFETY: `p` is the model's string (or NULL), copied at once while `self` keeps it alive.
        Ok(unsafe { owned_string(p) })
    }

    /// Every parameter name, in order.
    pub fn parameter_names(&self) -> Result<Vec<String>> {
        (0..self.num_parameters()?.0).map(|i| self.parameter_name(i)).collect()
    }

    /// A host copy of parameter `index` (fp32) (`accel_model_parameter`; a collective under ZeRO).
    pub fn parameter(&self, index: usize) -> Result<Tensor> {
        self.ctx
            // SAFETY: a live context (`self`), live arguments borrowed for the call; `out` is tensor_out's local.
            .tensor_out(|out| unsafe { sys::accel_model_parameter(self.ctx.raw.as_ptr(), self.raw.ptr(), index, out) })
    }

    /// A host copy of parameter `index`'s gradient (fp32) as the next step will apply it
    /// (`accel_model_parameter_grad`: unscaled, averaged over the processes; a collective under
    /// ZeRO). Read it after the accumulation's last backward and before the step.
    pub fn parameter_grad(&self, index: usize) -> Result<Tensor> {
        self.ctx
            // SAFETY: a live context (`self`), live arguments borrowed for the call; `out` is tensor_out's local.
            .tensor_out(|out| unsafe { sys::accel_model_parameter_grad(self.ctx.raw.as_ptr(), self.raw.ptr(), index, out) })
    }

    /// Writes the weights (`accel_save_model`), see [`Context::save_model`].
    pub fn save(&self, path: impl AsRef<Path>) -> Result<()> {
        self.ctx.save_model(self, path)
    }

    /// A causal LM's forward and loss (`accel_lm_forward`). `labels` (usually input_ids with
    /// -100 where padded; shifted inside, as in transformers) gives the loss: the mean over the
    /// real targets, a token mean for `Context::backward` (the step's gradients are those of the
    /// mean over every real target of the global batch).
    pub fn lm_forward(&self, input_ids: &Tensor, attention_mask: Option<&Tensor>, labels: Option<&Tensor>)
        -> Result<CausalLmOutput> {
        let mut logits = std::ptr::null_mut();
        let mut loss = std::ptr::null_mut();
        let mut tokens = 0i64;
        let raw = |t: Option<&Tensor>| t.map_or(std::ptr::null(), |t| t.as_raw() as *const sys::accel_tensor);
        let want_loss = labels.is_some();
        // SAFETY: a live context (`self`), live tensors borrowed for the call, local out-parameters.
        self.ctx.ck(unsafe {
            sys::accel_lm_forward(
                self.ctx.raw.as_ptr(),
                self.raw.ptr(),
                input_ids.as_raw(),
                raw(attention_mask),
                raw(labels),
                &mut logits,
                if want_loss { &mut loss } else { std::ptr::null_mut() },
                if want_loss { &mut tokens } else { std::ptr::null_mut() },
            )
        })?;
        // SAFETY: on ACCEL_OK the out-parameters asked for are new tensors that belong to the caller.
        let logits = unsafe { Tensor::from_raw(logits) }.expect("accel returned OK and NULL logits");
        let loss = if want_loss { unsafe { Tensor::from_raw(loss) } } else { None };
        Ok(CausalLmOutput { loss, logits, num_tokens: tokens })
    }

    /// Continues the prompts `input_ids` ([batch, seq], int64, no padding) (`accel_lm_generate`):
    /// the prompts followed by the new tokens. Switch to evaluation mode first (dropout). A batch
    /// of prompts of different lengths: [`Model::generate_padded`].
    pub fn generate(&self, input_ids: &Tensor, opts: &GenerateOptions) -> Result<Tensor> {
        let o = opts.to_sys()?;
        // SAFETY: a live context and model (borrowed for the call), a live tensor; `out` is tensor_out's local.
        self.ctx.tensor_out(|out| unsafe {
            sys::accel_lm_generate(self.ctx.raw.as_ptr(), self.raw.ptr(), input_ids.as_raw(), &o, out)
        })
    }

    /// Continues a padded batch of prompts (`accel_lm_generate_padded`): `input_ids` (int64
    /// `[batch, seq]`) with `attention_mask` (`[batch, seq]`, int64 or int32: 1 for a
    /// token, 0 for padding), the padding on the left of each row, as
    /// [`Tokenizer::encode_batch`](crate::Tokenizer::encode_batch) makes them with
    /// `padding_side: Side::Left`. Each row's positions count its own tokens, so every row
    /// continues as its prompt alone would (transformers' `generate` with an attention mask).
    /// Returns int64 `[batch, seq + n]`: the padded prompts, then the new tokens. Switch to
    /// evaluation mode first (dropout).
    ///
    /// Errors: as [`Model::generate`]'s; also `Status::InvalidArgument` for a mask of another
    /// shape or dtype, a row without tokens, or padding after a token (right padding).
    pub fn generate_padded(&self, input_ids: &Tensor, attention_mask: &Tensor, opts: &GenerateOptions) -> Result<Tensor> {
        let o = opts.to_sys()?;
        // SAFETY: a live context and model (borrowed for the call), live tensors; `out` is tensor_out's local.
        self.ctx.tensor_out(|out| unsafe {
            sys::accel_lm_generate_padded(
                self.ctx.raw.as_ptr(),
                self.raw.ptr(),
                input_ids.as_raw(),
                attention_mask.as_raw(),
                &o,
                out,
            )
        })
    }

    /// Adds LoRA adapters (`accel_model_add_lora`): the base weights freeze and the model's
    /// parameters become the adapters. Before creating the optimizer and before `prepare`.
    pub fn add_lora(&self, opts: &LoraOptions) -> Result<()> {
        let (o, _names) = opts.to_sys()?;
        // SAFETY: a live context and model (borrowed for the call); `o` and the names it points to outlive it.
        self.ctx.ck(unsafe { sys::accel_model_add_lora(self.ctx.raw.as_ptr(), self.raw.ptr(), &o) })
    }

    /// Loads a PEFT LoRA adapter directory onto this base model (`accel_model_load_adapter`).
    pub fn load_adapter(&self, dir: impl AsRef<Path>) -> Result<()> {
        let p = path_cstring(dir.as_ref(), "dir")?;
        // SAFETY: a live context and model (borrowed for the call); the C string outlives it.
        self.ctx.ck(unsafe { sys::accel_model_load_adapter(self.ctx.raw.as_ptr(), self.raw.ptr(), p.as_ptr()) })
    }

    /// Writes the adapters as a PEFT adapter directory (`accel_save_adapter`; a collective).
    pub fn save_adapter(&self, dir: impl AsRef<Path>) -> Result<()> {
        let p = path_cstring(dir.as_ref(), "dir")?;
        // SAFETY: a live context and model (borrowed for the call); the C string outlives it.
        self.ctx.ck(unsafe { sys::accel_save_adapter(self.ctx.raw.as_ptr(), self.raw.ptr(), p.as_ptr()) })
    }

    /// Writes a causal LM as a Hugging Face directory (`Context::save_pretrained`).
    pub fn save_pretrained(&self, dir: impl AsRef<Path>) -> Result<()> {
        self.ctx.save_pretrained(self, dir)
    }
}

/// What `Model::lm_forward` returns (transformers' CausalLMOutput fields).
pub struct CausalLmOutput {
    /// The mean loss over the real targets (None without labels).
    pub loss: Option<Tensor>,
    /// The logits, fp32 [batch, seq, vocab].
    pub logits: Tensor,
    /// The real targets the loss averages (0 without labels).
    pub num_tokens: i64,
}
