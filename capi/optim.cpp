// The C ABI: optimizers and learning-rate schedules.
#include "capi/internal.h"

using namespace accel::capi;

extern "C" {

// ---------------------------------------------------------------------------------------
// Optimizers and schedulers

accel_status accel_sgd_options_init(accel_sgd_options* opts, uint32_t version) {
  return guard(nullptr, "accel_sgd_options_init", [&] { init_options(opts, version); });
}

accel_status accel_adamw_options_init(accel_adamw_options* opts, uint32_t version) {
  return guard(nullptr, "accel_adamw_options_init", [&] { init_options(opts, version); });
}

accel_status accel_optimizer_create_sgd(accel_context* ctx, accel_model* model, const accel_sgd_options* opts,
                                        accel_optimizer** out) {
  return guard(ctx, "accel_optimizer_create_sgd", [&] {
    NEED(ctx);
    NEED(model);
    NEED(out);
    same_context(ctx, model->ctx, "model");
    const accel_sgd_options o = read_options(opts);
    accel::SGDConfig c{o.lr, o.momentum, o.dampening, o.weight_decay, o.nesterov != 0};
    *out = new accel_optimizer{model, std::make_shared<accel::Optimizer>(model->impl, c)};
  });
}

accel_status accel_optimizer_create_adamw(accel_context* ctx, accel_model* model, const accel_adamw_options* opts,
                                          accel_optimizer** out) {
  return guard(ctx, "accel_optimizer_create_adamw", [&] {
    NEED(ctx);
    NEED(model);
    NEED(out);
    same_context(ctx, model->ctx, "model");
    const accel_adamw_options o = read_options(opts);
    accel::AdamWConfig c{o.lr, o.beta1, o.beta2, o.eps, o.weight_decay};
    *out = new accel_optimizer{model, std::make_shared<accel::Optimizer>(model->impl, c)};
  });
}

accel_status accel_lamb_options_init(accel_lamb_options* opts, uint32_t version) {
  return guard(nullptr, "accel_lamb_options_init", [&] { init_options(opts, version); });
}

accel_status accel_optimizer_create_lamb(accel_context* ctx, accel_model* model, const accel_lamb_options* opts,
                                         accel_optimizer** out) {
  return guard(ctx, "accel_optimizer_create_lamb", [&] {
    NEED(ctx);
    NEED(model);
    NEED(out);
    same_context(ctx, model->ctx, "model");
    const accel_lamb_options o = read_options(opts);
    accel::LAMBConfig c{o.lr, o.beta1, o.beta2, o.eps, o.weight_decay};
    *out = new accel_optimizer{model, std::make_shared<accel::Optimizer>(model->impl, c)};
  });
}

accel_status accel_adafactor_options_init(accel_adafactor_options* opts, uint32_t version) {
  return guard(nullptr, "accel_adafactor_options_init", [&] { init_options(opts, version); });
}

accel_status accel_optimizer_create_adafactor(accel_context* ctx, accel_model* model,
                                              const accel_adafactor_options* opts, accel_optimizer** out) {
  return guard(ctx, "accel_optimizer_create_adafactor", [&] {
    NEED(ctx);
    NEED(model);
    NEED(out);
    same_context(ctx, model->ctx, "model");
    const accel_adafactor_options o = read_options(opts);
    accel::AdafactorConfig c;
    c.lr = o.lr;
    c.eps1 = o.eps1;
    c.eps2 = o.eps2;
    c.clip_threshold = o.clip_threshold;
    c.decay_rate = o.decay_rate;
    c.beta1 = o.beta1;
    c.weight_decay = o.weight_decay;
    c.scale_parameter = o.scale_parameter != 0;
    c.relative_step = o.relative_step != 0;
    c.warmup_init = o.warmup_init != 0;
    *out = new accel_optimizer{model, std::make_shared<accel::Optimizer>(model->impl, c)};
  });
}

void accel_optimizer_destroy(accel_optimizer* optimizer) { delete optimizer; }

accel_status accel_optimizer_lr(const accel_optimizer* optimizer, double* out) {
  return guard(nullptr, "accel_optimizer_lr", [&] {
    NEED(optimizer);
    NEED(out);
    *out = optimizer->impl->lr();
  });
}

accel_status accel_scheduler_options_init(accel_scheduler_options* opts, uint32_t version) {
  return guard(nullptr, "accel_scheduler_options_init", [&] { init_options(opts, version); });
}

accel_status accel_scheduler_create(accel_context* ctx, accel_optimizer* optimizer, const accel_scheduler_options* opts,
                                    accel_scheduler** out) {
  return guard(ctx, "accel_scheduler_create", [&] {
    NEED(ctx);
    NEED(optimizer);
    NEED(opts);
    NEED(out);
    const accel_scheduler_options o = read_options(opts);
    same_context(ctx, optimizer->model->ctx, "optimizer");
    accel::SchedulerConfig c{static_cast<accel::Schedule>(raw(o.kind)), o.warmup_steps, o.total_steps, o.min_lr_ratio};
    *out = new accel_scheduler{ctx, std::make_shared<accel::Scheduler>(optimizer->impl, c)};
  });
}

void accel_scheduler_destroy(accel_scheduler* scheduler) { delete scheduler; }

accel_status accel_scheduler_steps(const accel_scheduler* scheduler, int64_t* out) {
  return guard(nullptr, "accel_scheduler_steps", [&] {
    NEED(scheduler);
    NEED(out);
    *out = scheduler->impl->steps();
  });
}

}  // extern "C"
