// The C ABI: contexts (options, devices) and the training step.
#include "capi/internal.h"
#include "runtime/models/transformer.h"

#include <chrono>
#include <filesystem>

using namespace accel::capi;

extern "C" {

// ---------------------------------------------------------------------------------------
// Context

accel_status accel_options_init(accel_options* opts, uint32_t version) {
  return guard(nullptr, "accel_options_init", [&] { init_options(opts, version); });
}

accel_status accel_init(const accel_options* opts, accel_context** out) {
  return guard(nullptr, "accel_init", [&] {
    NEED(out);
    auto ctx = std::make_unique<accel_context>();
    ctx->acc = accel::world::open(runtime_options(opts));  // placed on its device, in its world
    *out = ctx.release();
  });
}

void accel_destroy(accel_context* ctx) { delete ctx; }

accel_status accel_device_kind(const accel_context* ctx, accel_device* out) {
  return guard(ctx, "accel_device_kind", [&] {
    NEED(ctx);
    NEED(out);
    *out = ctx->acc->device().is_cuda() ? ACCEL_DEVICE_CUDA : ACCEL_DEVICE_CPU;
  });
}

accel_status accel_mixed_precision(const accel_context* ctx, accel_precision* out) {
  return guard(ctx, "accel_mixed_precision", [&] {
    NEED(ctx);
    NEED(out);
    const accel::Precision p = ctx->acc->options().precision;  // never Auto: resolved at accel_init
    *out = p == accel::Precision::BF16 ? ACCEL_PRECISION_BF16 : p == accel::Precision::FP16 ? ACCEL_PRECISION_FP16 : ACCEL_PRECISION_NO;
  });
}


// ---------------------------------------------------------------------------------------
// Training

accel_status accel_prepare(accel_context* ctx, accel_model* model, accel_optimizer* optimizer,
                           accel_scheduler* scheduler, accel_dataloader* loader) {
  return guard(ctx, "accel_prepare", [&] {
    NEED(ctx);
    if (model) same_context(ctx, model->ctx, "model");
    if (optimizer) same_context(ctx, optimizer->model->ctx, "optimizer");
    if (scheduler) same_context(ctx, scheduler->ctx, "scheduler");
    if (loader) same_context(ctx, loader->ctx, "loader");
    acc_of(ctx).prepare(model ? model->impl : nullptr, optimizer ? optimizer->impl : nullptr,
                        scheduler ? scheduler->impl : nullptr, loader ? loader->impl : nullptr);
  });
}

accel_status accel_backward(accel_context* ctx, const accel_tensor* loss) {
  return guard(ctx, "accel_backward", [&] {
    NEED(ctx);
    NEED(loss);
    same_context(ctx, loss->owner, "loss");
    ACCEL_CHECK(!loss->backpropagated, Status::InvalidState,
                "the loss was already backpropagated (accel_backward runs once per loss: compute a new one)");
    acc_of(ctx).backward(loss->t, loss->tokens);
    loss->backpropagated = true;
  });
}

accel_status accel_sync_gradients(const accel_context* ctx, int* out) {
  return guard(ctx, "accel_sync_gradients", [&] {
    NEED(ctx);
    NEED(out);
    *out = ctx->acc->sync_gradients() ? 1 : 0;
  });
}

accel_status accel_clip_grad_norm(accel_context* ctx, double max_norm, double* out) {
  return guard(ctx, "accel_clip_grad_norm", [&] {
    NEED(ctx);
    double norm = acc_of(ctx).clip_grad_norm(max_norm);
    if (out) *out = norm;
  });
}

accel_status accel_step(accel_context* ctx, accel_step_result* out) {
  return guard(ctx, "accel_step", [&] {
    NEED(ctx);
    auto r = acc_of(ctx).step();
    if (out) {
      out->stepped = r.stepped;
      out->skipped = r.skipped;
      out->sync_step = r.sync_step;
      out->loss_scale = r.loss_scale;
      out->optimizer_steps = r.optimizer_steps;
      out->micro_steps = r.micro_steps;
    }
  });
}

accel_status accel_loss_scale(const accel_context* ctx, double* out) {
  return guard(ctx, "accel_loss_scale", [&] {
    NEED(ctx);
    NEED(out);
    *out = ctx->acc->loss_scale();
  });
}

}  // extern "C"
