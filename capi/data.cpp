// The C ABI: data loaders.
#include "capi/internal.h"

using namespace accel::capi;

extern "C" {

// ---------------------------------------------------------------------------------------
// Data

accel_status accel_dataloader_options_init(accel_dataloader_options* opts, uint32_t version) {
  return guard(nullptr, "accel_dataloader_options_init", [&] { init_options(opts, version); });
}

accel_status accel_dataloader_create(accel_context* ctx, const accel_tensor* inputs, const accel_tensor* targets,
                                     const accel_dataloader_options* opts, accel_dataloader** out) {
  return guard(ctx, "accel_dataloader_create", [&] {
    NEED(ctx);
    NEED(inputs);
    NEED(opts);
    NEED(out);
    const accel::DataLoaderConfig c = loader_config(opts);
    auto dl = std::make_shared<accel::DataLoader>(inputs->t.clone(), targets ? targets->t.clone() : torch::Tensor(), c);
    *out = new accel_dataloader{ctx, std::move(dl), torch::Tensor(), false, false};
  });
}

void accel_dataloader_destroy(accel_dataloader* loader) { delete loader; }

accel_status accel_dataloader_next(accel_context* ctx, accel_dataloader* loader, accel_tensor** out_inputs,
                                   accel_tensor** out_targets) {
  return guard(ctx, "accel_dataloader_next", [&] {
    NEED(ctx);
    NEED(loader);
    NEED(out_inputs);
    same_context(ctx, loader->ctx, "loader");
    auto b = acc_of(ctx).next_batch(*loader->impl);
    loader->last_mask = torch::Tensor();
    loader->had_batch = b.has_value();
    if (!b) {
      *out_inputs = nullptr;
      if (out_targets) *out_targets = nullptr;
      return;
    }
    loader->last_mask = b->mask;
    std::unique_ptr<accel_tensor> x(wrap(std::move(b->inputs)));
    accel_tensor* y = (out_targets && b->targets.defined()) ? wrap(std::move(b->targets)) : nullptr;
    *out_inputs = x.release();
    if (out_targets) *out_targets = y;
  });
}

accel_status accel_dataloader_attention_mask(accel_context* ctx, const accel_dataloader* loader, accel_tensor** out) {
  return guard(ctx, "accel_dataloader_attention_mask", [&] {
    NEED(ctx);
    NEED(loader);
    NEED(out);
    same_context(ctx, loader->ctx, "loader");
    ACCEL_CHECK(loader->has_masks, Status::InvalidArgument,
                "the loader's batches have no attention mask (only the causal-LM loaders pad)");
    ACCEL_CHECK(loader->had_batch && loader->last_mask.defined(), Status::InvalidState,
                "no batch: call accel_dataloader_next first (the mask is that of the batch it returned)");
    *out = wrap(loader->last_mask.clone(), ctx);
  });
}

accel_status accel_dataloader_epoch(const accel_dataloader* loader, int64_t* out) {
  return guard(nullptr, "accel_dataloader_epoch", [&] {
    NEED(loader);
    NEED(out);
    *out = loader->impl->epoch();
  });
}

accel_status accel_dataloader_num_batches(const accel_dataloader* loader, int64_t* out) {
  return guard(nullptr, "accel_dataloader_num_batches", [&] {
    NEED(loader);
    NEED(out);
    *out = loader->impl->num_batches();
  });
}

accel_status accel_dataloader_set_epoch(accel_dataloader* loader, int64_t epoch) {
  return guard(nullptr, "accel_dataloader_set_epoch", [&] {
    NEED(loader);
    loader->impl->set_epoch(epoch);
  });
}

}  // extern "C"
