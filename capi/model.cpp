// The C ABI: models and losses (accel.h's sections "Models" and "Losses").
#include "capi/internal.h"
#include "runtime/models/transformer.h"

using namespace accel::capi;

extern "C" {

// ---------------------------------------------------------------------------------------
// Models

accel_status accel_mlp_options_init(accel_mlp_options* opts, uint32_t version) {
  return guard(nullptr, "accel_mlp_options_init", [&] { init_options(opts, version); });
}

accel_status accel_model_create_mlp(accel_context* ctx, const accel_mlp_options* opts, accel_model** out) {
  return guard(ctx, "accel_model_create_mlp", [&] {
    NEED(ctx);
    NEED(opts);
    NEED(out);
    const accel_mlp_options o = read_options(opts);
    ACCEL_CHECK(o.num_layer_sizes == 0 || o.layer_sizes != nullptr, Status::InvalidArgument, "layer_sizes is NULL");
    const int act = raw(o.activation);
    ACCEL_CHECK(act >= ACCEL_ACT_RELU && act <= ACCEL_ACT_SIGMOID, Status::InvalidArgument,
                "activation must be an accel_activation (0..3), got ", act);
    accel::MLPConfig cfg;
    cfg.sizes.assign(o.layer_sizes, o.layer_sizes + o.num_layer_sizes);
    cfg.activation = static_cast<accel::Activation>(act);
    cfg.dropout = o.dropout;
    cfg.bias = o.bias != 0;
    auto m = accel::make_mlp(cfg, acc_of(ctx).generator());
    *out = new accel_model{ctx, std::shared_ptr<accel::Model>(std::move(m)), nullptr};
  });
}

accel_status accel_model_load_torchscript(accel_context* ctx, const char* path, accel_model** out) {
  return guard(ctx, "accel_model_load_torchscript", [&] {
    NEED(ctx);
    NEED(path);
    NEED(out);
    auto m = accel::load_torchscript(path);
    *out = new accel_model{ctx, std::shared_ptr<accel::Model>(std::move(m)), nullptr};
  });
}

void accel_model_destroy(accel_model* model) { delete model; }

accel_status accel_model_forward(accel_context* ctx, accel_model* model, accel_tensor* const* inputs,
                                 size_t num_inputs, accel_tensor** out) {
  return guard(ctx, "accel_model_forward", [&] {
    NEED(ctx);
    NEED(model);
    NEED(out);
    same_context(ctx, model->ctx, "model");
    ACCEL_CHECK(num_inputs == 0 || inputs != nullptr, Status::InvalidArgument, "inputs is NULL");
    std::vector<torch::Tensor> ins;
    ins.reserve(num_inputs);
    for (size_t i = 0; i < num_inputs; ++i) {
      ACCEL_CHECK(inputs[i] != nullptr, Status::InvalidArgument, "inputs[", i, "] is NULL");
      same_context(ctx, inputs[i]->owner, "inputs[" + std::to_string(i) + "]");
      ins.push_back(inputs[i]->t);
    }
    *out = wrap(acc_of(ctx).forward(*model->impl, ins), ctx);
  });
}

accel_status accel_model_set_training(accel_context* ctx, accel_model* model, int training) {
  return guard(ctx, "accel_model_set_training", [&] {
    NEED(ctx);
    NEED(model);
    same_context(ctx, model->ctx, "model");
    model->impl->train(training != 0);
  });
}

accel_status accel_model_num_parameters(const accel_model* model, size_t* out_tensors, int64_t* out_elements) {
  return guard(nullptr, "accel_model_num_parameters", [&] {
    NEED(model);
    ACCEL_CHECK(out_tensors || out_elements, Status::InvalidArgument, "out_tensors and out_elements are both NULL");
    if (out_tensors) *out_tensors = model->impl->parameters().size();
    if (out_elements) *out_elements = model->impl->num_elements();
  });
}

accel_status accel_model_parameter_name(const accel_model* model, size_t index, const char** out) {
  return guard(nullptr, "accel_model_parameter_name", [&] {
    NEED(model);
    NEED(out);
    const auto& names = model->impl->parameter_names();
    ACCEL_CHECK(index < names.size(), Status::InvalidArgument, "parameter index ", index, " out of range (the model has ",
                names.size(), ")");
    *out = names[index].c_str();
  });
}

accel_status accel_model_parameter(accel_context* ctx, const accel_model* model, size_t index, accel_tensor** out) {
  return guard(ctx, "accel_model_parameter", [&] {
    NEED(ctx);
    NEED(model);
    NEED(out);
    same_context(ctx, model->ctx, "model");
    const size_t n = model->impl->parameters().size();
    ACCEL_CHECK(index < n, Status::InvalidArgument, "parameter index ", index, " out of range (the model has ", n, ")");
    if (ctx->acc->shards_parameters()) {  // the shards of every process, gathered
      *out = wrap(ctx->acc->full_parameters(*model->impl)[index]);
    } else {
      *out = wrap(model->impl->parameters()[index].detach().to(torch::kCPU, /*non_blocking=*/false, /*copy=*/true));
    }
  });
}

accel_status accel_model_parameter_grad(accel_context* ctx, const accel_model* model, size_t index,
                                        accel_tensor** out) {
  return guard(ctx, "accel_model_parameter_grad", [&] {
    NEED(ctx);
    NEED(model);
    NEED(out);
    same_context(ctx, model->ctx, "model");
    *out = wrap(ctx->acc->full_gradient(*model->impl, index));
  });
}

accel_status accel_save_model(accel_context* ctx, const accel_model* model, const char* path) {
  return guard(ctx, "accel_save_model", [&] {
    NEED(ctx);
    NEED(model);
    NEED(path);
    same_context(ctx, model->ctx, "model");
    ctx->acc->save_model(*model->impl, path);
  });
}

// ---------------------------------------------------------------------------------------
// Losses

accel_status accel_loss_cross_entropy(accel_context* ctx, const accel_tensor* logits, const accel_tensor* targets,
                                      accel_tensor** out) {
  return guard(ctx, "accel_loss_cross_entropy", [&] {
    NEED(ctx);
    NEED(logits);
    NEED(targets);
    NEED(out);
    same_context(ctx, logits->owner, "logits");
    same_context(ctx, targets->owner, "targets");
    *out = wrap(accel::cross_entropy(logits->t, targets->t), ctx);
  });
}

accel_status accel_loss_mse(accel_context* ctx, const accel_tensor* input, const accel_tensor* target,
                            accel_tensor** out) {
  return guard(ctx, "accel_loss_mse", [&] {
    NEED(ctx);
    NEED(input);
    NEED(target);
    NEED(out);
    same_context(ctx, input->owner, "input");
    same_context(ctx, target->owner, "target");
    *out = wrap(accel::mse(input->t, target->t), ctx);
  });
}

}  // extern "C"
