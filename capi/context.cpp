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

accel_status accel_train_micro_batches(accel_context* ctx, accel_model* model, accel_dataloader* loader, accel_loss loss,
                                      int32_t max_micro_batches, double max_seconds, accel_train_result* out) {
  return guard(ctx, "accel_train_micro_batches", [&] {
    NEED(ctx);
    NEED(model);
    NEED(loader);
    same_context(ctx, model->ctx, "model");
    same_context(ctx, loader->ctx, "loader");
    const size_t out_bytes =
        out ? version_bytes<accel_train_result>(out->version, "set out->version to ACCEL_TRAIN_RESULT_VERSION") : 0;
    accel::Accelerator& acc = acc_of(ctx);
    const int kind = raw(loss);
    ACCEL_CHECK(kind >= ACCEL_LOSS_MSE && kind <= ACCEL_LOSS_CAUSAL_LM, Status::InvalidArgument,
                "loss must be an accel_loss (0..2), got ", kind);
    ACCEL_CHECK(max_micro_batches >= 1, Status::InvalidArgument, "max_micro_batches must be >= 1, got ",
                max_micro_batches);
    ACCEL_CHECK(std::isfinite(max_seconds) && max_seconds >= 0, Status::InvalidArgument,
                "max_seconds must be finite and >= 0, got ", max_seconds);
    ACCEL_CHECK(max_seconds == 0 || acc.num_processes() == 1, Status::InvalidArgument, "max_seconds must be 0 with ",
                acc.num_processes(), " processes (each must train the same number of micro-batches), got ", max_seconds);
    ACCEL_CHECK(acc.prepared(model->impl.get()) && acc.has_optimizer(), Status::InvalidState,
                "accel_prepare has not bound this model and an optimizer to the context");
    ACCEL_CHECK(model->impl->is_training(), Status::InvalidState,
                "the model is in evaluation mode (accel_model_set_training(ctx, model, 1) first)");
    const bool causal = kind == ACCEL_LOSS_CAUSAL_LM;
    ACCEL_CHECK(!causal || accel::lm_config_of(*model->impl), Status::InvalidArgument,
                "ACCEL_LOSS_CAUSAL_LM needs a causal LM (GPT-2 or Llama)");
    ACCEL_CHECK(causal || loader->impl->has_targets(), Status::InvalidArgument,
                "the loader has no targets: MSE and cross-entropy compare the model's output with them");
    const auto start = std::chrono::steady_clock::now();
    auto elapsed = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(); };
    accel_train_result r{};
    r.version = out ? out->version : ACCEL_TRAIN_RESULT_VERSION;
    double loss_sum = 0;
    for (int32_t i = 0; i < max_micro_batches; ++i) {
      if (max_seconds > 0 && i > 0 && elapsed() * (i + 1) / i > max_seconds) break;  // the next would end past it
      std::optional<accel::Batch> b = acc.next_batch(*loader->impl);
      if (!b) {
        r.epoch_ended = 1;
        break;
      }
      torch::Tensor value;
      if (causal) {
        const torch::Tensor labels = b->targets.defined() ? b->targets : b->inputs;
        torch::Tensor logits = acc.forward(*model->impl, {b->inputs});
        auto [sum, tokens] = accel::causal_lm_loss_sum(logits, labels.to(logits.device(), torch::kLong));
        value = sum / static_cast<double>(std::max<int64_t>(tokens, 1));
        acc.backward(value, tokens);
      } else {
        torch::Tensor y = acc.forward(*model->impl, {b->inputs});
        value = kind == ACCEL_LOSS_MSE ? accel::mse(y, b->targets) : accel::cross_entropy(y, b->targets);
        acc.backward(value);
      }
      const accel::StepResult s = acc.step();
      r.micro_batches += 1;
      r.optimizer_steps += s.stepped ? 1 : 0;
      r.skipped_steps += s.skipped ? 1 : 0;
      loss_sum += value.item<double>();
    }
    r.mean_loss = r.micro_batches ? loss_sum / r.micro_batches : std::nan("");
    r.seconds = elapsed();
    if (out) std::memcpy(static_cast<void*>(out), &r, out_bytes);
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

// ---------------------------------------------------------------------------------------
// Trackers

accel_status accel_tracker_options_init(accel_tracker_options* opts, uint32_t version) {
  return guard(nullptr, "accel_tracker_options_init", [&] { init_options(opts, version); });
}

accel_status accel_init_trackers(accel_context* ctx, const accel_tracker_options* opts) {
  return guard(ctx, "accel_init_trackers", [&] {
    NEED(ctx);
    NEED(opts);
    const accel_tracker_options o = read_options(opts);
    ACCEL_CHECK(!ctx->trackers_open, Status::InvalidState,
                "the trackers are already open (accel_end_training closes them)");
    ACCEL_CHECK(o.log_dir != nullptr && o.log_dir[0] != '\0', Status::InvalidArgument, "log_dir is NULL or empty");
    uint32_t writers = o.writers;
    if (writers == 0) {
      const char* with = std::getenv("ACCEL_LOG_WITH");
      writers = with && *with ? accel::tracker::parse_writers(with, "ACCEL_LOG_WITH") : accel::tracker::JsonLines;
    }
    accel::tracker::check_writers(writers);  // also on a process that writes nothing
    const int rank = ctx->acc->comm().rank();
    if (o.all_processes != 0)
      ctx->tracker = std::make_unique<accel::tracker::Tracker>(
          (std::filesystem::path(o.log_dir) / ("process-" + std::to_string(rank))).string(), writers);
    else if (rank == 0)
      ctx->tracker = std::make_unique<accel::tracker::Tracker>(o.log_dir, writers);
    ctx->trackers_open = true;
  });
}

accel_status accel_log(accel_context* ctx, int64_t step, const char* const* names, const double* values, int32_t count) {
  return guard(ctx, "accel_log", [&] {
    NEED(ctx);
    ACCEL_CHECK(ctx->trackers_open, Status::InvalidState, "no trackers are open: call accel_init_trackers first");
    NEED(names);
    NEED(values);
    ACCEL_CHECK(count >= 1, Status::InvalidArgument, "count must be >= 1, got ", count);
    ACCEL_CHECK(step >= 0, Status::InvalidArgument, "step must be >= 0, got ", step);
    std::vector<std::string> n;
    std::vector<double> v(values, values + count);
    for (int32_t i = 0; i < count; ++i) {
      ACCEL_CHECK(names[i] != nullptr, Status::InvalidArgument, "names[", i, "] is NULL");
      n.emplace_back(names[i]);
    }
    if (ctx->tracker)
      ctx->tracker->log(step, n, v);
    else  // a process that writes nothing checks the names as the writing one does
      accel::tracker::check_names(n);
  });
}

accel_status accel_end_training(accel_context* ctx) {
  return guard(ctx, "accel_end_training", [&] {
    NEED(ctx);
    ctx->trackers_open = false;
    if (!ctx->tracker) return;
    auto t = std::move(ctx->tracker);
    t->close();
  });
}
