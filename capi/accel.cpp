// The C ABI: handle structs, argument checks, and exceptions turned into status codes.
// Every exported function runs its body inside guard(), so no exception crosses it.
#include "accel/accel.h"

#include <cmath>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>

#include "runtime/comm/factory.h"
#include "runtime/paths.h"
#include "runtime/runtime.h"
#include "runtime/safetensors.h"
#include "sim/world.h"

using accel::Status;

struct accel_context {
  std::unique_ptr<accel::Accelerator> acc;
  std::string last_checkpoint;
  mutable std::string last_error;  // written by failing calls, also through const handles
};
struct accel_tensor {
  torch::Tensor t;
  const accel_context* owner = nullptr;  // the context whose model or loss made it (NULL: made by the caller)
  mutable bool backpropagated = false;   // accel_backward ran through it
};
struct accel_model {
  accel_context* ctx;
  std::shared_ptr<accel::Model> impl;
};
struct accel_optimizer {
  accel_model* model;
  std::shared_ptr<accel::Optimizer> impl;
};
struct accel_scheduler {
  accel_context* ctx;
  std::shared_ptr<accel::Scheduler> impl;
};
struct accel_dataloader {
  accel_context* ctx;
  std::shared_ptr<accel::DataLoader> impl;
};
struct accel_sim_report {
  accel::sim::RunReport rep;
};

namespace {

thread_local std::string tls_error;

accel_status record(const accel_context* ctx, accel_status s, const char* fn, const std::string& msg) {
  std::string full = std::string(fn) + ": " + msg;
  if (ctx) ctx->last_error = full;
  tls_error = std::move(full);
  return s;
}

accel_status map_c10(const c10::Error& e) {
  if (dynamic_cast<const c10::OutOfMemoryError*>(&e)) return ACCEL_ERR_OUT_OF_MEMORY;
  const std::string what = e.what_without_backtrace();
  // libtorch's CPU allocator reports a failed allocation as a plain c10::Error
  if (what.find("not enough memory") != std::string::npos || what.find("can't allocate memory") != std::string::npos)
    return ACCEL_ERR_OUT_OF_MEMORY;
  if (what.find("backward through the graph a second time") != std::string::npos) return ACCEL_ERR_INVALID_STATE;
  if (dynamic_cast<const c10::IndexError*>(&e) || dynamic_cast<const c10::ValueError*>(&e) ||
      dynamic_cast<const c10::TypeError*>(&e))
    return ACCEL_ERR_INVALID_ARGUMENT;
  if (dynamic_cast<const c10::NotImplementedError*>(&e)) return ACCEL_ERR_UNSUPPORTED;
  return ACCEL_ERR_INTERNAL;
}

template <class F>
accel_status guard(const accel_context* ctx, const char* fn, F&& body) {
  try {
    body();
    return ACCEL_OK;
  } catch (const accel::Error& e) {
    return record(ctx, static_cast<accel_status>(e.status()), fn, e.what());
  } catch (const c10::Error& e) {
    std::string what = e.what_without_backtrace();
    return record(ctx, map_c10(e), fn, "libtorch: " + what.substr(0, what.find('\n')));
  } catch (const std::bad_alloc&) {
    return record(ctx, ACCEL_ERR_OUT_OF_MEMORY, fn, "out of host memory");
  } catch (const std::exception& e) {
    return record(ctx, ACCEL_ERR_INTERNAL, fn, e.what());
  } catch (...) {
    return record(ctx, ACCEL_ERR_INTERNAL, fn, "unknown exception");
  }
}

#define NEED(ptr) ACCEL_CHECK((ptr) != nullptr, Status::InvalidArgument, #ptr " is NULL")

// ---------------------------------------------------------------------------------------
// Versioned options (docs/api.md, "Versioning"). A program built against an older header
// passes an older, shorter struct: version v's struct is the first bytes(v) bytes of
// today's, since fields are only ever appended behind a new version. One table per struct
// says how many bytes each version has: the offset of the first field added after it (so
// the tail padding of an older struct is neither read nor written), and sizeof for the
// current one. *_options_init writes only those bytes; the functions that take options
// read only those bytes, and the fields the caller's version lacks keep their defaults.
// Adding a version: append a field to the struct in the header, bump its
// ACCEL_*_OPTIONS_VERSION, append one row here; the static_asserts below check the rest.

struct VersionBytes {
  uint32_t version;
  size_t bytes;
};

template <class T>
struct Versions;  // per options struct: name, defaults(), table[] (one row per version, oldest first)

template <>
struct Versions<accel_options> {
  static constexpr const char* name = "accel_options";
  static accel_options defaults() { return ACCEL_OPTIONS_INIT; }
  static constexpr VersionBytes table[] = {
      {1, offsetof(accel_options, strategy)},  // until 27556aa (DDP) appended strategy, bucket_bytes
      {2, sizeof(accel_options)},
  };
  static constexpr uint32_t current = ACCEL_OPTIONS_VERSION;
};
template <>
struct Versions<accel_mlp_options> {
  static constexpr const char* name = "accel_mlp_options";
  static accel_mlp_options defaults() { return ACCEL_MLP_OPTIONS_INIT; }
  static constexpr VersionBytes table[] = {{1, sizeof(accel_mlp_options)}};
  static constexpr uint32_t current = ACCEL_MLP_OPTIONS_VERSION;
};
template <>
struct Versions<accel_sgd_options> {
  static constexpr const char* name = "accel_sgd_options";
  static accel_sgd_options defaults() { return ACCEL_SGD_OPTIONS_INIT; }
  static constexpr VersionBytes table[] = {{1, sizeof(accel_sgd_options)}};
  static constexpr uint32_t current = ACCEL_SGD_OPTIONS_VERSION;
};
template <>
struct Versions<accel_adamw_options> {
  static constexpr const char* name = "accel_adamw_options";
  static accel_adamw_options defaults() { return ACCEL_ADAMW_OPTIONS_INIT; }
  static constexpr VersionBytes table[] = {{1, sizeof(accel_adamw_options)}};
  static constexpr uint32_t current = ACCEL_ADAMW_OPTIONS_VERSION;
};
template <>
struct Versions<accel_lamb_options> {
  static constexpr const char* name = "accel_lamb_options";
  static accel_lamb_options defaults() { return ACCEL_LAMB_OPTIONS_INIT; }
  static constexpr VersionBytes table[] = {{1, sizeof(accel_lamb_options)}};
  static constexpr uint32_t current = ACCEL_LAMB_OPTIONS_VERSION;
};
template <>
struct Versions<accel_scheduler_options> {
  static constexpr const char* name = "accel_scheduler_options";
  static accel_scheduler_options defaults() { return ACCEL_SCHEDULER_OPTIONS_INIT; }
  static constexpr VersionBytes table[] = {{1, sizeof(accel_scheduler_options)}};
  static constexpr uint32_t current = ACCEL_SCHEDULER_OPTIONS_VERSION;
};
template <>
struct Versions<accel_dataloader_options> {
  static constexpr const char* name = "accel_dataloader_options";
  static accel_dataloader_options defaults() { return ACCEL_DATALOADER_OPTIONS_INIT; }
  static constexpr VersionBytes table[] = {
      {1, offsetof(accel_dataloader_options, even_batches)},  // until e93abbe appended even_batches, split_batches
      {2, sizeof(accel_dataloader_options)},
  };
  static constexpr uint32_t current = ACCEL_DATALOADER_OPTIONS_VERSION;
};
template <>
struct Versions<accel_sim_options> {
  static constexpr const char* name = "accel_sim_options";
  static accel_sim_options defaults() { return ACCEL_SIM_OPTIONS_INIT; }
  static constexpr VersionBytes table[] = {{1, sizeof(accel_sim_options)}};
  static constexpr uint32_t current = ACCEL_SIM_OPTIONS_VERSION;
};
template <>
struct Versions<accel_project_options> {
  static constexpr const char* name = "accel_project_options";
  static accel_project_options defaults() { return ACCEL_PROJECT_OPTIONS_INIT; }
  static constexpr VersionBytes table[] = {{1, sizeof(accel_project_options)}};
  static constexpr uint32_t current = ACCEL_PROJECT_OPTIONS_VERSION;
};

// The table's rows are versions 1, 2, ... in order, its last row is the header's current
// version and covers the whole struct, and every version is longer than the one before
// and holds at least the version field.
template <class T>
constexpr bool versions_numbered() {
  size_t i = 0;
  for (const VersionBytes& r : Versions<T>::table)
    if (r.version != ++i) return false;
  return i == Versions<T>::current;
}
template <class T>
constexpr bool versions_grow() {
  size_t prev = offsetof(T, version) + sizeof(uint32_t) - 1;
  for (const VersionBytes& r : Versions<T>::table) {
    if (r.bytes <= prev || r.bytes > sizeof(T)) return false;
    prev = r.bytes;
  }
  return prev == sizeof(T);
}
#define ACCEL_VERSION_TABLE_OK(T)                                                                   \
  static_assert(offsetof(T, version) == 0, #T ": the version field comes first");                   \
  static_assert(versions_numbered<T>(), #T ": the rows are versions 1..N, N its ACCEL_*_VERSION"); \
  static_assert(versions_grow<T>(), #T ": each version is longer than the last, the newest sizeof(" #T ")")
ACCEL_VERSION_TABLE_OK(accel_options);
ACCEL_VERSION_TABLE_OK(accel_mlp_options);
ACCEL_VERSION_TABLE_OK(accel_sgd_options);
ACCEL_VERSION_TABLE_OK(accel_adamw_options);
ACCEL_VERSION_TABLE_OK(accel_lamb_options);
ACCEL_VERSION_TABLE_OK(accel_scheduler_options);
ACCEL_VERSION_TABLE_OK(accel_dataloader_options);
ACCEL_VERSION_TABLE_OK(accel_sim_options);
ACCEL_VERSION_TABLE_OK(accel_project_options);
#undef ACCEL_VERSION_TABLE_OK

// The size in bytes of version `version` of T, after checking the library knows it.
template <class T>
size_t version_bytes(uint32_t version, const char* advice) {
  using V = Versions<T>;
  ACCEL_CHECK(version >= 1 && version <= V::current, Status::InvalidArgument, V::name, " version ", version,
              " is not known to this library (it knows 1..", V::current, "); ", advice);
  return V::table[version - 1].bytes;
}

// *_options_init: the defaults of `version`, written into that version's bytes only.
template <class T>
void init_options(T* opts, uint32_t version) {
  NEED(opts);
  const size_t n = version_bytes<T>(version, "pass the header's ACCEL_*_OPTIONS_VERSION");
  T d = Versions<T>::defaults();
  d.version = version;
  std::memcpy(static_cast<void*>(opts), &d, n);
}

// A caller's options (NULL: the defaults), read by their version: the fields that version
// lacks keep their defaults.
template <class T>
T read_options(const T* opts) {
  T o = Versions<T>::defaults();
  if (opts)
    std::memcpy(static_cast<void*>(&o), opts,
                version_bytes<T>(opts->version, "initialise it with the _OPTIONS_INIT macro"));
  return o;
}

// The integer value of an enum that came from C. A C caller may pass any int (42, -1); in
// C++ reading such a value as the enum type is undefined, so read its bytes instead.
template <class E>
int raw(const E& e) {
  static_assert(sizeof(E) == sizeof(int), "C enums are int-sized");
  int v;
  std::memcpy(&v, &e, sizeof v);
  return v;
}

c10::ScalarType to_scalar(int d) {
  switch (d) {
    case ACCEL_FLOAT32: return torch::kFloat;
    case ACCEL_FLOAT16: return torch::kHalf;
    case ACCEL_BFLOAT16: return torch::kBFloat16;
    case ACCEL_INT64: return torch::kLong;
    case ACCEL_INT32: return torch::kInt;
    case ACCEL_UINT8: return torch::kByte;
    case ACCEL_FLOAT64: return torch::kDouble;
    case ACCEL_INT8: return torch::kChar;
  }
  accel::fail(Status::InvalidArgument, "dtype must be an accel_dtype (0..7), got ", d);
}

accel_dtype from_scalar(c10::ScalarType s) {
  switch (s) {
    case torch::kFloat: return ACCEL_FLOAT32;
    case torch::kHalf: return ACCEL_FLOAT16;
    case torch::kBFloat16: return ACCEL_BFLOAT16;
    case torch::kLong: return ACCEL_INT64;
    case torch::kInt: return ACCEL_INT32;
    case torch::kByte: return ACCEL_UINT8;
    case torch::kDouble: return ACCEL_FLOAT64;
    case torch::kChar: return ACCEL_INT8;
    default: accel::fail(Status::Unsupported, "tensor dtype ", c10::toString(s), " has no accel_dtype");
  }
}

accel_tensor* wrap(torch::Tensor t, const accel_context* owner = nullptr) {
  return new accel_tensor{std::move(t), owner};
}

// Objects that belong to a context must be used with it.
void same_context(const accel_context* ctx, const accel_context* owner, const std::string& what) {
  ACCEL_CHECK(owner == nullptr || owner == ctx, Status::InvalidArgument, what, " belongs to another context");
}

// Copies a host tensor's elements, row-major, into dst after checking the size.
void copy_out(const torch::Tensor& host_tensor, void* dst, size_t dst_bytes) {
  auto host = host_tensor.contiguous();
  const size_t n = static_cast<size_t>(host.numel()) * host.element_size();
  ACCEL_CHECK(dst_bytes == n, Status::InvalidArgument, "the tensor ", accel::shape_str(host), " ",
              c10::toString(host.scalar_type()), " holds ", n, " bytes, dst_bytes is ", dst_bytes);
  ACCEL_CHECK(n == 0 || dst != nullptr, Status::InvalidArgument, "dst is NULL");
  if (n) std::memcpy(dst, host.data_ptr(), n);
}

// accel_options (NULL: defaults) as the runtime's options, read by their version.
accel::Options runtime_options(const accel_options* opts) {
  const accel_options o = read_options(opts);
  accel::Options ro;
  ro.strategy = static_cast<accel::Strategy>(raw(o.strategy));
  ro.bucket_bytes = o.bucket_bytes;
  if (ro.strategy == accel::Strategy::None) {
    if (const char* env = std::getenv("ACCEL_STRATEGY")) {
      const std::optional<accel::Strategy> s = accel::parse_strategy(env);
      ACCEL_CHECK(s.has_value(), Status::InvalidArgument, "ACCEL_STRATEGY='", env,
                  "' is not a strategy (no, ddp, zero1, zero2, zero3, shard_grad_op, full_shard)");
      ro.strategy = *s;
    }
  }
  ro.precision = static_cast<accel::Precision>(raw(o.mixed_precision));
  ro.gradient_accumulation_steps = o.gradient_accumulation_steps;
  ro.seed = o.seed;
  ro.device = static_cast<accel::DeviceKind>(raw(o.device));
  ro.device_index = o.device_index;
  ro.loss_scale_init = o.loss_scale_init;
  ro.loss_scale_growth_factor = o.loss_scale_growth_factor;
  ro.loss_scale_backoff_factor = o.loss_scale_backoff_factor;
  ro.loss_scale_growth_interval = o.loss_scale_growth_interval;
  ro.num_threads = o.num_threads;
  accel::validate(ro);
  return ro;
}

accel::Accelerator& acc_of(accel_context* ctx) { return *ctx->acc; }

}  // namespace

extern "C" {

int accel_version_number(void) { return ACCEL_VERSION_NUMBER; }
const char* accel_version_string(void) { return ACCEL_VERSION_STRING; }

const char* accel_status_name(accel_status s) {
  switch (raw(s)) {
    case ACCEL_OK: return "ACCEL_OK";
    case ACCEL_ERR_INVALID_ARGUMENT: return "ACCEL_ERR_INVALID_ARGUMENT";
    case ACCEL_ERR_INVALID_STATE: return "ACCEL_ERR_INVALID_STATE";
    case ACCEL_ERR_OUT_OF_MEMORY: return "ACCEL_ERR_OUT_OF_MEMORY";
    case ACCEL_ERR_COMMUNICATION: return "ACCEL_ERR_COMMUNICATION";
    case ACCEL_ERR_TIMEOUT: return "ACCEL_ERR_TIMEOUT";
    case ACCEL_ERR_IO: return "ACCEL_ERR_IO";
    case ACCEL_ERR_FORMAT: return "ACCEL_ERR_FORMAT";
    case ACCEL_ERR_UNSUPPORTED: return "ACCEL_ERR_UNSUPPORTED";
    case ACCEL_ERR_INTERNAL: return "ACCEL_ERR_INTERNAL";
    case ACCEL_ERR_NON_FINITE: return "ACCEL_ERR_NON_FINITE";
  }
  return "ACCEL_ERR_UNKNOWN";
}

const char* accel_last_error(const accel_context* ctx) { return ctx ? ctx->last_error.c_str() : tls_error.c_str(); }

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
    auto t = torch::empty(dims, torch::TensorOptions().dtype(st));
    if (numel > 0) std::memcpy(t.data_ptr(), data, static_cast<size_t>(numel) * t.element_size());
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
// Context

accel_status accel_options_init(accel_options* opts, uint32_t version) {
  return guard(nullptr, "accel_options_init", [&] { init_options(opts, version); });
}

accel_status accel_init(const accel_options* opts, accel_context** out) {
  return guard(nullptr, "accel_init", [&] {
    NEED(out);
    auto ctx = std::make_unique<accel_context>();
    const accel::Options ro = runtime_options(opts);
    ctx->acc = std::make_unique<accel::Accelerator>(ro, accel::comm::make_process_group(accel::comm::GroupConfig{}));
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
    *out = new accel_model{ctx, std::shared_ptr<accel::Model>(std::move(m))};
  });
}

accel_status accel_model_load_torchscript(accel_context* ctx, const char* path, accel_model** out) {
  return guard(ctx, "accel_model_load_torchscript", [&] {
    NEED(ctx);
    NEED(path);
    NEED(out);
    auto m = accel::load_torchscript(path);
    *out = new accel_model{ctx, std::shared_ptr<accel::Model>(std::move(m))};
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
    const accel_dataloader_options o = read_options(opts);  // version 1 has no even_batches, split_batches
    accel::DataLoaderConfig c;
    c.batch_size = o.batch_size;
    c.shuffle = o.shuffle != 0;
    c.seed = o.seed;
    c.drop_last = o.drop_last != 0;
    c.even_batches = o.even_batches != 0;
    c.split_batches = o.split_batches != 0;
    auto dl = std::make_shared<accel::DataLoader>(inputs->t.clone(), targets ? targets->t.clone() : torch::Tensor(), c);
    *out = new accel_dataloader{ctx, std::move(dl)};
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
    if (!b) {
      *out_inputs = nullptr;
      if (out_targets) *out_targets = nullptr;
      return;
    }
    std::unique_ptr<accel_tensor> x(wrap(std::move(b->inputs)));
    accel_tensor* y = (out_targets && b->targets.defined()) ? wrap(std::move(b->targets)) : nullptr;
    *out_inputs = x.release();
    if (out_targets) *out_targets = y;
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
    acc_of(ctx).backward(loss->t);
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

// ---------------------------------------------------------------------------------------
// Processes

accel_status accel_process_index(const accel_context* ctx, int32_t* out) {
  return guard(ctx, "accel_process_index", [&] {
    NEED(ctx);
    NEED(out);
    *out = ctx->acc->process_index();
  });
}

accel_status accel_num_processes(const accel_context* ctx, int32_t* out) {
  return guard(ctx, "accel_num_processes", [&] {
    NEED(ctx);
    NEED(out);
    *out = ctx->acc->num_processes();
  });
}

accel_status accel_barrier(accel_context* ctx) {
  return guard(ctx, "accel_barrier", [&] {
    NEED(ctx);
    acc_of(ctx).comm().barrier();
  });
}

accel_status accel_reduce(accel_context* ctx, const accel_tensor* tensor, accel_reduce_op op, accel_tensor** out) {
  return guard(ctx, "accel_reduce", [&] {
    NEED(ctx);
    NEED(tensor);
    NEED(out);
    accel::comm::RedOp rop;
    switch (raw(op)) {
      case ACCEL_REDUCE_SUM: rop = accel::comm::RedOp::Sum; break;
      case ACCEL_REDUCE_MEAN: rop = accel::comm::RedOp::Avg; break;
      case ACCEL_REDUCE_MAX: rop = accel::comm::RedOp::Max; break;
      case ACCEL_REDUCE_MIN: rop = accel::comm::RedOp::Min; break;
      case ACCEL_REDUCE_PROD: rop = accel::comm::RedOp::Prod; break;
      default: accel::fail(Status::InvalidArgument, "op must be an accel_reduce_op (0..4), got ", raw(op));
    }
    *out = wrap(acc_of(ctx).reduce(tensor->t, rop));
  });
}

accel_status accel_local_process_index(const accel_context* ctx, int32_t* out) {
  return guard(ctx, "accel_local_process_index", [&] {
    NEED(ctx);
    NEED(out);
    *out = ctx->acc->local_process_index();
  });
}

accel_status accel_is_main_process(const accel_context* ctx, int* out) {
  return guard(ctx, "accel_is_main_process", [&] {
    NEED(ctx);
    NEED(out);
    *out = ctx->acc->process_index() == 0;
  });
}

accel_status accel_is_local_main_process(const accel_context* ctx, int* out) {
  return guard(ctx, "accel_is_local_main_process", [&] {
    NEED(ctx);
    NEED(out);
    *out = ctx->acc->local_process_index() == 0;
  });
}

accel_status accel_broadcast(accel_context* ctx, const accel_tensor* tensor, int32_t root, accel_tensor** out) {
  return guard(ctx, "accel_broadcast", [&] {
    NEED(ctx);
    NEED(tensor);
    NEED(out);
    *out = wrap(acc_of(ctx).broadcast(tensor->t, root));
  });
}

accel_status accel_gather(accel_context* ctx, const accel_tensor* tensor, accel_tensor** out) {
  return guard(ctx, "accel_gather", [&] {
    NEED(ctx);
    NEED(tensor);
    NEED(out);
    *out = wrap(acc_of(ctx).gather(tensor->t));
  });
}

accel_status accel_gather_for_metrics(accel_context* ctx, const accel_tensor* tensor, accel_tensor** out) {
  return guard(ctx, "accel_gather_for_metrics", [&] {
    NEED(ctx);
    NEED(tensor);
    NEED(out);
    *out = wrap(acc_of(ctx).gather_for_metrics(tensor->t));
  });
}

accel_status accel_pad_across_processes(accel_context* ctx, const accel_tensor* tensor, int32_t dim, double pad_value,
                                        int pad_first, accel_tensor** out) {
  return guard(ctx, "accel_pad_across_processes", [&] {
    NEED(ctx);
    NEED(tensor);
    NEED(out);
    *out = wrap(acc_of(ctx).pad_across_processes(tensor->t, dim, pad_value, pad_first != 0));
  });
}

accel_status accel_print(accel_context* ctx, const char* message) {
  return guard(ctx, "accel_print", [&] {
    NEED(ctx);
    NEED(message);
    if (ctx->acc->process_index() == 0) {
      std::fputs(message, stdout);
      std::fputc('\n', stdout);
      std::fflush(stdout);
    }
  });
}

accel_status accel_set_seed(accel_context* ctx, uint64_t seed, int per_process) {
  return guard(ctx, "accel_set_seed", [&] {
    NEED(ctx);
    acc_of(ctx).set_seed(seed, per_process != 0);
  });
}

// ---------------------------------------------------------------------------------------
// The simulator

accel_status accel_sim_options_init(accel_sim_options* opts, uint32_t version) {
  return guard(nullptr, "accel_sim_options_init", [&] { init_options(opts, version); });
}

accel_status accel_sim_run(const accel_sim_options* sim, const accel_options* ctx_opts, accel_rank_fn fn, void* user,
                           accel_sim_report** out) {
  std::unique_ptr<accel_sim_report> report;
  accel_status st = guard(nullptr, "accel_sim_run", [&] {
    NEED(fn);
    const accel_sim_options so = read_options(sim);
    accel::sim::WorldSettings ws;
    ws.world_size = so.world_size;
    if (so.topology) ws.topology = so.topology;
    if (so.device_memory) ws.device_memory = so.device_memory;
    ws.timeout_seconds = so.timeout_seconds;
    if (so.faults) ws.faults = so.faults;
    ws.engine_threads = so.engine_threads;
    ws.record_trace = so.trace_path != nullptr;
    accel::sim::World world(accel::sim::world_options(ws));  // checks every field, naming it
    if (so.trace_path) accel::paths::check_file_target(so.trace_path, accel::paths::FileKind::ChromeTrace, "trace_path");
    accel::Options ro = runtime_options(ctx_opts);
    ACCEL_CHECK(ro.device != accel::DeviceKind::CUDA, Status::Unsupported,
                "ctx_opts->device: simulated ranks run on the CPU; ask for ACCEL_DEVICE_AUTO or ACCEL_DEVICE_CPU");
    ro.device = accel::DeviceKind::CPU;
    accel::sim::RunReport ran = world.run([&](accel::sim::Rank& rank) {
      auto ctx = std::make_unique<accel_context>();
      accel::comm::GroupConfig group;
      group.backend = "sim";
      group.sim_rank = &rank;
      ctx->acc = std::make_unique<accel::Accelerator>(ro, accel::comm::make_process_group(group));
      tls_error.clear();
      const accel_status s = fn(ctx.get(), user);
      // read as an int: a value outside the enum's range may not be loaded as accel_status (UBSan);
      // the lowest code is ACCEL_ERR_NON_FINITE until a new one is appended
      const int code = raw(s);
      // a value that is no accel_status (positive, or an unknown code) is the caller's bug
      ACCEL_CHECK(code <= ACCEL_OK && code >= ACCEL_ERR_NON_FINITE, Status::InvalidArgument, "fn returned ", code,
                  ", which is not an accel_status (ACCEL_OK or a negative ACCEL_ERR_* code)");
      // the rank's last failure message: this thread's slot holds the latest of them all
      if (code != ACCEL_OK)
        throw accel::Error(static_cast<Status>(code),
                           tls_error.empty() ? std::string(accel_status_name(static_cast<accel_status>(code))) : tls_error);
    });
    report = std::make_unique<accel_sim_report>();  // the world ran: the caller gets its report
    report->rep = std::move(ran);
    if (so.trace_path) accel::safetensors::write_file_atomic(so.trace_path, world.trace_json());  // appears whole
    for (const auto& r : report->rep.ranks)
      if (r.status != Status::Ok) throw accel::Error(r.status, "rank " + std::to_string(r.rank) + ": " + r.error);
  });
  if (report && out) *out = report.release();
  return st;
}

void accel_sim_report_destroy(accel_sim_report* report) { delete report; }

accel_status accel_sim_report_world_size(const accel_sim_report* report, int32_t* out) {
  return guard(nullptr, "accel_sim_report_world_size", [&] {
    NEED(report);
    NEED(out);
    *out = static_cast<int32_t>(report->rep.ranks.size());
  });
}

accel_status accel_sim_report_rank(const accel_sim_report* report, int32_t rank, accel_status* out_status,
                                   const char** out_error, uint64_t* out_peak_bytes) {
  return guard(nullptr, "accel_sim_report_rank", [&] {
    NEED(report);
    ACCEL_CHECK(rank >= 0 && static_cast<size_t>(rank) < report->rep.ranks.size(), Status::InvalidArgument, "rank ",
                rank, " is not in this ", report->rep.ranks.size(), "-rank report");
    const auto& r = report->rep.ranks[static_cast<size_t>(rank)];
    if (out_status) *out_status = static_cast<accel_status>(r.status);
    if (out_error) *out_error = r.error.c_str();
    if (out_peak_bytes) *out_peak_bytes = r.peak_bytes;
  });
}

accel_status accel_sim_report_predicted_seconds(const accel_sim_report* report, double* out) {
  return guard(nullptr, "accel_sim_report_predicted_seconds", [&] {
    NEED(report);
    NEED(out);
    *out = report->rep.predicted_seconds;
  });
}

accel_status accel_sim_charge_compute(accel_context* ctx, double seconds, const char* label) {
  return guard(ctx, "accel_sim_charge_compute", [&] {
    NEED(ctx);
    ACCEL_CHECK(std::isfinite(seconds) && seconds >= 0, Status::InvalidArgument, "seconds must be >= 0, got ", seconds);
    if (accel::comm::ComputeClock* clock = acc_of(ctx).clock()) clock->charge_compute(seconds, label);  // else not simulated: nothing to charge
  });
}

accel_status accel_project_options_init(accel_project_options* opts, uint32_t version) {
  return guard(nullptr, "accel_project_options_init", [&] { init_options(opts, version); });
}

accel_status accel_set_project(accel_context* ctx, const accel_project_options* opts) {
  return guard(ctx, "accel_set_project", [&] {
    NEED(ctx);
    NEED(opts);
    const accel_project_options o = read_options(opts);
    ACCEL_CHECK(o.project_dir != nullptr, Status::InvalidArgument, "project_dir is NULL");
    ACCEL_CHECK(o.project_dir[0] != '\0', Status::InvalidArgument, "project_dir is empty");
    acc_of(ctx).set_project(accel::ProjectConfig{o.project_dir, o.total_limit});
  });
}

accel_status accel_save_state(accel_context* ctx, const char* dir) {
  return guard(ctx, "accel_save_state", [&] {
    NEED(ctx);
    ACCEL_CHECK(dir == nullptr || dir[0] != '\0', Status::InvalidArgument,
                "dir is empty (pass NULL for the project's next checkpoint)");
    ctx->last_checkpoint = acc_of(ctx).save_state(dir ? dir : "");
  });
}

accel_status accel_load_state(accel_context* ctx, const char* dir) {
  return guard(ctx, "accel_load_state", [&] {
    NEED(ctx);
    ACCEL_CHECK(dir == nullptr || dir[0] != '\0', Status::InvalidArgument,
                "dir is empty (pass NULL for the project's newest checkpoint)");
    ctx->last_checkpoint = acc_of(ctx).load_state(dir ? dir : "");
  });
}

accel_status accel_last_checkpoint(const accel_context* ctx, const char** out) {
  return guard(ctx, "accel_last_checkpoint", [&] {
    NEED(ctx);
    NEED(out);
    *out = ctx->last_checkpoint.c_str();
  });
}

}  // extern "C"
