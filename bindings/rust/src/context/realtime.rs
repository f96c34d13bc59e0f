//! Real time: inference copies, published weights and [`Context::train_micro_batches`] ([`TrainResult`]).

use crate::error::Result;
use crate::inference::Inference;
use crate::options::{InferenceOptions, Loss};
use crate::sys;
use super::{Context, DataLoader, Model};

/// What one [`Context::train_micro_batches`] call did (`accel_train_result`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TrainResult {
    /// micro-batches trained by this call
    pub micro_batches: i32,
    /// real optimizer steps taken by this call
    pub optimizer_steps: i32,
    /// fp16 steps skipped for inf/NaN gradients by this call
    pub skipped_steps: i32,
    /// the call stopped at the end of the loader's epoch (the loader has advanced: the next
    /// call starts the next epoch)
    pub epoch_ended: bool,
    /// the mean of the micro-batches' losses; NaN when none ran
    pub mean_loss: f64,
    /// the call's wall time
    pub seconds: f64,
}

impl Context {
    // ---- real time: inference beside training ----------------------------------------

    /// Makes an inference copy of `model` on the context's device (`accel_inference_create`):
    /// the same structure (the built-in MLP, a TorchScript module, a causal LM with or without
    /// LoRA adapters), in evaluation mode, without autograd. It publishes the model's current
    /// weights (as [`Context::publish_weights`]: version 1 for a model's first publication; under
    /// ZeRO every process calls it) and starts with them.
    ///
    /// The copy borrows nothing: it may outlive `model` and this context, and move to another
    /// thread (see [`Inference`]).
    ///
    /// Errors: `Status::InvalidArgument` for a model of another context or `num_threads` outside
    /// [1, 4096]; `Status::Unsupported` for a LoRA model whose base weights ZeRO shards (save it
    /// with [`Context::save_pretrained`] and load that instead).
    pub fn inference(&self, model: &Model<'_>, opts: &InferenceOptions) -> Result<Inference> {
        let o = opts.to_sys()?;
        let mut out = std::ptr::null_mut();
        // SAFETY: a live context (`self`) and model (borrowed for the call), local options and out-parameter.
        self.ck(unsafe { sys::accel_inference_create(self.raw.as_ptr(), model.raw.ptr(), &o, &mut out) })?;
        // SAFETY: on ACCEL_OK `out` is a new inference copy that belongs to the caller.
        Ok(unsafe { Inference::from_raw(out) }.expect("accel returned OK and a NULL inference copy"))
    }

    /// Publishes the model's current trained weights (fp32 masters, or the weights' own dtype
    /// for a causal LM) to every inference copy of it, and returns their version: 1 for the
    /// first publication ([`Context::inference`]'s), then 2, 3, ... (`accel_publish_weights`).
    /// Each copy's next run uses them; a run in progress finishes with the weights it started
    /// with. The weights are copied, so training goes on at once. Under ZeRO this gathers the
    /// shards: every process calls it.
    ///
    /// Errors: `Status::InvalidArgument` for a model of another context;
    /// `Status::OutOfMemory` when no weight set can be allocated (the copies keep theirs).
    pub fn publish_weights(&self, model: &Model<'_>) -> Result<u64> {
        let mut version = 0u64;
        // SAFETY: a live context (`self`) and model (borrowed for the call), a local out-parameter.
        self.ck(unsafe { sys::accel_publish_weights(self.raw.as_ptr(), model.raw.ptr(), &mut version) })?;
        Ok(version)
    }

    /// Trains at most `max_micro_batches` (>= 1) micro-batches of `loader` on the prepared
    /// model and optimizer (`accel_train_micro_batches`): for each, the next batch, the
    /// forward, the `loss`, [`Context::backward`] and [`Context::step`], exactly as a loop of
    /// those calls does (gradient accumulation, mixed precision, the strategy and the scheduler
    /// included). It stops early at the end of the loader's epoch (`epoch_ended`), and, when
    /// `max_seconds` > 0, before a micro-batch that would end past `max_seconds` after the call
    /// began, judged by the mean time of this call's micro-batches so far (at least one runs):
    /// an engine schedules training between frames this way. With several processes every
    /// process trains the same number of micro-batches, so `max_seconds` must be 0 there.
    ///
    /// Errors: those of the calls it makes (`Status::NonFinite` for a NaN loss, ...): the
    /// micro-batches before the failing one stay trained, as with the calls made one by one;
    /// `Status::InvalidState` before `prepare` bound this model and an optimizer, or with the
    /// model in evaluation mode; `Status::InvalidArgument` for `max_micro_batches` < 1, a
    /// `max_seconds` that is negative or not finite (or > 0 with several processes), a loader
    /// without targets for `Loss::Mse` or `Loss::CrossEntropy`, or `Loss::CausalLm` for a model
    /// that is not a causal LM.
    ///
    /// ```no_run
    /// use accel::{Context, DataLoaderOptions, Loss, MlpOptions, Options, SgdOptions, Tensor};
    /// # fn main() -> accel::Result<()> {
    /// let ctx = Context::new(&Options::default())?;
    /// let model = ctx.mlp(&MlpOptions::new(&[4, 2]))?;
    /// let opt = ctx.sgd(&model, &SgdOptions::default())?;
    /// let (x, y) = (Tensor::from_slice(&[0.5f32; 64], &[16, 4])?, Tensor::from_slice(&[1.0f32; 32], &[16, 2])?);
    /// let mut loader = ctx.dataloader(&x, Some(&y), &DataLoaderOptions::default().with_batch_size(4))?;
    /// ctx.prepare(Some(&model), Some(&opt), None, Some(&loader))?;
    /// // between two frames: at most 8 micro-batches, within 4 ms
    /// let r = ctx.train_micro_batches(&model, &mut loader, Loss::Mse, 8, 0.004)?;
    /// println!("{} micro-batches, mean loss {}, epoch ended: {}", r.micro_batches, r.mean_loss, r.epoch_ended);
    /// # Ok(()) }
    /// ```
    pub fn train_micro_batches(
        &self,
        model: &Model<'_>,
        loader: &mut DataLoader<'_>,
        loss: Loss,
        max_micro_batches: i32,
        max_seconds: f64,
    ) -> Result<TrainResult> {
        let mut r = sys::accel_train_result { version: sys::ACCEL_TRAIN_RESULT_VERSION, ..Default::default() };
        // SAFETY: a live context (`self`), model and loader (borrowed for the call, the loader
        // exclusively: the call advances it); `r` is a local of the version it names.
        self.ck(unsafe {
            sys::accel_train_micro_batches(
                self.raw.as_ptr(),
                model.raw.ptr(),
                loader.raw.ptr(),
                loss.to_raw(),
                max_micro_batches,
                max_seconds,
                &mut r,
            )
        })?;
        Ok(TrainResult {
            micro_batches: r.micro_batches,
            optimizer_steps: r.optimizer_steps,
            skipped_steps: r.skipped_steps,
            epoch_ended: r.epoch_ended != 0,
            mean_loss: r.mean_loss,
            seconds: r.seconds,
        })
    }
}
