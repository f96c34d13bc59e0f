// The C ABI: real time (accel.h's section "Real time"): inference copies beside training,
// published weights, the bounded training call.
#include "capi/internal.h"
#include "runtime/models/transformer.h"

using namespace accel::capi;

extern "C" {

// ---------------------------------------------------------------------------------------
// Inference beside training

namespace {

// What a publication copies: the parameters whole (gathered under ZeRO), then the buffers,
// each in the dtype the inference copy runs in (fp32; a causal LM's base weights in theirs).
void publish(accel_context* ctx, const accel_model* model, uint64_t* version) {
  accel::Accelerator& acc = acc_of(ctx);
  const accel::Model& m = *model->impl;
  std::vector<torch::Tensor> src = acc.shards_parameters() && acc.prepared(&m) ? acc.full_parameters(m) : m.parameters();
  std::vector<c10::ScalarType> dtypes(src.size(), torch::kFloat);
  if (const auto* lm = m.as_lm(); lm && !lm->lora())
    dtypes.assign(src.size(), lm->weights_dtype());
  for (const auto& b : m.buffers()) {
    src.push_back(b);
    dtypes.push_back(b.scalar_type());
  }
  if (!model->published) model->published = std::make_shared<accel::WeightChannel>();  // at its first publication
  const uint64_t v = model->published->publish(src, dtypes, acc.device());
  if (version) *version = v;
}

}  // namespace

accel_status accel_inference_options_init(accel_inference_options* opts, uint32_t version) {
  return guard(nullptr, "accel_inference_options_init", [&] { init_options(opts, version); });
}

accel_status accel_inference_create(accel_context* ctx, const accel_model* model, const accel_inference_options* opts,
                                    accel_inference** out) {
  return guard(ctx, "accel_inference_create", [&] {
    NEED(ctx);
    NEED(model);
    NEED(out);
    same_context(ctx, model->ctx, "model");
    const accel_inference_options o = read_options(opts);
    ACCEL_CHECK(o.num_threads >= 1 && o.num_threads <= 4096, Status::InvalidArgument,
                "num_threads must be in [1, 4096], got ", o.num_threads);
    const auto* lm = std::as_const(*model->impl).as_lm();
    ACCEL_CHECK(!(lm && lm->lora() && ctx->acc->shards_parameters() && ctx->acc->prepared(lm)), Status::Unsupported,
                "the model's LoRA base weights are sharded by ZeRO: save it with accel_save_pretrained and make the "
                "inference copy from that");
    std::unique_ptr<accel::Model> copy = model->impl->clone();
    publish(ctx, model, nullptr);
    auto inf = std::make_unique<accel_inference>();
    inf->impl = std::make_unique<accel::Inference>(std::move(copy), model->published, ctx->acc->device(), o.num_threads);
    *out = inf.release();
  });
}

void accel_inference_destroy(accel_inference* inference) { delete inference; }

accel_status accel_publish_weights(accel_context* ctx, const accel_model* model, uint64_t* out) {
  return guard(ctx, "accel_publish_weights", [&] {
    NEED(ctx);
    NEED(model);
    same_context(ctx, model->ctx, "model");
    publish(ctx, model, out);
  });
}

accel_status accel_inference_run(accel_inference* inference, accel_tensor* const* inputs, size_t num_inputs,
                                 accel_tensor** out) {
  return guard(nullptr, "accel_inference_run", [&] {
    NEED(inference);
    NEED(out);
    ACCEL_CHECK(num_inputs == 0 || inputs != nullptr, Status::InvalidArgument, "inputs is NULL");
    std::vector<torch::Tensor> ins;
    ins.reserve(num_inputs);
    for (size_t i = 0; i < num_inputs; ++i) {
      ACCEL_CHECK(inputs[i] != nullptr, Status::InvalidArgument, "inputs[", i, "] is NULL");
      ins.push_back(inputs[i]->t);
    }
    *out = wrap(inference->impl->run(ins));
  });
}

accel_status accel_inference_weights(const accel_inference* inference, uint64_t* out_version, double* out_age_seconds) {
  return guard(nullptr, "accel_inference_weights", [&] {
    NEED(inference);
    const auto [version, age] = inference->impl->weights();
    if (out_version) *out_version = version;
    if (out_age_seconds) *out_age_seconds = age;
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
        // left padding: the mask keeps real tokens from attending to it (right padding never is)
        const bool left = b->mask.defined() && b->mask.select(1, 0).eq(0).any().item<bool>();
        torch::Tensor logits = left ? acc.forward(*model->impl, {b->inputs, b->mask}) : acc.forward(*model->impl, {b->inputs});
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

}  // extern "C"
