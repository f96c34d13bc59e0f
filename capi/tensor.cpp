// The C ABI: tensors, models and losses.
#include "base/text.h"
#include "capi/internal.h"
#include "runtime/models/transformer.h"

#include <sys/sysinfo.h>

#include <fstream>

using namespace accel::capi;

namespace {

// The most memory this process can fill: RAM + swap, or its cgroup's limit (v2: memory.max,
// plus memory.swap.max where that is a number, else the machine's swap) where that is lower.
// 0 when neither can be read. `what` names the limit for messages.
uint64_t host_memory_ceiling(std::string& what) {
  struct sysinfo si {};
  uint64_t limit = 0;
  uint64_t swap = 0;
  if (::sysinfo(&si) == 0) {
    swap = static_cast<uint64_t>(si.totalswap) * si.mem_unit;
    limit = static_cast<uint64_t>(si.totalram) * si.mem_unit + swap;
    what = "RAM + swap";
  }
  auto number = [](const char* path, uint64_t& v) {
    std::ifstream f(path);
    std::string s;
    if (!(f >> s) || s.empty() || s.find_first_not_of("0123456789") != std::string::npos) return false;
    v = std::strtoull(s.c_str(), nullptr, 10);
    return true;
  };
  uint64_t mem = 0;
  if (number("/sys/fs/cgroup/memory.max", mem)) {
    uint64_t cg_swap = swap;
    number("/sys/fs/cgroup/memory.swap.max", cg_swap);
    if (limit == 0 || mem + cg_swap < limit) {
      limit = mem + cg_swap;
      what = "this cgroup's memory.max + swap";
    }
  }
  return limit;
}

}  // namespace

extern "C" {

// ---------------------------------------------------------------------------------------
// Tensors

size_t accel_dtype_size(accel_dtype d) {
  switch (raw(d)) {
    case ACCEL_FLOAT32: case ACCEL_INT32: return 4;
    case ACCEL_FLOAT16: case ACCEL_BFLOAT16: return 2;
    case ACCEL_INT64: case ACCEL_FLOAT64: return 8;
    case ACCEL_UINT8: case ACCEL_INT8: return 1;
  }
  return 0;
}

accel_status accel_tensor_create(accel_dtype dtype, const int64_t* shape, size_t ndim, const void* data,
                                 accel_tensor** out) {
  return guard(nullptr, "accel_tensor_create", [&] {
    NEED(out);
    auto st = to_scalar(raw(dtype));
    ACCEL_CHECK(ndim <= 16, Status::InvalidArgument, "ndim must be in [0, 16], got ", ndim);
    ACCEL_CHECK(ndim == 0 || shape != nullptr, Status::InvalidArgument, "shape is NULL with ndim ", ndim);
    std::vector<int64_t> dims(shape, shape + ndim);
    int64_t numel = 1;
    for (size_t i = 0; i < ndim; ++i) {
      ACCEL_CHECK(dims[i] >= 0, Status::InvalidArgument, "shape[", i, "] must be >= 0, got ", dims[i]);
      ACCEL_CHECK(dims[i] == 0 || numel <= INT64_MAX / 16 / dims[i], Status::InvalidArgument, "shape: ",
                  "the product of the dimensions overflows (shape[", i, "] = ", dims[i], ")");
      numel *= dims[i];
    }
    ACCEL_CHECK(numel == 0 || data != nullptr, Status::InvalidArgument, "data is NULL for a tensor of ", numel, " elements");
    // The copy below writes every byte: a size past what the machine can hold would fail
    // after minutes (or meet the OOM killer where the kernel overcommits), so refuse it now.
    // (Asked only from 64 MiB on: reading the limits costs microseconds, the copy milliseconds.)
    const uint64_t bytes = static_cast<uint64_t>(numel) * c10::elementSize(st);
    if (bytes >= (uint64_t{64} << 20)) {
      std::string what;
      const uint64_t ceiling = host_memory_ceiling(what);
      ACCEL_CHECK(ceiling == 0 || bytes <= ceiling, Status::OutOfMemory, "a tensor of ",
                  accel::text::format_bytes(bytes), " is more than this machine can hold (", what, ": ",
                  accel::text::format_bytes(ceiling), ")");
    }
    auto t = torch::empty(dims, torch::TensorOptions().dtype(st));
    if (numel > 0) std::memcpy(t.data_ptr(), data, static_cast<size_t>(bytes));
    *out = wrap(std::move(t));
  });
}

void accel_tensor_destroy(accel_tensor* tensor) { delete tensor; }

accel_status accel_tensor_copy_to_host(const accel_tensor* tensor, void* dst, size_t dst_bytes) {
  return guard(nullptr, "accel_tensor_copy_to_host", [&] {
    NEED(tensor);
    copy_out(tensor->t.detach().to(torch::kCPU), dst, dst_bytes);
  });
}

accel_status accel_tensor_copy_to_host_as(const accel_tensor* tensor, accel_dtype dtype, void* dst, size_t dst_bytes) {
  return guard(nullptr, "accel_tensor_copy_to_host_as", [&] {
    NEED(tensor);
    copy_out(tensor->t.detach().to(torch::kCPU, to_scalar(raw(dtype))), dst, dst_bytes);
  });
}

accel_status accel_tensor_item(const accel_tensor* tensor, double* out) {
  return guard(nullptr, "accel_tensor_item", [&] {
    NEED(tensor);
    NEED(out);
    ACCEL_CHECK(tensor->t.numel() == 1, Status::InvalidArgument, "item of a tensor with ", tensor->t.numel(),
                " elements (needs exactly 1)");
    *out = tensor->t.detach().to(torch::kCPU, torch::kDouble).item<double>();
  });
}

accel_status accel_tensor_dtype(const accel_tensor* tensor, accel_dtype* out) {
  return guard(nullptr, "accel_tensor_dtype", [&] {
    NEED(tensor);
    NEED(out);
    *out = from_scalar(tensor->t.scalar_type());
  });
}

accel_status accel_tensor_ndim(const accel_tensor* tensor, size_t* out) {
  return guard(nullptr, "accel_tensor_ndim", [&] {
    NEED(tensor);
    NEED(out);
    *out = static_cast<size_t>(tensor->t.dim());
  });
}

accel_status accel_tensor_shape(const accel_tensor* tensor, int64_t* out, size_t capacity) {
  return guard(nullptr, "accel_tensor_shape", [&] {
    NEED(tensor);
    const size_t nd = static_cast<size_t>(tensor->t.dim());
    ACCEL_CHECK(capacity >= nd, Status::InvalidArgument, "the tensor has ", nd, " dimensions, capacity is ", capacity);
    ACCEL_CHECK(nd == 0 || out != nullptr, Status::InvalidArgument, "out is NULL");
    for (size_t i = 0; i < nd; ++i) out[i] = tensor->t.size(static_cast<int64_t>(i));
  });
}

accel_status accel_tensor_numel(const accel_tensor* tensor, int64_t* out) {
  return guard(nullptr, "accel_tensor_numel", [&] {
    NEED(tensor);
    NEED(out);
    *out = tensor->t.numel();
  });
}

accel_status accel_tensor_nbytes(const accel_tensor* tensor, size_t* out) {
  return guard(nullptr, "accel_tensor_nbytes", [&] {
    NEED(tensor);
    NEED(out);
    *out = static_cast<size_t>(tensor->t.numel()) * tensor->t.element_size();
  });
}


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

}  // extern "C"
