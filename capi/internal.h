// What every file of the C ABI shares: the handle structs, guard() (exceptions turned into
// status codes: every exported function runs its body inside it, so no exception crosses
// the ABI), argument checks, versioned options, conversions. The functions themselves live
// by area: context.cpp, tensor.cpp (tensors, models, losses), optim.cpp, data.cpp,
// distributed.cpp, checkpoint.cpp, simulator.cpp; common.cpp holds versions and errors.
#pragma once

#include "accel/accel.h"

#include <atomic>
#include <cmath>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>

#include "runtime/inference.h"
#include "runtime/paths.h"
#include "runtime/runtime.h"
#include "runtime/tracker.h"
#include "runtime/world.h"
#include "runtime/safetensors.h"
#include "runtime/tokenizer/tokenizer.h"

using accel::Status;

struct accel_context {
  // a number no other context of this process has had: tensors name their context by it, as
  // a new context may get the address of a destroyed one
  const uint64_t id = next_context_id();
  static uint64_t next_context_id() {
    static std::atomic<uint64_t> n{0};
    return ++n;
  }
  std::unique_ptr<accel::Accelerator> acc;
  std::unique_ptr<accel::tracker::Tracker> tracker;  // accel_init_trackers, on a process that writes
  bool trackers_open = false;                         // also on a process that writes nothing
  std::string last_checkpoint;
  mutable std::string last_error;  // written by failing calls, also through const handles
};
struct accel_tensor {
  torch::Tensor t;
  uint64_t owner = 0;  // the id of the context whose model or loss made it (0: made by the caller)
  mutable bool backpropagated = false;   // accel_backward ran through it
  int64_t tokens = -1;                   // a token-mean loss (accel_lm_forward): its real targets
};
struct accel_model {
  accel_context* ctx;
  std::shared_ptr<accel::Model> impl;
  mutable std::shared_ptr<accel::WeightChannel> published;  // made by the first publication (a const model's too)
};
struct accel_inference {
  std::unique_ptr<accel::Inference> impl;
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
  torch::Tensor last_mask;    // the attention mask of the last batch (causal-LM loaders)
  bool has_masks = false;     // a causal-LM loader (its batches have masks)
  bool had_batch = false;     // accel_dataloader_next returned a batch last time
};
struct accel_tokenizer {
  std::unique_ptr<accel::tokenizer::Tokenizer> impl;
};
struct accel_sim_report {
  accel::sim::RunReport rep;
};

namespace accel::capi {

// The calling thread's last failure message (accel_last_error(NULL)).
inline thread_local std::string tls_error;

inline accel_status record(const accel_context* ctx, accel_status s, const char* fn, const std::string& msg) {
  std::string full = std::string(fn) + ": " + msg;
  if (ctx) ctx->last_error = full;
  tls_error = std::move(full);
  return s;
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
    return record(ctx, static_cast<accel_status>(accel::compat::status_of(e)), fn, "libtorch: " + what.substr(0, what.find('\n')));
  } catch (const std::bad_alloc&) {
    return record(ctx, ACCEL_ERR_OUT_OF_MEMORY, fn, "out of host memory");
  } catch (const std::exception& e) {
    return record(ctx, ACCEL_ERR_INTERNAL, fn, e.what());
  } catch (...) {
    return record(ctx, ACCEL_ERR_INTERNAL, fn, "unknown exception");
  }
}

#define NEED(ptr) ACCEL_CHECK((ptr) != nullptr, Status::InvalidArgument, #ptr " is NULL")

// A comma-separated list of module names (accel_lora_options.target_modules), trimmed.
inline std::vector<std::string> target_list(const std::string& list) {
  ACCEL_CHECK(!list.empty(), Status::InvalidArgument,
              "target_modules is empty (NULL gives PEFT's default for the model family)");
  std::vector<std::string> out;
  for (size_t a = 0; a <= list.size();) {
    const size_t b = std::min(list.find(',', a), list.size());
    std::string item = list.substr(a, b - a);
    while (!item.empty() && item.front() == ' ') item.erase(item.begin());
    while (!item.empty() && item.back() == ' ') item.pop_back();
    ACCEL_CHECK(!item.empty(), Status::InvalidArgument, "target_modules '", list, "' has an empty name");
    out.push_back(item);
    a = b + 1;
  }
  return out;
}

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
      {2, offsetof(accel_options, backend)},   // until real processes appended backend, timeout_seconds
      {3, offsetof(accel_options, offload)},   // until issue 37 appended offload
      {4, sizeof(accel_options)},
  };
  static constexpr uint32_t current = ACCEL_OPTIONS_VERSION;
};
// A struct that has had one version so far: its whole size.
#define ACCEL_ONE_VERSION(T, PREFIX)                                   \
  template <>                                                          \
  struct Versions<T> {                                                 \
    static constexpr const char* name = #T;                            \
    static T defaults() { return PREFIX##_INIT; }                      \
    static constexpr VersionBytes table[] = {{1, sizeof(T)}};          \
    static constexpr uint32_t current = PREFIX##_VERSION;              \
  }
ACCEL_ONE_VERSION(accel_mlp_options, ACCEL_MLP_OPTIONS);
ACCEL_ONE_VERSION(accel_sgd_options, ACCEL_SGD_OPTIONS);
ACCEL_ONE_VERSION(accel_adamw_options, ACCEL_ADAMW_OPTIONS);
ACCEL_ONE_VERSION(accel_lamb_options, ACCEL_LAMB_OPTIONS);
ACCEL_ONE_VERSION(accel_scheduler_options, ACCEL_SCHEDULER_OPTIONS);
template <>
struct Versions<accel_dataloader_options> {
  static constexpr const char* name = "accel_dataloader_options";
  static accel_dataloader_options defaults() { return ACCEL_DATALOADER_OPTIONS_INIT; }
  static constexpr VersionBytes table[] = {
      {1, offsetof(accel_dataloader_options, even_batches)},  // until e93abbe appended even_batches, split_batches
      {2, offsetof(accel_dataloader_options, iterable)},      // until issue 18 appended iterable
      {3, sizeof(accel_dataloader_options)},
  };
  static constexpr uint32_t current = ACCEL_DATALOADER_OPTIONS_VERSION;
};
template <>
struct Versions<accel_sim_options> {
  static constexpr const char* name = "accel_sim_options";
  static accel_sim_options defaults() { return ACCEL_SIM_OPTIONS_INIT; }
  static constexpr VersionBytes table[] = {
      {1, offsetof(accel_sim_options, host_memory)},  // until issue 37 appended host_memory
      {2, sizeof(accel_sim_options)},
  };
  static constexpr uint32_t current = ACCEL_SIM_OPTIONS_VERSION;
};
ACCEL_ONE_VERSION(accel_project_options, ACCEL_PROJECT_OPTIONS);
template <>
struct Versions<accel_lm_options> {
  static constexpr const char* name = "accel_lm_options";
  static accel_lm_options defaults() { return ACCEL_LM_OPTIONS_INIT; }
  static constexpr VersionBytes table[] = {
      {1, offsetof(accel_lm_options, quantization)},  // until issue 37 appended quantization, double_quant
      {2, sizeof(accel_lm_options)},
  };
  static constexpr uint32_t current = ACCEL_LM_OPTIONS_VERSION;
};
template <>
struct Versions<accel_lm_data_options> {
  static constexpr const char* name = "accel_lm_data_options";
  static accel_lm_data_options defaults() { return ACCEL_LM_DATA_OPTIONS_INIT; }
  static constexpr VersionBytes table[] = {
      {1, offsetof(accel_lm_data_options, padding_side)},  // until issue 36 appended padding_side
      {2, sizeof(accel_lm_data_options)},
  };
  static constexpr uint32_t current = ACCEL_LM_DATA_OPTIONS_VERSION;
};
ACCEL_ONE_VERSION(accel_lora_options, ACCEL_LORA_OPTIONS);
ACCEL_ONE_VERSION(accel_adafactor_options, ACCEL_ADAFACTOR_OPTIONS);
ACCEL_ONE_VERSION(accel_generate_options, ACCEL_GENERATE_OPTIONS);
template <>
struct Versions<accel_memory_estimate_options> {
  static constexpr const char* name = "accel_memory_estimate_options";
  static accel_memory_estimate_options defaults() { return ACCEL_MEMORY_ESTIMATE_OPTIONS_INIT; }
  static constexpr VersionBytes table[] = {
      {1, offsetof(accel_memory_estimate_options, offload)},  // until issue 37 appended offload, quantization
      {2, sizeof(accel_memory_estimate_options)},
  };
  static constexpr uint32_t current = ACCEL_MEMORY_ESTIMATE_OPTIONS_VERSION;
};
ACCEL_ONE_VERSION(accel_tracker_options, ACCEL_TRACKER_OPTIONS);
ACCEL_ONE_VERSION(accel_inference_options, ACCEL_INFERENCE_OPTIONS);
ACCEL_ONE_VERSION(accel_encode_options, ACCEL_ENCODE_OPTIONS);
ACCEL_ONE_VERSION(accel_sft_options, ACCEL_SFT_OPTIONS);
// An output struct of one version so far: the caller sets its version, the library writes
// that version's bytes.
#define ACCEL_ONE_OUTPUT_VERSION(T, VERSION)                  \
  template <>                                                 \
  struct Versions<T> {                                        \
    static constexpr const char* name = #T;                   \
    static T defaults() {                                     \
      T out{};                                                \
      out.version = VERSION;                                  \
      return out;                                             \
    }                                                         \
    static constexpr VersionBytes table[] = {{1, sizeof(T)}}; \
    static constexpr uint32_t current = VERSION;              \
  }
template <>
struct Versions<accel_memory_estimate> {
  static constexpr const char* name = "accel_memory_estimate";
  static accel_memory_estimate defaults() {
    accel_memory_estimate out{};
    out.version = ACCEL_MEMORY_ESTIMATE_VERSION;
    return out;
  }
  static constexpr VersionBytes table[] = {
      {1, offsetof(accel_memory_estimate, host)},  // until issue 37 appended host, transfer_bytes
      {2, offsetof(accel_memory_estimate, gradient_transfer_bytes)},  // until the gradients' overlap
      {3, sizeof(accel_memory_estimate)},
  };
  static constexpr uint32_t current = ACCEL_MEMORY_ESTIMATE_VERSION;
};
ACCEL_ONE_OUTPUT_VERSION(accel_train_result, ACCEL_TRAIN_RESULT_VERSION);

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
ACCEL_VERSION_TABLE_OK(accel_lm_options);
ACCEL_VERSION_TABLE_OK(accel_lm_data_options);
ACCEL_VERSION_TABLE_OK(accel_lora_options);
ACCEL_VERSION_TABLE_OK(accel_adafactor_options);
ACCEL_VERSION_TABLE_OK(accel_generate_options);
ACCEL_VERSION_TABLE_OK(accel_memory_estimate_options);
ACCEL_VERSION_TABLE_OK(accel_encode_options);
ACCEL_VERSION_TABLE_OK(accel_sft_options);
ACCEL_VERSION_TABLE_OK(accel_memory_estimate);
ACCEL_VERSION_TABLE_OK(accel_tracker_options);
ACCEL_VERSION_TABLE_OK(accel_inference_options);
ACCEL_VERSION_TABLE_OK(accel_train_result);
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

inline c10::ScalarType to_scalar(int d) {
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

inline accel_dtype from_scalar(c10::ScalarType s) {
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

inline accel_tensor* wrap(torch::Tensor t, const accel_context* owner = nullptr) {
  return new accel_tensor{std::move(t), owner ? owner->id : 0};
}

// Objects that belong to a context must be used with it.
inline void same_context(const accel_context* ctx, const accel_context* owner, const std::string& what) {
  ACCEL_CHECK(owner == nullptr || owner == ctx, Status::InvalidArgument, what, " belongs to another context");
}
// A tensor's context, by id: a tensor may outlive its context, whose address a new one may get.
inline void same_context(const accel_context* ctx, uint64_t owner, const std::string& what) {
  ACCEL_CHECK(owner == 0 || owner == ctx->id, Status::InvalidArgument, what, " belongs to another context");
}

// Copies a host tensor's elements, row-major, into dst after checking the size.
inline void copy_out(const torch::Tensor& host_tensor, void* dst, size_t dst_bytes) {
  auto host = host_tensor.contiguous();
  const size_t n = static_cast<size_t>(host.numel()) * host.element_size();
  ACCEL_CHECK(dst_bytes == n, Status::InvalidArgument, "the tensor ", accel::shape_str(host), " ",
              c10::toString(host.scalar_type()), " holds ", n, " bytes, dst_bytes is ", dst_bytes);
  ACCEL_CHECK(n == 0 || dst != nullptr, Status::InvalidArgument, "dst is NULL");
  if (n) std::memcpy(dst, host.data_ptr(), n);
}

inline std::string lowercase(std::string v) {
  for (char& c : v) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return v;
}

// accel_dataloader_options as the runtime's loader config, read by their version (version 1
// has no even_batches, split_batches; version 2 no iterable).
inline accel::DataLoaderConfig loader_config(const accel_dataloader_options* opts) {
  const accel_dataloader_options o = read_options(opts);
  accel::DataLoaderConfig c;
  c.batch_size = o.batch_size;
  c.shuffle = o.shuffle != 0;
  c.seed = o.seed;
  c.drop_last = o.drop_last != 0;
  c.even_batches = o.even_batches != 0;
  c.split_batches = o.split_batches != 0;
  c.iterable = o.iterable != 0;
  return c;
}

// accel_options (NULL: defaults) as the runtime's options, read by their version.
inline accel::Options runtime_options(const accel_options* opts) {
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
  if (raw(o.mixed_precision) == ACCEL_PRECISION_NO) {
    if (const char* env = std::getenv("ACCEL_MIXED_PRECISION")) {
      const std::string v = lowercase(env);
      ACCEL_CHECK(v == "no" || v == "bf16" || v == "fp16" || v == "auto", Status::InvalidArgument,
                  "ACCEL_MIXED_PRECISION='", env, "' is not a precision (no, bf16, fp16, auto)");
      ro.precision = v == "bf16"   ? accel::Precision::BF16
                     : v == "fp16" ? accel::Precision::FP16
                     : v == "auto" ? accel::Precision::Auto
                                   : accel::Precision::No;
    }
  }
  ro.backend = raw(o.backend) == ACCEL_BACKEND_GLOO   ? "gloo"
               : raw(o.backend) == ACCEL_BACKEND_NCCL ? "nccl"
               : raw(o.backend) == ACCEL_BACKEND_SIM  ? "sim"
                                                      : "auto";
  ACCEL_CHECK(raw(o.backend) >= 0 && raw(o.backend) <= ACCEL_BACKEND_SIM, Status::InvalidArgument,
              "backend must be an accel_backend (0..3), got ", raw(o.backend));
  if (raw(o.backend) == ACCEL_BACKEND_AUTO) {
    if (const char* env = std::getenv("ACCEL_BACKEND")) {
      const std::string v = lowercase(env);
      ACCEL_CHECK(v == "auto" || v == "gloo" || v == "nccl" || v == "sim", Status::InvalidArgument, "ACCEL_BACKEND='",
                  env, "' is not a backend (auto, gloo, nccl, sim)");
      ro.backend = v;
    }
  }
  ACCEL_CHECK(raw(o.offload) >= ACCEL_OFFLOAD_NONE && raw(o.offload) <= ACCEL_OFFLOAD_PARAMETERS,
              Status::InvalidArgument, "offload must be an accel_offload (0 none, 1 optimizer, 2 parameters), got ",
              raw(o.offload));
  ro.offload = static_cast<accel::Offload>(raw(o.offload));
  if (raw(o.offload) == ACCEL_OFFLOAD_NONE) {
    if (const char* env = std::getenv("ACCEL_OFFLOAD")) {
      const std::string v = lowercase(env);
      ACCEL_CHECK(v == "none" || v == "optimizer" || v == "parameters", Status::InvalidArgument, "ACCEL_OFFLOAD='",
                  env, "' is not an offload (none, optimizer, parameters)");
      ro.offload = v == "optimizer"    ? accel::Offload::Optimizer
                   : v == "parameters" ? accel::Offload::Parameters
                                       : accel::Offload::None;
    }
  }
  ro.timeout_seconds = o.timeout_seconds;
  ACCEL_CHECK(std::isfinite(o.timeout_seconds) && o.timeout_seconds >= 0, Status::InvalidArgument,
              "timeout_seconds must be finite and >= 0, got ", o.timeout_seconds);
  if (o.timeout_seconds == 0) {
    ro.timeout_seconds = 300;
    if (const char* env = std::getenv("ACCEL_TIMEOUT")) {
      char* end = nullptr;
      const double v = std::strtod(env, &end);
      ACCEL_CHECK(*env && end && *end == 0 && std::isfinite(v) && v > 0, Status::InvalidArgument, "ACCEL_TIMEOUT='", env,
                  "' is not a number of seconds > 0");
      ro.timeout_seconds = v;
    }
  }
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

inline accel::Accelerator& acc_of(accel_context* ctx) { return *ctx->acc; }

}  // namespace accel::capi
