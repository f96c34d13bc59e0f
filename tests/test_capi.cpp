// Tests of the C ABI through include/accel/accel.h only (no libtorch here): ownership,
// tensors, training through the ABI, and every misuse case returning a status and a
// message instead of crashing.
#include <accel/accel.h>
#include <gtest/gtest.h>

#include <filesystem>

#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/sysinfo.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

namespace {

#define ASSERT_OK(ctx, call) ASSERT_EQ((call), ACCEL_OK) << accel_last_error(ctx)

std::string tmp_path(const std::string& name) {
  const char* dir = std::getenv("TMPDIR");
  return std::string(dir ? dir : "/tmp") + "/accel_test_capi_" + std::to_string(::getpid()) + "_" + name;
}

bool contains(const char* hay, const std::string& needle) { return std::string(hay).find(needle) != std::string::npos; }

accel_tensor* make_f32(std::vector<int64_t> shape, const std::vector<float>& data) {
  accel_tensor* t = nullptr;
  EXPECT_EQ(accel_tensor_create(ACCEL_FLOAT32, shape.data(), shape.size(), data.data(), &t), ACCEL_OK)
      << accel_last_error(nullptr);
  return t;
}

accel_tensor* make_i64(std::vector<int64_t> shape, const std::vector<int64_t>& data) {
  accel_tensor* t = nullptr;
  EXPECT_EQ(accel_tensor_create(ACCEL_INT64, shape.data(), shape.size(), data.data(), &t), ACCEL_OK);
  return t;
}

// A context with a small MLP (4 -> 8 -> 3), an optimizer, optionally prepared.
struct Fixture {
  accel_context* ctx = nullptr;
  accel_model* model = nullptr;
  accel_optimizer* opt = nullptr;

  explicit Fixture(accel_precision precision = ACCEL_PRECISION_NO, bool prepare = true, int accum = 1,
                   accel_device device = ACCEL_DEVICE_AUTO) {
    accel_options o = ACCEL_OPTIONS_INIT;
    o.mixed_precision = precision;
    o.device = device;
    o.seed = 1;
    o.gradient_accumulation_steps = accum;
    EXPECT_EQ(accel_init(&o, &ctx), ACCEL_OK) << accel_last_error(nullptr);
    int64_t sizes[] = {4, 8, 3};
    accel_mlp_options m = ACCEL_MLP_OPTIONS_INIT;
    m.layer_sizes = sizes;
    m.num_layer_sizes = 3;
    EXPECT_EQ(accel_model_create_mlp(ctx, &m, &model), ACCEL_OK) << accel_last_error(ctx);
    EXPECT_EQ(accel_optimizer_create_sgd(ctx, model, nullptr, &opt), ACCEL_OK) << accel_last_error(ctx);
    if (prepare) {
      EXPECT_EQ(accel_prepare(ctx, model, opt, nullptr, nullptr), ACCEL_OK) << accel_last_error(ctx);
    }
  }
  ~Fixture() {
    accel_optimizer_destroy(opt);
    accel_model_destroy(model);
    accel_destroy(ctx);
  }
  std::vector<float> weights(size_t index = 0) {
    accel_tensor* t = nullptr;
    EXPECT_EQ(accel_model_parameter(ctx, model, index, &t), ACCEL_OK) << accel_last_error(ctx);
    size_t n = 0;
    accel_tensor_nbytes(t, &n);
    std::vector<float> v(n / sizeof(float));
    EXPECT_EQ(accel_tensor_copy_to_host(t, v.data(), n), ACCEL_OK);
    accel_tensor_destroy(t);
    return v;
  }
  // forward + cross-entropy on a fixed batch of 2 samples
  accel_tensor* loss(float scale = 1.0f) {
    accel_tensor* x = make_f32({2, 4}, {1 * scale, 2, 3, 4, -1, 0.5f, 0, 2});
    accel_tensor* y = make_i64({2}, {0, 2});
    accel_tensor *logits = nullptr, *l = nullptr;
    EXPECT_EQ(accel_model_forward(ctx, model, &x, 1, &logits), ACCEL_OK) << accel_last_error(ctx);
    EXPECT_EQ(accel_loss_cross_entropy(ctx, logits, y, &l), ACCEL_OK) << accel_last_error(ctx);
    accel_tensor_destroy(x);
    accel_tensor_destroy(y);
    accel_tensor_destroy(logits);
    return l;
  }
};

TEST(Version, HeaderMatchesLibrary) {
  EXPECT_EQ(accel_version_number(), ACCEL_VERSION_NUMBER);
  EXPECT_STREQ(accel_version_string(), ACCEL_VERSION_STRING);
  EXPECT_STREQ(accel_status_name(ACCEL_ERR_IO), "ACCEL_ERR_IO");
  EXPECT_STREQ(accel_status_name(static_cast<accel_status>(-999)), "ACCEL_ERR_UNKNOWN");
}

// ACCEL_PRECISION_AUTO: bf16 where the CPU has bf16 instructions (AVX-512 BF16 or AMX-BF16,
// read here with the compiler's own CPU probe, not the library's), else fp32, said once on
// stderr; ONEDNN_MAX_CPU_ISA below bf16 makes it fp32 on any CPU; explicit precisions stay.
TEST(Precision, AutoIsBf16WhereTheCpuHasItElseFp32SaidOnce) {
  ::unsetenv("ACCEL_MIXED_PRECISION");
  ::unsetenv("ONEDNN_MAX_CPU_ISA");
  ::unsetenv("DNNL_MAX_CPU_ISA");
  __builtin_cpu_init();
  const bool native = __builtin_cpu_supports("avx512bf16") || __builtin_cpu_supports("amx-bf16");
  auto resolved = [](accel_precision asked, const char* env) {
    accel_options o = ACCEL_OPTIONS_INIT;
    o.device = ACCEL_DEVICE_CPU;
    o.mixed_precision = asked;
    if (env) ::setenv("ACCEL_MIXED_PRECISION", env, 1);
    accel_context* ctx = nullptr;
    accel_precision p = ACCEL_PRECISION_AUTO;
    EXPECT_EQ(accel_init(&o, &ctx), ACCEL_OK) << accel_last_error(nullptr);
    EXPECT_EQ(accel_mixed_precision(ctx, &p), ACCEL_OK);
    EXPECT_EQ(accel_mixed_precision(ctx, nullptr), ACCEL_ERR_INVALID_ARGUMENT);
    accel_destroy(ctx);
    ::unsetenv("ACCEL_MIXED_PRECISION");
    return p;
  };
  testing::internal::CaptureStderr();
  EXPECT_EQ(resolved(ACCEL_PRECISION_AUTO, nullptr), native ? ACCEL_PRECISION_BF16 : ACCEL_PRECISION_NO);
  EXPECT_EQ(resolved(ACCEL_PRECISION_NO, "auto"), native ? ACCEL_PRECISION_BF16 : ACCEL_PRECISION_NO);
  EXPECT_EQ(resolved(ACCEL_PRECISION_BF16, nullptr), ACCEL_PRECISION_BF16);
  EXPECT_EQ(resolved(ACCEL_PRECISION_FP16, nullptr), ACCEL_PRECISION_FP16);
  EXPECT_EQ(resolved(ACCEL_PRECISION_NO, nullptr), ACCEL_PRECISION_NO);
  ::setenv("ONEDNN_MAX_CPU_ISA", "AVX2", 1);  // oneDNN without bf16 instructions, on any CPU
  EXPECT_EQ(resolved(ACCEL_PRECISION_AUTO, nullptr), ACCEL_PRECISION_NO);
  EXPECT_EQ(resolved(ACCEL_PRECISION_AUTO, nullptr), ACCEL_PRECISION_NO);
  EXPECT_EQ(resolved(ACCEL_PRECISION_BF16, nullptr), ACCEL_PRECISION_BF16);  // asked for: kept
  ::unsetenv("ONEDNN_MAX_CPU_ISA");
  const std::string err = testing::internal::GetCapturedStderr();
  size_t said = 0;
  for (size_t at = err.find("mixed precision auto: training in fp32"); at != std::string::npos;
       at = err.find("mixed precision auto: training in fp32", at + 1))
    ++said;
  EXPECT_EQ(said, 1u) << err;  // three contexts resolved to fp32 (two on a CPU without bf16): said once
  // the memory estimate is for a GPU not at hand: auto is refused there
  accel_memory_estimate_options eo = ACCEL_MEMORY_ESTIMATE_OPTIONS_INIT;
  eo.mixed_precision = ACCEL_PRECISION_AUTO;
  accel_memory_estimate e;
  std::memset(&e, 0, sizeof e);
  e.version = ACCEL_MEMORY_ESTIMATE_VERSION;
  EXPECT_EQ(accel_estimate_memory("llama-7b", &eo, &e), ACCEL_ERR_INVALID_ARGUMENT);
  EXPECT_TRUE(contains(accel_last_error(nullptr), "mixed_precision")) << accel_last_error(nullptr);
}

TEST(Tensor, RoundTripsEveryDtypeAndShape) {
  struct Case {
    accel_dtype dt;
    size_t size;
  } cases[] = {{ACCEL_FLOAT32, 4}, {ACCEL_FLOAT16, 2}, {ACCEL_BFLOAT16, 2}, {ACCEL_INT64, 8},
               {ACCEL_INT32, 4},   {ACCEL_UINT8, 1},   {ACCEL_FLOAT64, 8},  {ACCEL_INT8, 1}};
  for (const auto& c : cases) {
    ASSERT_EQ(accel_dtype_size(c.dt), c.size);
    for (std::vector<int64_t> shape : {std::vector<int64_t>{}, {5}, {2, 3}, {2, 1, 3, 2}, {0, 4}}) {
      int64_t numel = 1;
      for (auto d : shape) numel *= d;
      std::vector<uint8_t> bytes(static_cast<size_t>(numel) * c.size);
      for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<uint8_t>(i * 7 + 3);
      accel_tensor* t = nullptr;
      ASSERT_EQ(accel_tensor_create(c.dt, shape.data(), shape.size(), bytes.data(), &t), ACCEL_OK)
          << accel_last_error(nullptr);
      accel_dtype dt;
      size_t nd = 99, nb = 0;
      int64_t n = -1, dims[8] = {0};
      ASSERT_EQ(accel_tensor_dtype(t, &dt), ACCEL_OK);
      EXPECT_EQ(dt, c.dt);
      ASSERT_EQ(accel_tensor_ndim(t, &nd), ACCEL_OK);
      EXPECT_EQ(nd, shape.size());
      ASSERT_EQ(accel_tensor_shape(t, dims, 8), ACCEL_OK);
      EXPECT_EQ(std::vector<int64_t>(dims, dims + nd), shape);
      ASSERT_EQ(accel_tensor_numel(t, &n), ACCEL_OK);
      EXPECT_EQ(n, numel);
      ASSERT_EQ(accel_tensor_nbytes(t, &nb), ACCEL_OK);
      EXPECT_EQ(nb, bytes.size());
      std::vector<uint8_t> back(bytes.size() + 1, 0xAB);
      ASSERT_EQ(accel_tensor_copy_to_host(t, back.data(), bytes.size()), ACCEL_OK);
      EXPECT_TRUE(std::equal(bytes.begin(), bytes.end(), back.begin()));
      EXPECT_EQ(back.back(), 0xAB);  // nothing written past dst_bytes
      accel_tensor_destroy(t);
    }
  }
}

TEST(Tensor, ConvertsOnCopyAndReadsItems) {
  uint16_t bf16[2] = {0x3F80, 0xC040};  // 1.0, -3.0
  int64_t shape = 2;
  accel_tensor* t = nullptr;
  ASSERT_EQ(accel_tensor_create(ACCEL_BFLOAT16, &shape, 1, bf16, &t), ACCEL_OK);
  float f[2];
  ASSERT_EQ(accel_tensor_copy_to_host_as(t, ACCEL_FLOAT32, f, sizeof f), ACCEL_OK);
  EXPECT_EQ(f[0], 1.0f);
  EXPECT_EQ(f[1], -3.0f);
  double item = 0;
  EXPECT_EQ(accel_tensor_item(t, &item), ACCEL_ERR_INVALID_ARGUMENT);
  EXPECT_TRUE(contains(accel_last_error(nullptr), "2 elements"));
  accel_tensor_destroy(t);
  float one = 2.5f;
  ASSERT_EQ(accel_tensor_create(ACCEL_FLOAT32, nullptr, 0, &one, &t), ACCEL_OK);
  ASSERT_EQ(accel_tensor_item(t, &item), ACCEL_OK);
  EXPECT_EQ(item, 2.5);
  accel_tensor_destroy(t);
}

// A tensor larger than the machine's RAM + swap is refused before anything is allocated, with
// the limit named (where the kernel overcommits, the allocation would succeed and the copy
// meet the OOM killer).
TEST(Tensor, LargerThanTheMachineIsRefusedBeforeAllocating) {
  struct sysinfo si {};
  ASSERT_EQ(::sysinfo(&si), 0);
  const uint64_t machine = (static_cast<uint64_t>(si.totalram) + si.totalswap) * si.mem_unit;
  const uint64_t bytes = machine + (uint64_t{1} << 30);
  void* data = ::mmap(nullptr, bytes, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  ASSERT_NE(data, MAP_FAILED);
  const int64_t shape = static_cast<int64_t>(bytes);
  accel_tensor* t = nullptr;
  EXPECT_EQ(accel_tensor_create(ACCEL_UINT8, &shape, 1, data, &t), ACCEL_ERR_OUT_OF_MEMORY);
  const std::string msg = accel_last_error(nullptr);
  EXPECT_TRUE(contains(msg.c_str(), "is more than this machine can hold")) << msg;
  EXPECT_TRUE(contains(msg.c_str(), "RAM + swap") || contains(msg.c_str(), "cgroup")) << msg;
  EXPECT_EQ(t, nullptr);
  ::munmap(data, bytes);
}

TEST(Misuse, TensorArguments) {
  accel_tensor* t = nullptr;
  int64_t shape[2] = {2, 3};
  float data[6] = {0};
  EXPECT_EQ(accel_tensor_create(ACCEL_FLOAT32, shape, 2, data, nullptr), ACCEL_ERR_INVALID_ARGUMENT);
  EXPECT_TRUE(contains(accel_last_error(nullptr), "out is NULL"));
  EXPECT_EQ(accel_tensor_create(ACCEL_FLOAT32, shape, 2, nullptr, &t), ACCEL_ERR_INVALID_ARGUMENT);
  EXPECT_TRUE(contains(accel_last_error(nullptr), "data is NULL"));
  EXPECT_EQ(t, nullptr);
  EXPECT_EQ(accel_tensor_create(static_cast<accel_dtype>(42), shape, 2, data, &t), ACCEL_ERR_INVALID_ARGUMENT);
  EXPECT_TRUE(contains(accel_last_error(nullptr), "dtype must be an accel_dtype (0..7), got 42"));
  EXPECT_EQ(accel_tensor_create(static_cast<accel_dtype>(-1), shape, 2, data, &t), ACCEL_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(accel_dtype_size(static_cast<accel_dtype>(-1)), 0u);
  int64_t neg[2] = {2, -1};
  EXPECT_EQ(accel_tensor_create(ACCEL_FLOAT32, neg, 2, data, &t), ACCEL_ERR_INVALID_ARGUMENT);
  EXPECT_TRUE(contains(accel_last_error(nullptr), "shape[1] must be >= 0, got -1"));
  int64_t huge[2] = {INT64_MAX / 2, 1 << 20};
  EXPECT_EQ(accel_tensor_create(ACCEL_FLOAT32, huge, 2, data, &t), ACCEL_ERR_INVALID_ARGUMENT);
  ASSERT_EQ(accel_tensor_create(ACCEL_FLOAT32, shape, 2, data, &t), ACCEL_OK);
  float small[5];
  EXPECT_EQ(accel_tensor_copy_to_host(t, small, sizeof small), ACCEL_ERR_INVALID_ARGUMENT);
  EXPECT_TRUE(contains(accel_last_error(nullptr), "holds 24 bytes, dst_bytes is 20"));
  int64_t dims[1];
  EXPECT_EQ(accel_tensor_shape(t, dims, 1), ACCEL_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(accel_tensor_numel(nullptr, dims), ACCEL_ERR_INVALID_ARGUMENT);
  EXPECT_TRUE(contains(accel_last_error(nullptr), "tensor is NULL"));
  accel_tensor_destroy(t);
  accel_tensor_destroy(nullptr);
}

TEST(Misuse, OptionsWithUnknownVersionOrBadValues) {
  accel_context* ctx = nullptr;
  accel_options o = ACCEL_OPTIONS_INIT;
  o.version = 99;
  EXPECT_EQ(accel_init(&o, &ctx), ACCEL_ERR_INVALID_ARGUMENT);
  EXPECT_TRUE(contains(accel_last_error(nullptr), "version 99")) << accel_last_error(nullptr);
  EXPECT_EQ(ctx, nullptr);
  o.version = 0;
  EXPECT_EQ(accel_init(&o, &ctx), ACCEL_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(accel_options_init(&o, 7), ACCEL_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(accel_options_init(nullptr, ACCEL_OPTIONS_VERSION), ACCEL_ERR_INVALID_ARGUMENT);
  ASSERT_EQ(accel_options_init(&o, ACCEL_OPTIONS_VERSION), ACCEL_OK);
  EXPECT_EQ(o.gradient_accumulation_steps, 1);
  EXPECT_EQ(o.loss_scale_init, 65536.0);
  EXPECT_EQ(o.loss_scale_growth_interval, 2000);
  o.gradient_accumulation_steps = 0;
  EXPECT_EQ(accel_init(&o, &ctx), ACCEL_ERR_INVALID_ARGUMENT);
  EXPECT_TRUE(contains(accel_last_error(nullptr), "gradient_accumulation_steps"));
  o.gradient_accumulation_steps = 1;
  o.mixed_precision = static_cast<accel_precision>(5);
  EXPECT_EQ(accel_init(&o, &ctx), ACCEL_ERR_INVALID_ARGUMENT);
  o.mixed_precision = ACCEL_PRECISION_FP16;
  o.loss_scale_backoff_factor = 1.5;
  EXPECT_EQ(accel_init(&o, &ctx), ACCEL_ERR_INVALID_ARGUMENT);
  EXPECT_TRUE(contains(accel_last_error(nullptr), "loss_scale_backoff_factor"));
  EXPECT_EQ(accel_init(nullptr, nullptr), ACCEL_ERR_INVALID_ARGUMENT);

  Fixture f;
  accel_mlp_options m = ACCEL_MLP_OPTIONS_INIT;
  m.version = 3;
  accel_model* model = nullptr;
  EXPECT_EQ(accel_model_create_mlp(f.ctx, &m, &model), ACCEL_ERR_INVALID_ARGUMENT);
  EXPECT_TRUE(contains(accel_last_error(f.ctx), "accel_mlp_options version 3"));
  m = ACCEL_MLP_OPTIONS_INIT;
  int64_t sizes[] = {2, 2};
  m.layer_sizes = sizes;
  m.num_layer_sizes = 2;
  m.activation = static_cast<accel_activation>(-3);
  EXPECT_EQ(accel_model_create_mlp(f.ctx, &m, &model), ACCEL_ERR_INVALID_ARGUMENT);
  EXPECT_TRUE(contains(accel_last_error(f.ctx), "activation must be an accel_activation (0..3), got -3"));
  m.activation = ACCEL_ACT_TANH;
  m.dropout = 1.0;
  EXPECT_EQ(accel_model_create_mlp(f.ctx, &m, &model), ACCEL_ERR_INVALID_ARGUMENT);
  EXPECT_TRUE(contains(accel_last_error(f.ctx), "dropout"));
  m.dropout = 0.0;
  m.num_layer_sizes = 1;
  EXPECT_EQ(accel_model_create_mlp(f.ctx, &m, &model), ACCEL_ERR_INVALID_ARGUMENT);
  EXPECT_TRUE(contains(accel_last_error(f.ctx), "num_layer_sizes must be >= 2"));
  EXPECT_EQ(model, nullptr);
  accel_sgd_options s = ACCEL_SGD_OPTIONS_INIT;
  s.lr = -1;
  accel_optimizer* opt = nullptr;
  EXPECT_EQ(accel_optimizer_create_sgd(f.ctx, f.model, &s, &opt), ACCEL_ERR_INVALID_ARGUMENT);
  EXPECT_TRUE(contains(accel_last_error(f.ctx), "lr must be finite and > 0"));
  s = ACCEL_SGD_OPTIONS_INIT;
  s.nesterov = 1;
  EXPECT_EQ(accel_optimizer_create_sgd(f.ctx, f.model, &s, &opt), ACCEL_ERR_INVALID_ARGUMENT);
  EXPECT_TRUE(contains(accel_last_error(f.ctx), "nesterov needs momentum > 0"));
  accel_adamw_options a = ACCEL_ADAMW_OPTIONS_INIT;
  a.beta2 = 1.0;
  EXPECT_EQ(accel_optimizer_create_adamw(f.ctx, f.model, &a, &opt), ACCEL_ERR_INVALID_ARGUMENT);
  accel_scheduler_options so = ACCEL_SCHEDULER_OPTIONS_INIT;
  so.kind = ACCEL_SCHEDULE_COSINE;
  so.warmup_steps = 10;
  so.total_steps = 5;
  accel_scheduler* sched = nullptr;
  EXPECT_EQ(accel_scheduler_create(f.ctx, f.opt, &so, &sched), ACCEL_ERR_INVALID_ARGUMENT);
  EXPECT_TRUE(contains(accel_last_error(f.ctx), "total_steps"));
  EXPECT_EQ(opt, nullptr);
  EXPECT_EQ(sched, nullptr);
}

TEST(Misuse, CudaRequestedWithoutCuda) {
  accel_options o = ACCEL_OPTIONS_INIT;
  o.device = ACCEL_DEVICE_AUTO;
  accel_context* ctx = nullptr;
  ASSERT_EQ(accel_init(&o, &ctx), ACCEL_OK);
  accel_device d;
  ASSERT_EQ(accel_device_kind(ctx, &d), ACCEL_OK);
  accel_destroy(ctx);
  if (d == ACCEL_DEVICE_CUDA) GTEST_SKIP() << "this machine has CUDA";
  o.device = ACCEL_DEVICE_CUDA;
  EXPECT_EQ(accel_init(&o, &ctx), ACCEL_ERR_UNSUPPORTED);
  EXPECT_TRUE(contains(accel_last_error(nullptr), "CUDA is not available"));
}

TEST(Misuse, NullHandles) {
  Fixture f;
  accel_tensor* out = nullptr;
  EXPECT_EQ(accel_model_forward(f.ctx, nullptr, nullptr, 0, &out), ACCEL_ERR_INVALID_ARGUMENT);
  EXPECT_TRUE(contains(accel_last_error(f.ctx), "model is NULL"));
  EXPECT_EQ(accel_model_forward(nullptr, f.model, nullptr, 0, &out), ACCEL_ERR_INVALID_ARGUMENT);
  EXPECT_TRUE(contains(accel_last_error(nullptr), "ctx is NULL"));
  accel_tensor* none[1] = {nullptr};
  EXPECT_EQ(accel_model_forward(f.ctx, f.model, none, 1, &out), ACCEL_ERR_INVALID_ARGUMENT);
  EXPECT_TRUE(contains(accel_last_error(f.ctx), "inputs[0] is NULL"));
  EXPECT_EQ(accel_backward(f.ctx, nullptr), ACCEL_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(accel_step(nullptr, nullptr), ACCEL_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(accel_prepare(nullptr, nullptr, nullptr, nullptr, nullptr), ACCEL_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(accel_loss_cross_entropy(f.ctx, nullptr, nullptr, &out), ACCEL_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(accel_model_load_torchscript(f.ctx, nullptr, nullptr), ACCEL_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(accel_dataloader_next(f.ctx, nullptr, &out, nullptr), ACCEL_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(accel_optimizer_lr(nullptr, nullptr), ACCEL_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(out, nullptr);
  // every destroy accepts NULL
  accel_destroy(nullptr);
  accel_model_destroy(nullptr);
  accel_optimizer_destroy(nullptr);
  accel_scheduler_destroy(nullptr);
  accel_dataloader_destroy(nullptr);
  accel_tensor_destroy(nullptr);
}

TEST(Misuse, ShapeAndDtypeMismatches) {
  Fixture f;
  accel_tensor* out = nullptr;
  accel_tensor* bad = make_f32({4, 5}, std::vector<float>(20, 0.f));
  EXPECT_EQ(accel_model_forward(f.ctx, f.model, &bad, 1, &out), ACCEL_ERR_INVALID_ARGUMENT);
  EXPECT_TRUE(contains(accel_last_error(f.ctx), "expects input [batch, 4], got [4, 5]")) << accel_last_error(f.ctx);
  accel_tensor* ints = make_i64({2, 4}, std::vector<int64_t>(8, 1));
  EXPECT_EQ(accel_model_forward(f.ctx, f.model, &ints, 1, &out), ACCEL_ERR_INVALID_ARGUMENT);
  EXPECT_TRUE(contains(accel_last_error(f.ctx), "floating-point input, got Long")) << accel_last_error(f.ctx);
  accel_tensor* two[2] = {bad, bad};
  EXPECT_EQ(accel_model_forward(f.ctx, f.model, two, 2, &out), ACCEL_ERR_INVALID_ARGUMENT);
  EXPECT_TRUE(contains(accel_last_error(f.ctx), "num_inputs must be 1 (the MLP takes one input tensor), got 2"));
  EXPECT_EQ(out, nullptr);

  accel_tensor* logits = make_f32({2, 3}, {0, 1, 2, 3, 4, 5});
  accel_tensor* y3 = make_i64({3}, {0, 1, 2});
  EXPECT_EQ(accel_loss_cross_entropy(f.ctx, logits, y3, &out), ACCEL_ERR_INVALID_ARGUMENT);
  EXPECT_TRUE(contains(accel_last_error(f.ctx), "batch sizes differ")) << accel_last_error(f.ctx);
  accel_tensor* yrange = make_i64({2}, {0, 3});
  EXPECT_EQ(accel_loss_cross_entropy(f.ctx, logits, yrange, &out), ACCEL_ERR_INVALID_ARGUMENT);
  EXPECT_TRUE(contains(accel_last_error(f.ctx), "targets: class index 3 is out of range for 3 classes")) << accel_last_error(f.ctx);
  accel_tensor* yfloat = make_f32({2}, {0, 1});
  EXPECT_EQ(accel_loss_cross_entropy(f.ctx, logits, yfloat, &out), ACCEL_ERR_INVALID_ARGUMENT);
  EXPECT_TRUE(contains(accel_last_error(f.ctx), "targets must be int64"));
  accel_tensor* target = make_f32({3, 2}, std::vector<float>(6, 0.f));
  EXPECT_EQ(accel_loss_mse(f.ctx, logits, target, &out), ACCEL_ERR_INVALID_ARGUMENT);
  EXPECT_TRUE(contains(accel_last_error(f.ctx), "MSE shapes differ: input [2, 3], target [3, 2]"));
  EXPECT_EQ(out, nullptr);

  // the loader checks sample counts and batch sizes
  accel_dataloader* dl = nullptr;
  accel_dataloader_options lo = ACCEL_DATALOADER_OPTIONS_INIT;
  EXPECT_EQ(accel_dataloader_create(f.ctx, logits, y3, &lo, &dl), ACCEL_ERR_INVALID_ARGUMENT);
  EXPECT_TRUE(contains(accel_last_error(f.ctx), "differ in the number of samples"));
  lo.batch_size = 0;
  EXPECT_EQ(accel_dataloader_create(f.ctx, logits, nullptr, &lo, &dl), ACCEL_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(dl, nullptr);
  // fewer samples than a batch with drop_last: no batch, not an error (as Accelerate and PyTorch)
  lo.batch_size = 5;
  lo.drop_last = 1;
  ASSERT_EQ(accel_dataloader_create(f.ctx, logits, nullptr, &lo, &dl), ACCEL_OK) << accel_last_error(f.ctx);
  int64_t batches = -1;
  EXPECT_EQ(accel_dataloader_num_batches(dl, &batches), ACCEL_OK);
  EXPECT_EQ(batches, 0);
  accel_tensor *in = nullptr, *tg = nullptr;
  EXPECT_EQ(accel_dataloader_next(f.ctx, dl, &in, &tg), ACCEL_OK);
  EXPECT_EQ(in, nullptr);
  int64_t epoch = -1;
  EXPECT_EQ(accel_dataloader_epoch(dl, &epoch), ACCEL_OK);
  EXPECT_EQ(epoch, 1);  // the empty epoch ended
  accel_dataloader_destroy(dl);
  for (auto* t : {bad, ints, logits, y3, yrange, yfloat, target}) accel_tensor_destroy(t);
}

TEST(Misuse, TorchScriptFileMissingOrNotAModel) {
  Fixture f;
  accel_model* m = nullptr;
  std::string missing = tmp_path("missing.pt");
  EXPECT_EQ(accel_model_load_torchscript(f.ctx, missing.c_str(), &m), ACCEL_ERR_IO);
  EXPECT_TRUE(contains(accel_last_error(f.ctx), missing)) << accel_last_error(f.ctx);
  EXPECT_TRUE(contains(accel_last_error(f.ctx), "No such file"));
  std::string junk = tmp_path("junk.pt");
  std::ofstream(junk) << "this is not a TorchScript archive\n";
  EXPECT_EQ(accel_model_load_torchscript(f.ctx, junk.c_str(), &m), ACCEL_ERR_FORMAT);
  EXPECT_TRUE(contains(accel_last_error(f.ctx), "is not a TorchScript module")) << accel_last_error(f.ctx);
  std::string dir = tmp_path("");
  EXPECT_EQ(accel_model_load_torchscript(f.ctx, "/", &m), ACCEL_ERR_IO);
  EXPECT_EQ(m, nullptr);
  std::remove(junk.c_str());
}

TEST(Misuse, StepAndBackwardBeforePrepare) {
  Fixture f(ACCEL_PRECISION_NO, /*prepare=*/false);
  accel_step_result r;
  EXPECT_EQ(accel_step(f.ctx, &r), ACCEL_ERR_INVALID_STATE);
  EXPECT_TRUE(contains(accel_last_error(f.ctx), "before accel_prepare")) << accel_last_error(f.ctx);
  accel_tensor* l = f.loss();
  EXPECT_EQ(accel_backward(f.ctx, l), ACCEL_ERR_INVALID_STATE);
  EXPECT_EQ(accel_clip_grad_norm(f.ctx, 1.0, nullptr), ACCEL_ERR_INVALID_STATE);
  // prepare binds the model only: step still needs the optimizer
  ASSERT_OK(f.ctx, accel_prepare(f.ctx, f.model, nullptr, nullptr, nullptr));
  EXPECT_EQ(accel_step(f.ctx, &r), ACCEL_ERR_INVALID_STATE);
  ASSERT_OK(f.ctx, accel_prepare(f.ctx, nullptr, f.opt, nullptr, nullptr));
  ASSERT_OK(f.ctx, accel_backward(f.ctx, l));
  ASSERT_OK(f.ctx, accel_step(f.ctx, &r));
  EXPECT_EQ(r.stepped, 1);
  accel_tensor_destroy(l);
}

// A loss that outlived its context is refused by a new context, also one that got the dead
// context's address (the Rust binding's crash-safety test found it accepted there).
TEST(Misuse, ALossFromADestroyedContextIsRefusedByANewOneAtItsAddress) {
  bool reused = false;
  for (int attempt = 0; attempt < 20 && !reused; ++attempt) {
    auto* dead = new Fixture(ACCEL_PRECISION_NO, true, 1, ACCEL_DEVICE_CPU);
    const void* at = dead->ctx;
    accel_tensor* l = dead->loss();
    delete dead;
    Fixture f(ACCEL_PRECISION_NO, true, 1, ACCEL_DEVICE_CPU);
    reused = static_cast<const void*>(f.ctx) == at;
    EXPECT_EQ(accel_backward(f.ctx, l), ACCEL_ERR_INVALID_ARGUMENT) << "attempt " << attempt;
    EXPECT_TRUE(contains(accel_last_error(f.ctx), "loss belongs to another context")) << accel_last_error(f.ctx);
    accel_tensor_destroy(l);
  }
  if (!reused) std::fprintf(stderr, "no context got a destroyed one's address in 20 tries: checked without reuse\n");
}

TEST(Misuse, PrepareWithForeignObjects) {
  Fixture f, g(ACCEL_PRECISION_NO, false);
  EXPECT_EQ(accel_prepare(f.ctx, g.model, nullptr, nullptr, nullptr), ACCEL_ERR_INVALID_ARGUMENT);
  EXPECT_TRUE(contains(accel_last_error(f.ctx), "another context"));
  EXPECT_EQ(accel_prepare(f.ctx, nullptr, g.opt, nullptr, nullptr), ACCEL_ERR_INVALID_ARGUMENT);
  EXPECT_TRUE(contains(accel_last_error(f.ctx), "optimizer belongs to another context"));
  // a second model on the same context
  int64_t sizes[] = {4, 3};
  accel_mlp_options m = ACCEL_MLP_OPTIONS_INIT;
  m.layer_sizes = sizes;
  m.num_layer_sizes = 2;
  accel_model* second = nullptr;
  ASSERT_OK(f.ctx, accel_model_create_mlp(f.ctx, &m, &second));
  EXPECT_EQ(accel_prepare(f.ctx, second, nullptr, nullptr, nullptr), ACCEL_ERR_INVALID_STATE);
  EXPECT_TRUE(contains(accel_last_error(f.ctx), "already trains another model"));
  accel_optimizer* other = nullptr;
  ASSERT_OK(f.ctx, accel_optimizer_create_sgd(f.ctx, second, nullptr, &other));
  EXPECT_EQ(accel_prepare(f.ctx, f.model, other, nullptr, nullptr), ACCEL_ERR_INVALID_ARGUMENT);
  EXPECT_TRUE(contains(accel_last_error(f.ctx), "different model"));
  accel_optimizer_destroy(other);
  accel_model_destroy(second);
}

TEST(Misuse, NanLossInFp32IsReportedAndChangesNothing) {
  Fixture f;
  auto before = f.weights();
  accel_tensor* good = f.loss();
  accel_tensor* nan_loss = nullptr;
  {
    accel_tensor* x = make_f32({1, 4}, {1, 2, 3, 4});
    accel_tensor* y = make_f32({1, 3}, {NAN, 0, 0});
    accel_tensor* pred = nullptr;
    ASSERT_OK(f.ctx, accel_model_forward(f.ctx, f.model, &x, 1, &pred));
    ASSERT_OK(f.ctx, accel_loss_mse(f.ctx, pred, y, &nan_loss));
    accel_tensor_destroy(x);
    accel_tensor_destroy(y);
    accel_tensor_destroy(pred);
  }
  EXPECT_EQ(accel_backward(f.ctx, nan_loss), ACCEL_ERR_NON_FINITE);
  EXPECT_TRUE(contains(accel_last_error(f.ctx), "the loss is nan")) << accel_last_error(f.ctx);
  accel_step_result r;
  ASSERT_OK(f.ctx, accel_step(f.ctx, &r));
  EXPECT_EQ(r.stepped, 0);
  EXPECT_EQ(r.micro_steps, 0);
  EXPECT_EQ(f.weights(), before);
  // training continues normally afterwards
  ASSERT_OK(f.ctx, accel_backward(f.ctx, good));
  ASSERT_OK(f.ctx, accel_step(f.ctx, &r));
  EXPECT_EQ(r.stepped, 1);
  EXPECT_NE(f.weights(), before);
  accel_tensor_destroy(good);
  accel_tensor_destroy(nan_loss);
}

TEST(Misuse, NanLossInFp16SkipsTheStep) {
  Fixture f(ACCEL_PRECISION_FP16);
  auto before = f.weights();
  accel_tensor* x = make_f32({1, 4}, {1, 2, 3, 4});
  accel_tensor* y = make_f32({1, 3}, {NAN, 0, 0});
  accel_tensor *pred = nullptr, *loss = nullptr;
  ASSERT_OK(f.ctx, accel_model_forward(f.ctx, f.model, &x, 1, &pred));
  ASSERT_OK(f.ctx, accel_loss_mse(f.ctx, pred, y, &loss));
  ASSERT_OK(f.ctx, accel_backward(f.ctx, loss));
  double norm = 0;
  ASSERT_OK(f.ctx, accel_clip_grad_norm(f.ctx, 1.0, &norm));
  EXPECT_TRUE(std::isnan(norm));
  accel_step_result r;
  ASSERT_OK(f.ctx, accel_step(f.ctx, &r));
  EXPECT_EQ(r.stepped, 0);
  EXPECT_EQ(r.skipped, 1);
  EXPECT_EQ(r.sync_step, 1);
  EXPECT_EQ(r.loss_scale, 32768.0);
  EXPECT_EQ(r.optimizer_steps, 0);
  EXPECT_EQ(f.weights(), before);
  for (auto* t : {x, y, pred, loss}) accel_tensor_destroy(t);
}

TEST(Misuse, LossWithoutGraph) {
  Fixture f;
  ASSERT_OK(f.ctx, accel_model_set_training(f.ctx, f.model, 0));
  accel_tensor* l = f.loss();
  EXPECT_EQ(accel_backward(f.ctx, l), ACCEL_ERR_INVALID_ARGUMENT);
  EXPECT_TRUE(contains(accel_last_error(f.ctx), "no autograd graph"));
  accel_tensor_destroy(l);
  accel_tensor* not_scalar = make_f32({2}, {1, 2});
  EXPECT_EQ(accel_backward(f.ctx, not_scalar), ACCEL_ERR_INVALID_ARGUMENT);
  EXPECT_TRUE(contains(accel_last_error(f.ctx), "one element"));
  accel_tensor_destroy(not_scalar);
}

TEST(Errors, LastErrorIsPerContextAndPerThread) {
  Fixture a, b;
  EXPECT_STREQ(accel_last_error(a.ctx), "");
  EXPECT_EQ(accel_clip_grad_norm(a.ctx, -1.0, nullptr), ACCEL_ERR_INVALID_ARGUMENT);
  EXPECT_TRUE(contains(accel_last_error(a.ctx), "accel_clip_grad_norm: max_norm must be finite and > 0"));
  EXPECT_STREQ(accel_last_error(b.ctx), "");
  // a failure on another thread does not touch this thread's slot
  std::string here = accel_last_error(nullptr);
  std::thread([] {
    accel_tensor* t = nullptr;
    EXPECT_EQ(accel_tensor_create(ACCEL_FLOAT32, nullptr, 1, nullptr, &t), ACCEL_ERR_INVALID_ARGUMENT);
    EXPECT_TRUE(contains(accel_last_error(nullptr), "shape is NULL"));
  }).join();
  EXPECT_EQ(here, accel_last_error(nullptr));
}

TEST(Model, ParametersNamesAndSafetensorsExport) {
  Fixture f;
  size_t n = 0;
  int64_t elements = 0;
  ASSERT_OK(f.ctx, accel_model_num_parameters(f.model, &n, &elements));
  EXPECT_EQ(n, 4u);
  EXPECT_EQ(elements, 4 * 8 + 8 + 8 * 3 + 3);
  const char* name = nullptr;
  ASSERT_OK(f.ctx, accel_model_parameter_name(f.model, 2, &name));
  EXPECT_STREQ(name, "layers.1.weight");
  EXPECT_EQ(accel_model_parameter_name(f.model, 4, &name), ACCEL_ERR_INVALID_ARGUMENT);
  // initialisation follows torch.nn.Linear: U(-1/sqrt(fan_in), 1/sqrt(fan_in))
  for (float w : f.weights(0)) EXPECT_LE(std::fabs(w), 0.5f);

  std::string path = tmp_path("model.safetensors");
  ASSERT_OK(f.ctx, accel_save_model(f.ctx, f.model, path.c_str()));
  std::ifstream in(path, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  ASSERT_GE(bytes.size(), 8u);
  uint64_t hlen = 0;
  for (int i = 7; i >= 0; --i) hlen = (hlen << 8) | static_cast<uint8_t>(bytes[i]);
  EXPECT_EQ((8 + hlen) % 8, 0u);
  std::string header = bytes.substr(8, hlen);
  EXPECT_NE(header.find("\"layers.0.weight\":{\"dtype\":\"F32\",\"shape\":[8,4],\"data_offsets\":[0,128]}"),
            std::string::npos)
      << header;
  ASSERT_EQ(bytes.size(), 8 + hlen + elements * 4);
  auto w0 = f.weights(0);
  EXPECT_EQ(std::memcmp(bytes.data() + 8 + hlen, w0.data(), w0.size() * 4), 0);
  std::remove(path.c_str());
  EXPECT_EQ(accel_save_model(f.ctx, f.model, "/nonexistent-dir/x.safetensors"), ACCEL_ERR_IO);
  EXPECT_TRUE(contains(accel_last_error(f.ctx), "/nonexistent-dir/x.safetensors"));
}

TEST(Training, AccumulationStepsOnlyEveryKthMicroBatchAndAtTheEndOfTheLoader) {
  Fixture f(ACCEL_PRECISION_NO, /*prepare=*/false, /*accum=*/4);
  // 10 batches of 2: real steps after micro-batches 4, 8 and 10 (end of the loader)
  std::vector<float> xs(20 * 4);
  std::vector<int64_t> ys(20);
  for (size_t i = 0; i < xs.size(); ++i) xs[i] = static_cast<float>((i * 37) % 11) / 11.0f;
  for (size_t i = 0; i < ys.size(); ++i) ys[i] = static_cast<int64_t>(i % 3);
  accel_tensor* X = make_f32({20, 4}, xs);
  accel_tensor* Y = make_i64({20}, ys);
  accel_dataloader_options lo = ACCEL_DATALOADER_OPTIONS_INIT;
  lo.batch_size = 2;
  accel_dataloader* dl = nullptr;
  ASSERT_OK(f.ctx, accel_dataloader_create(f.ctx, X, Y, &lo, &dl));
  accel_scheduler_options so = ACCEL_SCHEDULER_OPTIONS_INIT;
  so.kind = ACCEL_SCHEDULE_LINEAR;
  so.total_steps = 100;
  accel_scheduler* sched = nullptr;
  ASSERT_OK(f.ctx, accel_scheduler_create(f.ctx, f.opt, &so, &sched));
  ASSERT_OK(f.ctx, accel_prepare(f.ctx, f.model, f.opt, sched, dl));
  std::vector<int> stepped, synced;
  for (int epoch = 0; epoch < 2; ++epoch) {
    for (;;) {
      accel_tensor *x = nullptr, *y = nullptr, *logits = nullptr, *loss = nullptr;
      ASSERT_OK(f.ctx, accel_dataloader_next(f.ctx, dl, &x, &y));
      if (!x) break;
      ASSERT_OK(f.ctx, accel_model_forward(f.ctx, f.model, &x, 1, &logits));
      ASSERT_OK(f.ctx, accel_loss_cross_entropy(f.ctx, logits, y, &loss));
      ASSERT_OK(f.ctx, accel_backward(f.ctx, loss));
      int sync = -1;
      ASSERT_OK(f.ctx, accel_sync_gradients(f.ctx, &sync));
      synced.push_back(sync);
      double norm = 0;
      ASSERT_OK(f.ctx, accel_clip_grad_norm(f.ctx, 100.0, &norm));
      EXPECT_EQ(std::isnan(norm), sync == 0);
      accel_step_result r;
      ASSERT_OK(f.ctx, accel_step(f.ctx, &r));
      stepped.push_back(r.stepped);
      for (auto* t : {x, y, logits, loss}) accel_tensor_destroy(t);
    }
    int64_t e = -1;
    ASSERT_OK(f.ctx, accel_dataloader_epoch(dl, &e));
    EXPECT_EQ(e, epoch + 1);
  }
  std::vector<int> expect = {0, 0, 0, 1, 0, 0, 0, 1, 0, 1};
  expect.insert(expect.end(), expect.begin(), expect.end());
  EXPECT_EQ(stepped, expect);
  EXPECT_EQ(synced, expect);
  int64_t steps = 0;
  ASSERT_OK(f.ctx, accel_scheduler_steps(sched, &steps));
  EXPECT_EQ(steps, 6);
  double lr = 0;
  ASSERT_OK(f.ctx, accel_optimizer_lr(f.opt, &lr));
  EXPECT_DOUBLE_EQ(lr, 0.01 * (100 - 6) / 100.0);
  accel_tensor_destroy(X);
  accel_tensor_destroy(Y);
  accel_scheduler_destroy(sched);
  accel_dataloader_destroy(dl);
}

TEST(Training, DestroyOrderDoesNotMatter) {
  auto* f = new Fixture();
  accel_tensor* l = f->loss();
  accel_destroy(f->ctx);  // the context first: the model and optimizer stay valid to destroy
  f->ctx = nullptr;
  accel_tensor_destroy(l);
  delete f;
}


// ---------------------------------------------------------------------------------------
// The simulator through the C ABI

struct SimCase {
  accel_reduce_op op;
  std::vector<float> got[8];
  std::vector<int32_t> index, size;
};

accel_status reduce_rank(accel_context* ctx, void* user) {
  auto* c = static_cast<SimCase*>(user);
  int32_t rank = -1, n = -1;
  accel_status s = accel_process_index(ctx, &rank);
  if (s == ACCEL_OK) s = accel_num_processes(ctx, &n);
  if (s != ACCEL_OK) return s;
  c->index[rank] = rank;
  c->size[rank] = n;
  std::vector<float> mine = {static_cast<float>(rank + 1), static_cast<float>(2 * rank), -1.0f};
  int64_t shape = 3;
  accel_tensor *t = nullptr, *r = nullptr;
  if ((s = accel_tensor_create(ACCEL_FLOAT32, &shape, 1, mine.data(), &t)) != ACCEL_OK) return s;
  s = accel_reduce(ctx, t, c->op, &r);
  if (s == ACCEL_OK) {
    c->got[rank].resize(3);
    s = accel_tensor_copy_to_host(r, c->got[rank].data(), 12);
  }
  if (s == ACCEL_OK) s = accel_barrier(ctx);
  accel_tensor_destroy(t);
  accel_tensor_destroy(r);
  return s;
}

TEST(Sim, ReduceAcrossFourRanks) {
  accel_sim_options so = ACCEL_SIM_OPTIONS_INIT;
  so.world_size = 4;
  struct Want {
    accel_reduce_op op;
    std::vector<float> v;
  } wants[] = {{ACCEL_REDUCE_SUM, {10, 12, -4}}, {ACCEL_REDUCE_MEAN, {2.5f, 3, -1}}, {ACCEL_REDUCE_MAX, {4, 6, -1}},
               {ACCEL_REDUCE_MIN, {1, 0, -1}},   {ACCEL_REDUCE_PROD, {24, 0, 1}}};
  for (const auto& w : wants) {
    SimCase c;
    c.op = w.op;
    c.index.assign(4, -1);
    c.size.assign(4, -1);
    accel_sim_report* rep = nullptr;
    ASSERT_EQ(accel_sim_run(&so, nullptr, reduce_rank, &c, &rep), ACCEL_OK) << accel_last_error(nullptr);
    for (int r = 0; r < 4; ++r) {
      EXPECT_EQ(c.got[r], w.v) << "op " << w.op << " rank " << r;
      EXPECT_EQ(c.index[r], r);
      EXPECT_EQ(c.size[r], 4);
    }
    int32_t n = 0;
    ASSERT_EQ(accel_sim_report_world_size(rep, &n), ACCEL_OK);
    EXPECT_EQ(n, 4);
    accel_status st;
    const char* err = nullptr;
    uint64_t peak = 0;
    ASSERT_EQ(accel_sim_report_rank(rep, 3, &st, &err, &peak), ACCEL_OK);
    EXPECT_EQ(st, ACCEL_OK);
    EXPECT_STREQ(err, "");
    EXPECT_GE(peak, 12u);  // at least the tensors it made
    double predicted = 0;
    ASSERT_EQ(accel_sim_report_predicted_seconds(rep, &predicted), ACCEL_OK);
    EXPECT_GT(predicted, 0.0);
    EXPECT_EQ(accel_sim_report_rank(rep, 4, &st, nullptr, nullptr), ACCEL_ERR_INVALID_ARGUMENT);
    accel_sim_report_destroy(rep);
  }
  // a single process reduces to itself
  Fixture f;
  float v[2] = {3, 4};
  int64_t shape = 2;
  accel_tensor *t = nullptr, *r = nullptr;
  ASSERT_EQ(accel_tensor_create(ACCEL_FLOAT32, &shape, 1, v, &t), ACCEL_OK);
  ASSERT_OK(f.ctx, accel_reduce(f.ctx, t, ACCEL_REDUCE_MEAN, &r));
  float back[2];
  ASSERT_EQ(accel_tensor_copy_to_host(r, back, sizeof back), ACCEL_OK);
  EXPECT_EQ(back[0], 3.f);
  EXPECT_EQ(accel_reduce(f.ctx, t, static_cast<accel_reduce_op>(17), &r), ACCEL_ERR_INVALID_ARGUMENT);
  int32_t idx = -1, n = -1;
  ASSERT_OK(f.ctx, accel_process_index(f.ctx, &idx));
  ASSERT_OK(f.ctx, accel_num_processes(f.ctx, &n));
  EXPECT_EQ(idx, 0);
  EXPECT_EQ(n, 1);
  ASSERT_OK(f.ctx, accel_barrier(f.ctx));
  accel_tensor_destroy(t);
  accel_tensor_destroy(r);
}

accel_status big_alloc_on_rank1(accel_context* ctx, void*) {
  int32_t rank = 0;
  accel_process_index(ctx, &rank);
  std::vector<float> data(rank == 1 ? (1 << 19) : 16, 1.f);  // 2 MiB on rank 1
  int64_t shape = static_cast<int64_t>(data.size());
  accel_tensor* t = nullptr;
  accel_status s = accel_tensor_create(ACCEL_FLOAT32, &shape, 1, data.data(), &t);
  accel_tensor_destroy(t);
  return s;
}

TEST(Sim, OutOfMemoryOnOneRankIsReportedLikeCuda) {
  accel_sim_options so = ACCEL_SIM_OPTIONS_INIT;
  so.world_size = 3;
  so.device_memory = "1MiB";
  accel_sim_report* rep = nullptr;
  EXPECT_EQ(accel_sim_run(&so, nullptr, big_alloc_on_rank1, nullptr, &rep), ACCEL_ERR_OUT_OF_MEMORY);
  EXPECT_TRUE(contains(accel_last_error(nullptr), "rank 1: accel_tensor_create: libtorch: CUDA out of memory (simulated). Tried to allocate 2.00 MiB (rank 1; 1.00 MiB total capacity"))
      << accel_last_error(nullptr);
  ASSERT_NE(rep, nullptr);
  accel_status st;
  ASSERT_EQ(accel_sim_report_rank(rep, 1, &st, nullptr, nullptr), ACCEL_OK);
  EXPECT_EQ(st, ACCEL_ERR_OUT_OF_MEMORY);
  ASSERT_EQ(accel_sim_report_rank(rep, 0, &st, nullptr, nullptr), ACCEL_OK);
  EXPECT_EQ(st, ACCEL_OK);
  accel_sim_report_destroy(rep);
}

accel_status mismatched_reduce(accel_context* ctx, void*) {
  int32_t rank = 0;
  accel_process_index(ctx, &rank);
  std::vector<float> data(rank == 1 ? 4 : 3, 1.f);
  int64_t shape = static_cast<int64_t>(data.size());
  accel_tensor *t = nullptr, *r = nullptr;
  accel_status s = accel_tensor_create(ACCEL_FLOAT32, &shape, 1, data.data(), &t);
  if (s == ACCEL_OK) s = accel_reduce(ctx, t, ACCEL_REDUCE_SUM, &r);
  accel_tensor_destroy(t);
  accel_tensor_destroy(r);
  return s;
}

TEST(Sim, MismatchedCollectivesFailInsteadOfHanging) {
  accel_sim_options so = ACCEL_SIM_OPTIONS_INIT;
  so.world_size = 2;
  accel_sim_report* rep = nullptr;
  EXPECT_EQ(accel_sim_run(&so, nullptr, mismatched_reduce, nullptr, &rep), ACCEL_ERR_INVALID_STATE);
  EXPECT_TRUE(contains(accel_last_error(nullptr), "mismatched collectives at call #1")) << accel_last_error(nullptr);
  for (int r = 0; r < 2; ++r) {
    accel_status st;
    const char* err = nullptr;
    ASSERT_EQ(accel_sim_report_rank(rep, r, &st, &err, nullptr), ACCEL_OK);
    EXPECT_EQ(st, ACCEL_ERR_INVALID_STATE);
    EXPECT_TRUE(contains(err, "rank 1 called all_reduce #1(count=4, float32, sum)")) << err;
  }
  accel_sim_report_destroy(rep);
}

accel_status reduce_three_times(accel_context* ctx, void*) {
  float v = 1;
  int64_t shape = 1;
  accel_tensor* t = nullptr;
  accel_status s = accel_tensor_create(ACCEL_FLOAT32, &shape, 1, &v, &t);
  for (int i = 0; i < 3 && s == ACCEL_OK; ++i) {
    accel_tensor* r = nullptr;
    s = accel_sim_charge_compute(ctx, 0.01, "step");
    if (s == ACCEL_OK) s = accel_reduce(ctx, t, ACCEL_REDUCE_SUM, &r);
    accel_tensor_destroy(r);
  }
  accel_tensor_destroy(t);
  return s;
}

TEST(Sim, FaultsTraceAndBadOptions) {
  accel_sim_options so = ACCEL_SIM_OPTIONS_INIT;
  so.world_size = 3;
  so.faults = "kill:2@collective:2";
  accel_sim_report* rep = nullptr;
  EXPECT_EQ(accel_sim_run(&so, nullptr, reduce_three_times, nullptr, &rep), ACCEL_ERR_COMMUNICATION);
  accel_status st;
  const char* err = nullptr;
  ASSERT_EQ(accel_sim_report_rank(rep, 0, &st, &err, nullptr), ACCEL_OK);
  EXPECT_EQ(st, ACCEL_ERR_COMMUNICATION);
  EXPECT_TRUE(contains(err, "rank 2 died")) << err;
  accel_sim_report_destroy(rep);

  std::string trace = tmp_path("trace.json");
  so.faults = nullptr;
  so.trace_path = trace.c_str();
  so.topology = "8xA100";
  rep = nullptr;
  ASSERT_EQ(accel_sim_run(&so, nullptr, reduce_three_times, nullptr, &rep), ACCEL_OK) << accel_last_error(nullptr);
  double predicted = 0;
  ASSERT_EQ(accel_sim_report_predicted_seconds(rep, &predicted), ACCEL_OK);
  EXPECT_GT(predicted, 0.03);  // three charged 10 ms steps plus three all-reduces
  EXPECT_LT(predicted, 0.031);
  accel_sim_report_destroy(rep);
  std::ifstream in(trace);
  std::string json((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_TRUE(contains(json.c_str(), "\"traceEvents\"")) << json.substr(0, 200);
  EXPECT_TRUE(contains(json.c_str(), "\"name\":\"all_reduce\""));
  EXPECT_TRUE(contains(json.c_str(), "\"topology\":\"8xA100\""));
  std::remove(trace.c_str());

  accel_sim_options bad = ACCEL_SIM_OPTIONS_INIT;
  bad.world_size = 0;
  rep = nullptr;
  EXPECT_EQ(accel_sim_run(&bad, nullptr, reduce_three_times, nullptr, &rep), ACCEL_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(rep, nullptr);
  bad = so;
  bad.trace_path = nullptr;
  bad.topology = "8xTPU";
  EXPECT_EQ(accel_sim_run(&bad, nullptr, reduce_three_times, nullptr, &rep), ACCEL_ERR_INVALID_ARGUMENT);
  EXPECT_TRUE(contains(accel_last_error(nullptr), "unknown topology '8xTPU'; presets: 8xH100 8xA100 8xPCIe"));
  bad.topology = nullptr;
  bad.device_memory = "12 parsecs";
  EXPECT_EQ(accel_sim_run(&bad, nullptr, reduce_three_times, nullptr, &rep), ACCEL_ERR_INVALID_ARGUMENT);
  bad.device_memory = nullptr;
  bad.faults = "explode:1";
  EXPECT_EQ(accel_sim_run(&bad, nullptr, reduce_three_times, nullptr, &rep), ACCEL_ERR_INVALID_ARGUMENT);
  bad.faults = nullptr;
  bad.version = 77;
  EXPECT_EQ(accel_sim_run(&bad, nullptr, reduce_three_times, nullptr, &rep), ACCEL_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(accel_sim_run(nullptr, nullptr, nullptr, nullptr, &rep), ACCEL_ERR_INVALID_ARGUMENT);
  accel_options cuda = ACCEL_OPTIONS_INIT;
  cuda.device = ACCEL_DEVICE_CUDA;
  EXPECT_EQ(accel_sim_run(nullptr, &cuda, reduce_three_times, nullptr, &rep), ACCEL_ERR_UNSUPPORTED);
  EXPECT_EQ(rep, nullptr);
}

[[maybe_unused]] accel_status count_rank(accel_context*, void* user) {  // unused under ASan (the test skips)
  static_cast<std::atomic<int>*>(user)->fetch_add(1);
  return ACCEL_OK;
}

// Threads that cannot all be created (the address space capped, so their stacks do not fit):
// ACCEL_ERR_OUT_OF_MEMORY naming what ran out, no rank runs, every started thread is joined
// and the process lives on (it used to terminate). Run in a child: the cap is process-wide.
TEST(Sim, ThreadsThatCannotBeCreatedAreAnErrorNotAnAbort) {
#if defined(__SANITIZE_ADDRESS__)
  GTEST_SKIP() << "AddressSanitizer reserves terabytes of address space: no room to cap it";
#else
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    long vm_kib = 0;  // this process's current address space
    std::ifstream st("/proc/self/status");
    for (std::string line; std::getline(st, line);)
      if (line.rfind("VmSize:", 0) == 0) vm_kib = std::atol(line.c_str() + 7);
    const rlim_t cap = static_cast<rlim_t>(vm_kib + 512 * 1024) * 1024;  // room for ~60 8-MiB stacks
    const struct rlimit lim = {cap, cap};
    if (vm_kib == 0 || ::setrlimit(RLIMIT_AS, &lim) != 0) ::_exit(3);
    accel_sim_options so = ACCEL_SIM_OPTIONS_INIT;
    so.world_size = 2048;
    so.topology = "256x8xH100-IB";
    std::atomic<int> ran{0};
    accel_sim_report* rep = nullptr;
    const accel_status s = accel_sim_run(&so, nullptr, count_rank, &ran, &rep);
    const bool named = contains(accel_last_error(nullptr), "could not start the thread of simulated rank");
    std::fprintf(stderr, "status %d, %d ranks ran: %s\n", s, ran.load(), accel_last_error(nullptr));
    if (s != ACCEL_ERR_OUT_OF_MEMORY || !named || ran.load() != 0 || rep != nullptr) ::_exit(1);
    so.world_size = 4;  // the process is still usable
    so.topology = nullptr;
    ::_exit(accel_sim_run(&so, nullptr, count_rank, &ran, nullptr) == ACCEL_OK && ran.load() == 4 ? 0 : 2);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status)) << "the child died (signal " << (WIFSIGNALED(status) ? WTERMSIG(status) : 0) << ")";
  EXPECT_EQ(WEXITSTATUS(status), 0);
#endif
}

// Simulator options out of their domains are refused with the argument named.
TEST(Sim, OptionsOutOfTheirDomains) {
  struct Case {
    void (*set)(accel_sim_options&);
    const char* message;
  };
  const Case cases[] = {
      {[](accel_sim_options& o) { o.world_size = 9; }, "world_size must be in [1, 8] (the GPUs of topology '8xH100'"},
      {[](accel_sim_options& o) { o.device_memory = "1.2.3GiB"; }, "device_memory '1.2.3GiB' has an unknown unit"},
      {[](accel_sim_options& o) { o.device_memory = "."; }, "device_memory '.' is not a size"},
      {[](accel_sim_options& o) { o.device_memory = "0"; }, "device_memory '0' is zero"},
      {[](accel_sim_options& o) { o.device_memory = "99999999999999999999TiB"; }, "is too large"},
      {[](accel_sim_options& o) { o.device_memory = "-1GiB"; }, "device_memory '-1GiB' is not a size"},
      {[](accel_sim_options& o) { o.timeout_seconds = NAN; }, "timeout_seconds must be finite and > 0, got nan"},
      {[](accel_sim_options& o) { o.timeout_seconds = INFINITY; }, "timeout_seconds must be finite and > 0, got inf"},
      {[](accel_sim_options& o) { o.engine_threads = -1; }, "engine_threads must be in [0, 1024]"},
      {[](accel_sim_options& o) { o.faults = "delay:0:inf"; }, "faults: 'delay:0:inf': SECONDS must be finite and >= 0, got inf"},
      {[](accel_sim_options& o) { o.faults = "delay:0:nan"; }, "SECONDS must be finite and >= 0, got nan"},
      {[](accel_sim_options& o) { o.faults = "kill:1@step:3junk"; }, "faults: cannot read 'kill:1@step:3junk'"},
  };
  for (const auto& c : cases) {
    accel_sim_options so = ACCEL_SIM_OPTIONS_INIT;
    c.set(so);
    accel_sim_report* rep = nullptr;
    EXPECT_EQ(accel_sim_run(&so, nullptr, reduce_three_times, nullptr, &rep), ACCEL_ERR_INVALID_ARGUMENT) << c.message;
    EXPECT_EQ(rep, nullptr);
    EXPECT_TRUE(contains(accel_last_error(nullptr), "accel_sim_run: ")) << accel_last_error(nullptr);
    EXPECT_TRUE(contains(accel_last_error(nullptr), c.message)) << accel_last_error(nullptr);
  }
  accel_sim_options so = ACCEL_SIM_OPTIONS_INIT;  // sizes that are fine
  for (const char* size : {"64MiB", "1.5GiB", "1000000", "80 GB"}) {
    so.device_memory = size;
    EXPECT_EQ(accel_sim_run(&so, nullptr, reduce_three_times, nullptr, nullptr), ACCEL_OK) << size << ": " << accel_last_error(nullptr);
  }
  // the trace replaces an earlier trace, never a user's file
  so.device_memory = nullptr;
  const std::string notes = tmp_path("notes.txt"), trace = tmp_path("run.trace.json");
  std::ofstream(notes) << "my notes";
  so.trace_path = notes.c_str();
  EXPECT_EQ(accel_sim_run(&so, nullptr, reduce_three_times, nullptr, nullptr), ACCEL_ERR_INVALID_ARGUMENT);
  EXPECT_TRUE(contains(accel_last_error(nullptr), "trace_path '" + notes + "' is a regular file that is not a Chrome trace"))
      << accel_last_error(nullptr);
  std::ifstream in(notes);
  EXPECT_EQ(std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>()), "my notes");
  so.trace_path = trace.c_str();
  EXPECT_EQ(accel_sim_run(&so, nullptr, reduce_three_times, nullptr, nullptr), ACCEL_OK) << accel_last_error(nullptr);
  EXPECT_EQ(accel_sim_run(&so, nullptr, reduce_three_times, nullptr, nullptr), ACCEL_OK) << accel_last_error(nullptr);
  std::remove(notes.c_str());
  std::remove(trace.c_str());
}

accel_status returns_seven(accel_context*, void*) { return static_cast<accel_status>(7); }

TEST(Sim, ARankFunctionReturningNoStatusIsAnError) {
  accel_sim_options so = ACCEL_SIM_OPTIONS_INIT;
  accel_sim_report* rep = nullptr;
  EXPECT_EQ(accel_sim_run(&so, nullptr, returns_seven, nullptr, &rep), ACCEL_ERR_INVALID_ARGUMENT);
  EXPECT_TRUE(contains(accel_last_error(nullptr), "fn returned 7, which is not an accel_status")) << accel_last_error(nullptr);
  accel_status st = ACCEL_OK;
  ASSERT_EQ(accel_sim_report_rank(rep, 1, &st, nullptr, nullptr), ACCEL_OK);
  EXPECT_EQ(st, ACCEL_ERR_INVALID_ARGUMENT);
  accel_sim_report_destroy(rep);
}

// Each rank trains its own MLP with the same seed on rank-specific data, then the ranks
// average their first weight: twice, bit for bit.
accel_status train_and_average(accel_context* ctx, void* user) {
  auto* out = static_cast<std::vector<std::vector<float>>*>(user);
  int32_t rank = 0;
  accel_process_index(ctx, &rank);
  int64_t sizes[] = {4, 16, 3};
  accel_mlp_options m = ACCEL_MLP_OPTIONS_INIT;
  m.layer_sizes = sizes;
  m.num_layer_sizes = 3;
  m.dropout = 0.2;
  accel_model* model = nullptr;
  accel_optimizer* opt = nullptr;
  accel_status s = accel_model_create_mlp(ctx, &m, &model);
  if (s == ACCEL_OK) s = accel_optimizer_create_adamw(ctx, model, nullptr, &opt);
  if (s == ACCEL_OK) s = accel_prepare(ctx, model, opt, nullptr, nullptr);
  for (int step = 0; step < 5 && s == ACCEL_OK; ++step) {
    std::vector<float> xs(8 * 4);
    for (size_t i = 0; i < xs.size(); ++i) xs[i] = static_cast<float>((i * 7 + rank * 3 + step) % 11) / 11.f;
    std::vector<int64_t> ys(8);
    for (size_t i = 0; i < ys.size(); ++i) ys[i] = static_cast<int64_t>((i + rank) % 3);
    accel_tensor* x = make_f32({8, 4}, xs);
    accel_tensor* y = make_i64({8}, ys);
    accel_tensor *logits = nullptr, *loss = nullptr;
    s = accel_model_forward(ctx, model, &x, 1, &logits);
    if (s == ACCEL_OK) s = accel_loss_cross_entropy(ctx, logits, y, &loss);
    if (s == ACCEL_OK) s = accel_backward(ctx, loss);
    if (s == ACCEL_OK) s = accel_step(ctx, nullptr);
    for (auto* t : {x, y, logits, loss}) accel_tensor_destroy(t);
  }
  accel_tensor *w = nullptr, *avg = nullptr;
  if (s == ACCEL_OK) s = accel_model_parameter(ctx, model, 0, &w);
  if (s == ACCEL_OK) s = accel_reduce(ctx, w, ACCEL_REDUCE_MEAN, &avg);
  if (s == ACCEL_OK) {
    (*out)[rank].resize(16 * 4 * 2);
    s = accel_tensor_copy_to_host(w, (*out)[rank].data(), 16 * 4 * 4);
    if (s == ACCEL_OK) s = accel_tensor_copy_to_host(avg, (*out)[rank].data() + 64, 16 * 4 * 4);
  }
  accel_tensor_destroy(w);
  accel_tensor_destroy(avg);
  accel_optimizer_destroy(opt);
  accel_model_destroy(model);
  return s;
}

TEST(Sim, TrainingOnRanksIsDeterministic) {
  accel_sim_options so = ACCEL_SIM_OPTIONS_INIT;
  so.world_size = 4;
  accel_options o = ACCEL_OPTIONS_INIT;
  o.seed = 5;
  std::vector<std::vector<float>> a(4), b(4);
  ASSERT_EQ(accel_sim_run(&so, &o, train_and_average, &a, nullptr), ACCEL_OK) << accel_last_error(nullptr);
  ASSERT_EQ(accel_sim_run(&so, &o, train_and_average, &b, nullptr), ACCEL_OK) << accel_last_error(nullptr);
  EXPECT_EQ(a, b);
  EXPECT_NE(std::vector<float>(a[0].begin(), a[0].begin() + 64), std::vector<float>(a[1].begin(), a[1].begin() + 64));
  for (int r = 1; r < 4; ++r)  // the averages agree everywhere
    EXPECT_EQ(std::vector<float>(a[r].begin() + 64, a[r].end()), std::vector<float>(a[0].begin() + 64, a[0].end()));
}


// The loader prepared on a 2-rank world shards with Accelerate's semantics (DESIGN.md:
// P=2, b=3, N=22, even batches: rank 1's last batch is [21, 0, 1]).
struct ShardCase {
  int32_t split = 0, even = 1, iterable = 0, shuffle = 0;
  int64_t batch = 3, n = 22;
  std::vector<std::vector<int64_t>> got[2];
};

accel_status collect_shard(accel_context* ctx, void* user) {
  auto* c = static_cast<ShardCase*>(user);
  int32_t rank = 0;
  accel_process_index(ctx, &rank);
  std::vector<float> xs(static_cast<size_t>(c->n));
  std::vector<int64_t> ys(static_cast<size_t>(c->n));
  for (int64_t i = 0; i < c->n; ++i) xs[static_cast<size_t>(i)] = static_cast<float>(i), ys[static_cast<size_t>(i)] = i;
  accel_tensor* X = make_f32({c->n, 1}, xs);
  accel_tensor* Y = make_i64({c->n}, ys);
  accel_dataloader_options lo = ACCEL_DATALOADER_OPTIONS_INIT;
  lo.batch_size = c->batch;
  lo.split_batches = c->split;
  lo.even_batches = c->even;
  lo.iterable = c->iterable;
  lo.shuffle = c->shuffle;
  accel_dataloader* dl = nullptr;
  accel_status s = accel_dataloader_create(ctx, X, Y, &lo, &dl);
  if (s == ACCEL_OK) s = accel_prepare(ctx, nullptr, nullptr, nullptr, dl);
  while (s == ACCEL_OK) {
    accel_tensor *x = nullptr, *y = nullptr;
    s = accel_dataloader_next(ctx, dl, &x, &y);
    if (s != ACCEL_OK || !x) break;
    int64_t len = 0;
    accel_tensor_numel(y, &len);
    std::vector<int64_t> v(static_cast<size_t>(len));
    s = accel_tensor_copy_to_host(y, v.data(), v.size() * 8);
    c->got[rank].push_back(v);
    accel_tensor_destroy(x);
    accel_tensor_destroy(y);
  }
  accel_dataloader_destroy(dl);
  accel_tensor_destroy(X);
  accel_tensor_destroy(Y);
  return s;
}

TEST(Sim, PreparedLoaderShardsLikeAccelerate) {
  using VV = std::vector<std::vector<int64_t>>;
  accel_sim_options so = ACCEL_SIM_OPTIONS_INIT;
  so.world_size = 2;
  ShardCase even;
  ASSERT_EQ(accel_sim_run(&so, nullptr, collect_shard, &even, nullptr), ACCEL_OK) << accel_last_error(nullptr);
  EXPECT_EQ(even.got[0], (VV{{0, 1, 2}, {6, 7, 8}, {12, 13, 14}, {18, 19, 20}}));
  EXPECT_EQ(even.got[1], (VV{{3, 4, 5}, {9, 10, 11}, {15, 16, 17}, {21, 0, 1}}));
  ShardCase uneven;
  uneven.even = 0;
  ASSERT_EQ(accel_sim_run(&so, nullptr, collect_shard, &uneven, nullptr), ACCEL_OK);
  EXPECT_EQ(uneven.got[1].back(), (std::vector<int64_t>{21}));
  ShardCase split;
  split.split = 1;
  split.batch = 4;
  split.n = 24;
  ASSERT_EQ(accel_sim_run(&so, nullptr, collect_shard, &split, nullptr), ACCEL_OK);
  EXPECT_EQ(split.got[0], (VV{{0, 1}, {4, 5}, {8, 9}, {12, 13}, {16, 17}, {20, 21}}));
  ShardCase bad;
  bad.split = 1;
  bad.batch = 3;
  EXPECT_EQ(accel_sim_run(&so, nullptr, collect_shard, &bad, nullptr), ACCEL_ERR_INVALID_ARGUMENT);
  EXPECT_TRUE(contains(accel_last_error(nullptr), "split_batches needs a batch size (3) divisible by the number of processes (2)"))
      << accel_last_error(nullptr);
}

// An iterable loader shares its stream as Accelerate's IterableDatasetShard does: rounds of
// batch x processes samples, the last completed from the first round (N=22, b=3, P=2: the
// fourth round is 18..21 then 0, 1; N=5, b=2: 4 then 0, 1, 2); even_batches does not apply.
TEST(Sim, IterableLoaderShardsLikeAcceleratesIterableDatasetShard) {
  using VV = std::vector<std::vector<int64_t>>;
  accel_sim_options so = ACCEL_SIM_OPTIONS_INIT;
  so.world_size = 2;
  ShardCase stream;
  stream.iterable = 1;
  ASSERT_EQ(accel_sim_run(&so, nullptr, collect_shard, &stream, nullptr), ACCEL_OK) << accel_last_error(nullptr);
  EXPECT_EQ(stream.got[0], (VV{{0, 1, 2}, {6, 7, 8}, {12, 13, 14}, {18, 19, 20}}));
  EXPECT_EQ(stream.got[1], (VV{{3, 4, 5}, {9, 10, 11}, {15, 16, 17}, {21, 0, 1}}));
  ShardCase small;
  small.iterable = 1;
  small.even = 0;  // not used by an iterable loader
  small.n = 5;
  small.batch = 2;
  ASSERT_EQ(accel_sim_run(&so, nullptr, collect_shard, &small, nullptr), ACCEL_OK);
  EXPECT_EQ(small.got[0], (VV{{0, 1}, {4, 0}}));
  EXPECT_EQ(small.got[1], (VV{{2, 3}, {1, 2}}));
  ShardCase shuffled;
  shuffled.iterable = 1;
  shuffled.shuffle = 1;
  EXPECT_EQ(accel_sim_run(&so, nullptr, collect_shard, &shuffled, nullptr), ACCEL_ERR_INVALID_ARGUMENT);
  EXPECT_TRUE(contains(accel_last_error(nullptr), "shuffle must be 0 for an iterable loader")) << accel_last_error(nullptr);
}

// Through the C ABI: DDP over a loader without even batches (P=2, b=3, N=20: 4 and 3
// batches). Process 0's fourth accel_backward and process 1's end of epoch return
// ACCEL_ERR_INVALID_STATE with the counts named; nothing hangs and the loop can go on.
struct UnevenDdp {
  accel_status failed[2] = {ACCEL_OK, ACCEL_OK};
  std::string where[2], message[2];
  int batches[2] = {0, 0};
};

accel_status train_uneven(accel_context* ctx, void* user) {
  auto* c = static_cast<UnevenDdp*>(user);
  int32_t rank = 0;
  accel_process_index(ctx, &rank);
  const size_t r = static_cast<size_t>(rank);
  std::vector<float> xs(20 * 2);
  std::vector<int64_t> ys(20);
  for (size_t i = 0; i < 20; ++i) xs[2 * i] = static_cast<float>(i) / 20, xs[2 * i + 1] = 1, ys[i] = static_cast<int64_t>(i % 2);
  accel_tensor* X = make_f32({20, 2}, xs);
  accel_tensor* Y = make_i64({20}, ys);
  int64_t sizes[] = {2, 4, 2};
  accel_mlp_options m = ACCEL_MLP_OPTIONS_INIT;
  m.layer_sizes = sizes;
  m.num_layer_sizes = 3;
  accel_dataloader_options lo = ACCEL_DATALOADER_OPTIONS_INIT;
  lo.batch_size = 3;
  lo.even_batches = 0;
  accel_model* model = nullptr;
  accel_optimizer* opt = nullptr;
  accel_dataloader* dl = nullptr;
  accel_status s = accel_model_create_mlp(ctx, &m, &model);
  if (s == ACCEL_OK) s = accel_optimizer_create_sgd(ctx, model, nullptr, &opt);
  if (s == ACCEL_OK) s = accel_dataloader_create(ctx, X, Y, &lo, &dl);
  if (s == ACCEL_OK) s = accel_prepare(ctx, model, opt, nullptr, dl);
  for (int epoch = 0; s == ACCEL_OK && epoch < 2; ++epoch)
    for (;;) {
      accel_tensor *x = nullptr, *y = nullptr, *logits = nullptr, *loss = nullptr;
      accel_status e = accel_dataloader_next(ctx, dl, &x, &y);
      if (e != ACCEL_OK) {
        if (c->failed[r] == ACCEL_OK) c->failed[r] = e, c->where[r] = "next", c->message[r] = accel_last_error(ctx);
        break;  // the epoch has advanced: go on with the next, as a forgiving loop would
      }
      if (!x) break;
      ++c->batches[r];
      if ((e = accel_model_forward(ctx, model, &x, 1, &logits)) == ACCEL_OK && (e = accel_loss_cross_entropy(ctx, logits, y, &loss)) == ACCEL_OK) {
        e = accel_backward(ctx, loss);
        if (e != ACCEL_OK && c->failed[r] == ACCEL_OK) c->failed[r] = e, c->where[r] = "backward", c->message[r] = accel_last_error(ctx);
        if (e == ACCEL_OK) e = accel_step(ctx, nullptr);
      }
      accel_tensor_destroy(x);
      accel_tensor_destroy(y);
      accel_tensor_destroy(logits);
      accel_tensor_destroy(loss);
      if (e != ACCEL_OK && c->where[r] != "backward") s = e;
    }
  accel_dataloader_destroy(dl);
  accel_optimizer_destroy(opt);
  accel_model_destroy(model);
  accel_tensor_destroy(X);
  accel_tensor_destroy(Y);
  return s;
}

TEST(Sim, UnevenBatchesUnderDdpFailEveryProcessInsteadOfHanging) {
  accel_sim_options so = ACCEL_SIM_OPTIONS_INIT;
  so.world_size = 2;
  accel_options o = ACCEL_OPTIONS_INIT;
  o.strategy = ACCEL_STRATEGY_DDP;
  UnevenDdp c;
  ASSERT_EQ(accel_sim_run(&so, &o, train_uneven, &c, nullptr), ACCEL_OK) << accel_last_error(nullptr);
  EXPECT_EQ(c.failed[0], ACCEL_ERR_INVALID_STATE);
  EXPECT_EQ(c.where[0], "backward");
  EXPECT_TRUE(contains(c.message[0].c_str(), "process 0 4 batches per epoch and process 1 3 (even_batches is off)")) << c.message[0];
  EXPECT_EQ(c.failed[1], ACCEL_ERR_INVALID_STATE);
  EXPECT_EQ(c.where[1], "next");
  EXPECT_TRUE(contains(c.message[1].c_str(), "process 1 3 batches per epoch and process 0 4")) << c.message[1];
  // both went on in step with each other: every epoch fails the same way, nothing mismatched
  EXPECT_EQ(c.batches[0], 8);
  EXPECT_EQ(c.batches[1], 6);
}

TEST(Misuse, VersionOneLoaderOptionsStillWork) {
  // the layout a program compiled against version 1 of the header passes
  struct V1 {
    uint32_t version;
    int64_t batch_size;
    int32_t shuffle;
    uint64_t seed;
    int32_t drop_last;
  } v1 = {1, 4, 0, 0, 1};
  Fixture f;
  accel_tensor* X = make_f32({10, 1}, std::vector<float>(10, 0.f));
  accel_dataloader* dl = nullptr;
  ASSERT_OK(f.ctx, accel_dataloader_create(f.ctx, X, nullptr, reinterpret_cast<const accel_dataloader_options*>(&v1), &dl));
  int64_t nb = 0;
  ASSERT_OK(f.ctx, accel_dataloader_num_batches(dl, &nb));
  EXPECT_EQ(nb, 2);  // drop_last read from the version-1 layout
  accel_dataloader_destroy(dl);
  accel_tensor_destroy(X);
}


// Process utilities on 10 simulated ranks (two nodes of 8 GPUs).
struct UtilCase {
  std::vector<int32_t> local;
  std::vector<int> main, local_main;
  std::vector<std::vector<float>> bcast, gathered, padded;
  std::vector<accel_status> bad_gather;
  std::vector<std::string> bad_msg;
};

std::vector<float> host_floats(accel_tensor* t) {
  size_t nb = 0;
  accel_tensor_nbytes(t, &nb);
  std::vector<float> v(nb / 4);
  accel_tensor_copy_to_host(t, v.data(), nb);
  return v;
}

accel_status utilities(accel_context* ctx, void* user) {
  auto* c = static_cast<UtilCase*>(user);
  int32_t rank = 0;
  accel_status s = accel_process_index(ctx, &rank);
  if (s == ACCEL_OK) s = accel_local_process_index(ctx, &c->local[rank]);
  if (s == ACCEL_OK) s = accel_is_main_process(ctx, &c->main[rank]);
  if (s == ACCEL_OK) s = accel_is_local_main_process(ctx, &c->local_main[rank]);
  if (s == ACCEL_OK) s = accel_print(ctx, "printed once, by the main process");
  float r = static_cast<float>(rank);
  accel_tensor* pair = make_f32({2}, {r, r});
  accel_tensor* ragged = make_f32({rank % 3 + 1}, std::vector<float>(static_cast<size_t>(rank % 3 + 1), r));
  accel_tensor *out = nullptr;
  if (s == ACCEL_OK && (s = accel_broadcast(ctx, pair, 2, &out)) == ACCEL_OK) c->bcast[rank] = host_floats(out);
  accel_tensor_destroy(out);
  out = nullptr;
  if (s == ACCEL_OK && (s = accel_gather(ctx, pair, &out)) == ACCEL_OK) c->gathered[rank] = host_floats(out);
  accel_tensor_destroy(out);
  out = nullptr;
  if (s == ACCEL_OK && (s = accel_pad_across_processes(ctx, ragged, 0, -1.0, 0, &out)) == ACCEL_OK)
    c->padded[rank] = host_floats(out);
  accel_tensor_destroy(out);
  out = nullptr;
  if (s == ACCEL_OK) {
    c->bad_gather[rank] = accel_gather(ctx, ragged, &out);
    c->bad_msg[rank] = accel_last_error(ctx);
  }
  accel_tensor_destroy(pair);
  accel_tensor_destroy(ragged);
  return s;
}

TEST(Sim, ProcessUtilities) {
  accel_sim_options so = ACCEL_SIM_OPTIONS_INIT;
  so.world_size = 10;
  so.topology = "2x8xH100-IB";  // 16 GPUs: more ranks than one 8-GPU node has
  UtilCase c;
  c.local.assign(10, -1);
  c.main.assign(10, -1);
  c.local_main.assign(10, -1);
  c.bcast.resize(10);
  c.gathered.resize(10);
  c.padded.resize(10);
  c.bad_gather.assign(10, ACCEL_OK);
  c.bad_msg.resize(10);
  ASSERT_EQ(accel_sim_run(&so, nullptr, utilities, &c, nullptr), ACCEL_OK) << accel_last_error(nullptr);
  std::vector<float> all;
  for (int r = 0; r < 10; ++r) all.insert(all.end(), {static_cast<float>(r), static_cast<float>(r)});
  for (int r = 0; r < 10; ++r) {
    EXPECT_EQ(c.local[r], r % 8);
    EXPECT_EQ(c.main[r], r == 0);
    EXPECT_EQ(c.local_main[r], r % 8 == 0);
    EXPECT_EQ(c.bcast[r], (std::vector<float>{2, 2}));
    EXPECT_EQ(c.gathered[r], all);
    std::vector<float> want(3, -1.f);
    for (int i = 0; i <= r % 3; ++i) want[static_cast<size_t>(i)] = static_cast<float>(r);
    EXPECT_EQ(c.padded[r], want);
    EXPECT_EQ(c.bad_gather[r], ACCEL_ERR_INVALID_ARGUMENT);
    EXPECT_TRUE(contains(c.bad_msg[r].c_str(), "gather needs the same shape on every process: process 0 has [1], process 1 has [2]"))
        << c.bad_msg[r];
  }
}

// gather_for_metrics over an uneven dataset (N=22, batch 3, 2 processes, even batches):
// every sample exactly once, although rank 1's last batch is [21, 0, 1].
struct MetricsCase {
  std::vector<float> seen;
  std::vector<float> plain;
};

accel_status metrics(accel_context* ctx, void* user) {
  auto* c = static_cast<MetricsCase*>(user);
  int32_t rank = 0;
  accel_process_index(ctx, &rank);
  std::vector<float> xs(22);
  for (int i = 0; i < 22; ++i) xs[static_cast<size_t>(i)] = static_cast<float>(i);
  accel_tensor* X = make_f32({22, 1}, xs);
  accel_dataloader_options lo = ACCEL_DATALOADER_OPTIONS_INIT;
  lo.batch_size = 3;
  lo.shuffle = 1;
  lo.seed = 3;
  accel_dataloader* dl = nullptr;
  accel_status s = accel_dataloader_create(ctx, X, nullptr, &lo, &dl);
  if (s == ACCEL_OK) s = accel_prepare(ctx, nullptr, nullptr, nullptr, dl);
  while (s == ACCEL_OK) {
    accel_tensor *x = nullptr, *g = nullptr, *p = nullptr;
    if ((s = accel_dataloader_next(ctx, dl, &x, nullptr)) != ACCEL_OK || !x) break;
    s = accel_gather_for_metrics(ctx, x, &g);
    if (s == ACCEL_OK) s = accel_gather(ctx, x, &p);
    if (s == ACCEL_OK && rank == 0) {
      auto v = host_floats(g), w = host_floats(p);
      c->seen.insert(c->seen.end(), v.begin(), v.end());
      c->plain.insert(c->plain.end(), w.begin(), w.end());
    }
    accel_tensor_destroy(x);
    accel_tensor_destroy(g);
    accel_tensor_destroy(p);
  }
  accel_dataloader_destroy(dl);
  accel_tensor_destroy(X);
  return s;
}

TEST(Sim, GatherForMetricsCountsEverySampleOnce) {
  accel_sim_options so = ACCEL_SIM_OPTIONS_INIT;
  so.world_size = 2;
  MetricsCase c;
  ASSERT_EQ(accel_sim_run(&so, nullptr, metrics, &c, nullptr), ACCEL_OK) << accel_last_error(nullptr);
  EXPECT_EQ(c.plain.size(), 24u);  // a plain gather holds the two duplicates
  std::vector<float> sorted = c.seen;
  std::sort(sorted.begin(), sorted.end());
  std::vector<float> want(22);
  for (int i = 0; i < 22; ++i) want[static_cast<size_t>(i)] = static_cast<float>(i);
  EXPECT_EQ(sorted, want);
}

struct SeedCase {
  std::vector<std::vector<float>> w;
  int per_process = 0;
};

accel_status seeded_model(accel_context* ctx, void* user) {
  auto* c = static_cast<SeedCase*>(user);
  int32_t rank = 0;
  accel_process_index(ctx, &rank);
  accel_status s = accel_set_seed(ctx, 7, c->per_process);
  int64_t sizes[] = {3, 2};
  accel_mlp_options m = ACCEL_MLP_OPTIONS_INIT;
  m.layer_sizes = sizes;
  m.num_layer_sizes = 2;
  accel_model* model = nullptr;
  accel_tensor* w = nullptr;
  if (s == ACCEL_OK) s = accel_model_create_mlp(ctx, &m, &model);
  if (s == ACCEL_OK) s = accel_model_parameter(ctx, model, 0, &w);
  if (s == ACCEL_OK) c->w[rank] = host_floats(w);
  accel_tensor_destroy(w);
  accel_model_destroy(model);
  return s;
}

TEST(Sim, SetSeedSharedOrPerProcess) {
  accel_sim_options so = ACCEL_SIM_OPTIONS_INIT;
  so.world_size = 2;
  SeedCase shared, per;
  shared.w.resize(2);
  per.w.resize(2);
  per.per_process = 1;
  ASSERT_EQ(accel_sim_run(&so, nullptr, seeded_model, &shared, nullptr), ACCEL_OK);
  ASSERT_EQ(accel_sim_run(&so, nullptr, seeded_model, &per, nullptr), ACCEL_OK);
  EXPECT_EQ(shared.w[0], shared.w[1]);
  EXPECT_NE(per.w[0], per.w[1]);
  EXPECT_EQ(per.w[0], shared.w[0]);  // process 0 adds 0
}


TEST(Misuse, VersionOneOptionsAndTheStrategyVariable) {
  accel_options v2 = ACCEL_OPTIONS_INIT;
  v2.version = 1;  // a version-1 caller's struct ends before `strategy`; the library reads no further
  accel_context* ctx = nullptr;
  ASSERT_EQ(accel_init(&v2, &ctx), ACCEL_OK) << accel_last_error(nullptr);
  accel_destroy(ctx);
  ::setenv("ACCEL_STRATEGY", "zero9", 1);
  EXPECT_EQ(accel_init(nullptr, &ctx), ACCEL_ERR_INVALID_ARGUMENT);
  EXPECT_TRUE(contains(accel_last_error(nullptr), "ACCEL_STRATEGY='zero9' is not a strategy")) << accel_last_error(nullptr);
  ::setenv("ACCEL_STRATEGY", "ddp", 1);
  ASSERT_EQ(accel_init(nullptr, &ctx), ACCEL_OK);
  accel_destroy(ctx);
  ::unsetenv("ACCEL_STRATEGY");
  accel_options bad = ACCEL_OPTIONS_INIT;
  bad.strategy = static_cast<accel_strategy>(9);
  EXPECT_EQ(accel_init(&bad, &ctx), ACCEL_ERR_INVALID_ARGUMENT);
}

// Every version an options struct ever had is accepted by its _init, which stores it and
// writes only that version's bytes (a program built against an older header passes its
// shorter struct); 0 and versions past the current one are refused, the struct untouched.
template <class T>
void every_version(const char* name, accel_status (*init)(T*, uint32_t), uint32_t current) {
  SCOPED_TRACE(name);
  for (uint32_t v = 1; v <= current; ++v) {
    T o;
    std::memset(&o, 0x5a, sizeof o);
    ASSERT_EQ(init(&o, v), ACCEL_OK) << accel_last_error(nullptr);
    EXPECT_EQ(o.version, v);
  }
  for (uint32_t v : {0u, current + 1, 1000u}) {
    T o, before;
    std::memset(&o, 0x5a, sizeof o);
    std::memcpy(&before, &o, sizeof o);
    EXPECT_EQ(init(&o, v), ACCEL_ERR_INVALID_ARGUMENT);
    EXPECT_TRUE(contains(accel_last_error(nullptr), "version " + std::to_string(v) + " is not known"))
        << accel_last_error(nullptr);
    EXPECT_TRUE(contains(accel_last_error(nullptr), "it knows 1.." + std::to_string(current)))
        << accel_last_error(nullptr);
    EXPECT_EQ(std::memcmp(&o, &before, sizeof o), 0) << "a refused version changed the struct";
  }
}

// The bytes of `o` from `from` to its end still hold the 0x5a they were set to.
template <class T>
bool untouched_from(const T& o, size_t from) {
  const auto* b = reinterpret_cast<const unsigned char*>(&o);
  for (size_t i = from; i < sizeof o; ++i)
    if (b[i] != 0x5a) return false;
  return true;
}

TEST(Versions, EveryPublishedVersionIsAcceptedAndOnlyItsBytesAreWritten) {
  every_version("accel_options", accel_options_init, ACCEL_OPTIONS_VERSION);
  every_version("accel_mlp_options", accel_mlp_options_init, ACCEL_MLP_OPTIONS_VERSION);
  every_version("accel_sgd_options", accel_sgd_options_init, ACCEL_SGD_OPTIONS_VERSION);
  every_version("accel_adamw_options", accel_adamw_options_init, ACCEL_ADAMW_OPTIONS_VERSION);
  every_version("accel_lamb_options", accel_lamb_options_init, ACCEL_LAMB_OPTIONS_VERSION);
  every_version("accel_scheduler_options", accel_scheduler_options_init, ACCEL_SCHEDULER_OPTIONS_VERSION);
  every_version("accel_dataloader_options", accel_dataloader_options_init, ACCEL_DATALOADER_OPTIONS_VERSION);
  every_version("accel_sim_options", accel_sim_options_init, ACCEL_SIM_OPTIONS_VERSION);
  every_version("accel_project_options", accel_project_options_init, ACCEL_PROJECT_OPTIONS_VERSION);

  // accel_options version 1 ends before `strategy` (git 27556aa appended strategy and
  // bucket_bytes as version 2): its defaults, and not a byte after
  accel_options o;
  std::memset(&o, 0x5a, sizeof o);
  ASSERT_EQ(accel_options_init(&o, 1), ACCEL_OK);
  EXPECT_EQ(o.version, 1u);
  EXPECT_EQ(o.mixed_precision, ACCEL_PRECISION_NO);
  EXPECT_EQ(o.gradient_accumulation_steps, 1);
  EXPECT_EQ(o.seed, 0u);
  EXPECT_EQ(o.loss_scale_init, 65536.0);
  EXPECT_EQ(o.loss_scale_growth_interval, 2000);
  EXPECT_EQ(o.num_threads, 0);
  EXPECT_TRUE(untouched_from(o, offsetof(accel_options, strategy)));
  // ... and accel_init reads no further: 0x5a5a5a5a would be refused as a strategy
  accel_context* ctx = nullptr;
  ASSERT_EQ(accel_init(&o, &ctx), ACCEL_OK) << accel_last_error(nullptr);
  accel_destroy(ctx);
  o.version = 2;
  EXPECT_EQ(accel_init(&o, &ctx), ACCEL_ERR_INVALID_ARGUMENT);
  EXPECT_TRUE(contains(accel_last_error(nullptr), "strategy")) << accel_last_error(nullptr);
  ASSERT_EQ(accel_options_init(&o, 2), ACCEL_OK);
  EXPECT_EQ(o.strategy, ACCEL_STRATEGY_NO);
  EXPECT_EQ(o.bucket_bytes, 25 * 1024 * 1024);

  // accel_dataloader_options version 1 ends before even_batches (git e93abbe)
  accel_dataloader_options d;
  std::memset(&d, 0x5a, sizeof d);
  ASSERT_EQ(accel_dataloader_options_init(&d, 1), ACCEL_OK);
  EXPECT_EQ(d.version, 1u);
  EXPECT_EQ(d.batch_size, 1);
  EXPECT_EQ(d.shuffle, 0);
  EXPECT_EQ(d.seed, 0u);
  EXPECT_EQ(d.drop_last, 0);
  EXPECT_TRUE(untouched_from(d, offsetof(accel_dataloader_options, even_batches)));
  ASSERT_EQ(accel_dataloader_options_init(&d, 2), ACCEL_OK);
  EXPECT_EQ(d.even_batches, 1);
  EXPECT_EQ(d.split_batches, 0);
}

// Under the simulator a version-1 dataloader struct followed by garbage (0x5a5a5a5a would
// turn split_batches on and halve the batches) gives whole batches of batch_size.
accel_status whole_batches(accel_context* ctx, void* user) {
  auto* rows = static_cast<std::atomic<int64_t>*>(user);
  accel_dataloader_options d;
  std::memset(&d, 0x5a, sizeof d);
  accel_status s = accel_dataloader_options_init(&d, 1);
  if (s != ACCEL_OK) return s;
  d.batch_size = 4;
  std::vector<float> x(16);
  accel_tensor* X = make_f32({16, 1}, x);
  accel_dataloader* dl = nullptr;
  if ((s = accel_dataloader_create(ctx, X, nullptr, &d, &dl)) != ACCEL_OK) return s;
  if ((s = accel_prepare(ctx, nullptr, nullptr, nullptr, dl)) != ACCEL_OK) return s;
  accel_tensor* xb = nullptr;
  if ((s = accel_dataloader_next(ctx, dl, &xb, nullptr)) != ACCEL_OK) return s;
  int64_t shape[2] = {0, 0};
  if (xb && (s = accel_tensor_shape(xb, shape, 2)) != ACCEL_OK) return s;
  rows->fetch_add(shape[0]);
  accel_tensor_destroy(xb);
  accel_dataloader_destroy(dl);
  accel_tensor_destroy(X);
  return ACCEL_OK;
}

TEST(Versions, AVersionOneLoaderIsReadNoFurtherThanItsBytes) {
  accel_sim_options so = ACCEL_SIM_OPTIONS_INIT;
  so.world_size = 2;
  std::atomic<int64_t> rows{0};
  ASSERT_EQ(accel_sim_run(&so, nullptr, whole_batches, &rows, nullptr), ACCEL_OK) << accel_last_error(nullptr);
  EXPECT_EQ(rows.load(), 8);  // two ranks, a whole batch of 4 each (split_batches would give 2 each)
}

// DDP through the C ABI: ranks train on different data, and stay identical.
accel_status ddp_rank(accel_context* ctx, void* user) {
  auto* out = static_cast<std::vector<std::vector<float>>*>(user);
  return train_and_average(ctx, out);
}

TEST(Sim, DdpKeepsRanksIdentical) {
  accel_sim_options so = ACCEL_SIM_OPTIONS_INIT;
  so.world_size = 3;
  accel_options o = ACCEL_OPTIONS_INIT;
  o.strategy = ACCEL_STRATEGY_DDP;
  o.seed = 9;
  std::vector<std::vector<float>> w(3);
  ASSERT_EQ(accel_sim_run(&so, &o, ddp_rank, &w, nullptr), ACCEL_OK) << accel_last_error(nullptr);
  for (int r = 1; r < 3; ++r) EXPECT_EQ(w[r], w[0]);  // different data, averaged gradients: the same weights
  o.strategy = ACCEL_STRATEGY_NO;
  std::vector<std::vector<float>> alone(3);
  ASSERT_EQ(accel_sim_run(&so, &o, ddp_rank, &alone, nullptr), ACCEL_OK);
  EXPECT_NE(std::vector<float>(alone[1].begin(), alone[1].begin() + 64), std::vector<float>(alone[0].begin(), alone[0].begin() + 64));
}

// ZeRO through the C ABI, by enum and by the environment variable's names (FSDP's too):
// the same weights as DDP; accel_model_parameter gathers the shards.
TEST(Sim, ZeroStagesMatchDdp) {
  accel_sim_options so = ACCEL_SIM_OPTIONS_INIT;
  so.world_size = 4;
  accel_options o = ACCEL_OPTIONS_INIT;
  o.strategy = ACCEL_STRATEGY_DDP;
  o.seed = 9;
  std::vector<std::vector<float>> ddp(4);
  ASSERT_EQ(accel_sim_run(&so, &o, ddp_rank, &ddp, nullptr), ACCEL_OK) << accel_last_error(nullptr);
  auto close_to_ddp = [&](const std::vector<std::vector<float>>& w, const char* what) {
    for (int r = 0; r < 4; ++r) {
      ASSERT_EQ(w[r].size(), ddp[0].size()) << what;
      for (size_t i = 0; i < w[r].size(); ++i) EXPECT_NEAR(w[r][i], ddp[0][i], 1e-5) << what << " rank " << r << " at " << i;
    }
  };
  for (accel_strategy st : {ACCEL_STRATEGY_ZERO1, ACCEL_STRATEGY_SHARD_GRAD_OP, ACCEL_STRATEGY_FULL_SHARD}) {
    o.strategy = st;
    std::vector<std::vector<float>> w(4);
    ASSERT_EQ(accel_sim_run(&so, &o, ddp_rank, &w, nullptr), ACCEL_OK) << accel_last_error(nullptr);
    close_to_ddp(w, "enum");
  }
  o.strategy = ACCEL_STRATEGY_NO;
  for (const char* name : {"zero1", "ZERO2", "shard_grad_op", "zero3", "FULL_SHARD"}) {
    ::setenv("ACCEL_STRATEGY", name, 1);
    std::vector<std::vector<float>> w(4);
    ASSERT_EQ(accel_sim_run(&so, &o, ddp_rank, &w, nullptr), ACCEL_OK) << accel_last_error(nullptr);
    close_to_ddp(w, name);
  }
  ::unsetenv("ACCEL_STRATEGY");
}

// LAMB's trust ratio needs whole tensors: ZeRO refuses it at prepare on every rank,
// before any communication; DDP trains with it.
accel_status lamb_rank(accel_context* ctx, void*) {
  int64_t sizes[] = {4, 8, 3};
  accel_mlp_options m = ACCEL_MLP_OPTIONS_INIT;
  m.layer_sizes = sizes;
  m.num_layer_sizes = 3;
  accel_model* model = nullptr;
  accel_optimizer* opt = nullptr;
  accel_lamb_options lo;
  accel_status s = accel_lamb_options_init(&lo, ACCEL_LAMB_OPTIONS_VERSION);
  if (s == ACCEL_OK) s = accel_model_create_mlp(ctx, &m, &model);
  if (s == ACCEL_OK) s = accel_optimizer_create_lamb(ctx, model, &lo, &opt);
  if (s == ACCEL_OK) s = accel_prepare(ctx, model, opt, nullptr, nullptr);
  for (int step = 0; step < 3 && s == ACCEL_OK; ++step) {
    accel_tensor* x = make_f32({2, 4}, {1, 2, 3, 4, 5, 6, 7, 8});
    accel_tensor* y = make_i64({2}, {0, 2});
    accel_tensor *logits = nullptr, *loss = nullptr;
    s = accel_model_forward(ctx, model, &x, 1, &logits);
    if (s == ACCEL_OK) s = accel_loss_cross_entropy(ctx, logits, y, &loss);
    if (s == ACCEL_OK) s = accel_backward(ctx, loss);
    if (s == ACCEL_OK) s = accel_step(ctx, nullptr);
    for (auto* t : {x, y, logits, loss}) accel_tensor_destroy(t);
  }
  accel_optimizer_destroy(opt);
  accel_model_destroy(model);
  return s;
}

TEST(Sim, ZeroRefusesLambDdpTrainsWithIt) {
  accel_sim_options so = ACCEL_SIM_OPTIONS_INIT;
  so.world_size = 3;
  accel_options o = ACCEL_OPTIONS_INIT;
  o.strategy = ACCEL_STRATEGY_ZERO2;
  accel_sim_report* rep = nullptr;
  EXPECT_EQ(accel_sim_run(&so, &o, lamb_rank, nullptr, &rep), ACCEL_ERR_UNSUPPORTED);
  ASSERT_NE(rep, nullptr);
  for (int32_t r = 0; r < 3; ++r) {
    accel_status st = ACCEL_OK;
    const char* err = nullptr;
    ASSERT_EQ(accel_sim_report_rank(rep, r, &st, &err, nullptr), ACCEL_OK);
    EXPECT_EQ(st, ACCEL_ERR_UNSUPPORTED);
    EXPECT_TRUE(contains(err, "ZeRO cannot shard the LAMB optimizer")) << err;
  }
  accel_sim_report_destroy(rep);
  o.strategy = ACCEL_STRATEGY_DDP;
  EXPECT_EQ(accel_sim_run(&so, &o, lamb_rank, nullptr, nullptr), ACCEL_OK) << accel_last_error(nullptr);
  accel_lamb_options bad = ACCEL_LAMB_OPTIONS_INIT;
  bad.version = 7;
  EXPECT_EQ(accel_lamb_options_init(&bad, 7), ACCEL_ERR_INVALID_ARGUMENT);
}

// Checkpoint calls through the C ABI: argument and state errors, and a round trip.
TEST(Checkpoint, ArgumentsStateAndARoundTrip) {
  accel_context* ctx = nullptr;
  ASSERT_EQ(accel_init(nullptr, &ctx), ACCEL_OK);
  EXPECT_EQ(accel_save_state(nullptr, "x"), ACCEL_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(accel_save_state(ctx, "x"), ACCEL_ERR_INVALID_STATE);  // nothing prepared
  EXPECT_TRUE(contains(accel_last_error(ctx), "before accel_prepare")) << accel_last_error(ctx);
  accel_project_options po;
  ASSERT_EQ(accel_project_options_init(&po, ACCEL_PROJECT_OPTIONS_VERSION), ACCEL_OK);
  EXPECT_EQ(accel_set_project(ctx, &po), ACCEL_ERR_INVALID_ARGUMENT);  // no directory
  int64_t sizes[] = {4, 3};
  accel_mlp_options m = ACCEL_MLP_OPTIONS_INIT;
  m.layer_sizes = sizes;
  m.num_layer_sizes = 2;
  accel_model* model = nullptr;
  accel_optimizer* opt = nullptr;
  ASSERT_EQ(accel_model_create_mlp(ctx, &m, &model), ACCEL_OK);
  ASSERT_EQ(accel_optimizer_create_sgd(ctx, model, nullptr, &opt), ACCEL_OK);
  ASSERT_EQ(accel_prepare(ctx, model, opt, nullptr, nullptr), ACCEL_OK);
  EXPECT_EQ(accel_load_state(ctx, nullptr), ACCEL_ERR_INVALID_ARGUMENT);  // no project
  EXPECT_TRUE(contains(accel_last_error(ctx), "project directory")) << accel_last_error(ctx);
  const std::string proj = std::string(std::getenv("TMPDIR") ? std::getenv("TMPDIR") : "/tmp") + "/accel_capi_proj_" +
                           std::to_string(::getpid());
  po.project_dir = proj.c_str();
  ASSERT_EQ(accel_set_project(ctx, &po), ACCEL_OK);
  EXPECT_EQ(accel_load_state(ctx, nullptr), ACCEL_ERR_IO);  // nothing saved yet
  ASSERT_EQ(accel_save_state(ctx, nullptr), ACCEL_OK) << accel_last_error(ctx);
  const char* where = nullptr;
  ASSERT_EQ(accel_last_checkpoint(ctx, &where), ACCEL_OK);
  EXPECT_EQ(std::string(where), proj + "/checkpoints/checkpoint_0");
  accel_tensor* before = nullptr;
  ASSERT_EQ(accel_model_parameter(ctx, model, 0, &before), ACCEL_OK);
  // train one step, then load: the weights come back
  accel_tensor* x = make_f32({2, 4}, {1, 2, 3, 4, 5, 6, 7, 8});
  accel_tensor* y = make_i64({2}, {0, 2});
  accel_tensor *logits = nullptr, *loss = nullptr, *after = nullptr;
  ASSERT_EQ(accel_model_forward(ctx, model, &x, 1, &logits), ACCEL_OK);
  ASSERT_EQ(accel_loss_cross_entropy(ctx, logits, y, &loss), ACCEL_OK);
  ASSERT_EQ(accel_backward(ctx, loss), ACCEL_OK);
  EXPECT_EQ(accel_save_state(ctx, nullptr), ACCEL_ERR_INVALID_STATE);  // between backward and step
  ASSERT_EQ(accel_step(ctx, nullptr), ACCEL_OK);
  ASSERT_EQ(accel_load_state(ctx, nullptr), ACCEL_OK) << accel_last_error(ctx);
  ASSERT_EQ(accel_model_parameter(ctx, model, 0, &after), ACCEL_OK);
  EXPECT_EQ(host_floats(after), host_floats(before));
  for (auto* t : {x, y, logits, loss, before, after}) accel_tensor_destroy(t);
  accel_optimizer_destroy(opt);
  accel_model_destroy(model);
  accel_destroy(ctx);
  std::filesystem::remove_all(proj);
}

}  // namespace

namespace {
std::string slurp(const std::string& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}
}  // namespace

// A save never destroys what it did not write: a regular file, a directory of the user's,
// a symbolic link, a device, a user's file where the save's temporary would go. Each is
// refused (ACCEL_ERR_INVALID_ARGUMENT, saying what is there) and left as it was; an empty
// directory and an earlier checkpoint (or an earlier saved model) are replaced.
TEST(Checkpoint, ASaveNeverDestroysWhatItDidNotWrite) {
  namespace fs = std::filesystem;
  Fixture f;
  const fs::path root = tmp_path("paths");
  fs::remove_all(root);
  fs::create_directories(root / "mine");
  std::ofstream(root / "notes.txt") << "my notes";
  std::ofstream(root / "mine" / "data.csv") << "1,2";
  fs::create_symlink(root / "mine", root / "link");
  std::ofstream(root / ".ck.tmp") << "not a leftover";
  struct Refusal {
    std::string path, says;
  };
  const Refusal refusals[] = {
      {(root / "notes.txt").string(), "is a regular file, not an accel checkpoint"},
      {(root / "mine").string(), "is a directory that is not an accel checkpoint"},
      {(root / "link").string(), "is a symbolic link to"},
      {"/dev/null", "is a character device"},
      {(root / "ck").string(), "uses the temporary path"},
  };
  for (const auto& r : refusals) {
    EXPECT_EQ(accel_save_state(f.ctx, r.path.c_str()), ACCEL_ERR_INVALID_ARGUMENT) << r.path;
    EXPECT_TRUE(contains(accel_last_error(f.ctx), "accel_save_state: ")) << accel_last_error(f.ctx);
    EXPECT_TRUE(contains(accel_last_error(f.ctx), r.says)) << accel_last_error(f.ctx);
  }
  EXPECT_EQ(accel_save_state(f.ctx, ""), ACCEL_ERR_INVALID_ARGUMENT);
  EXPECT_TRUE(contains(accel_last_error(f.ctx), "dir is empty"));
  EXPECT_EQ(slurp((root / "notes.txt").string()), "my notes");
  EXPECT_EQ(slurp((root / "mine" / "data.csv").string()), "1,2");
  EXPECT_TRUE(fs::is_symlink(root / "link"));
  EXPECT_EQ(slurp((root / ".ck.tmp").string()), "not a leftover");
  fs::remove(root / ".ck.tmp");
  // an earlier checkpoint is replaced; so is an empty directory
  ASSERT_OK(f.ctx, accel_save_state(f.ctx, (root / "ck").c_str()));
  ASSERT_OK(f.ctx, accel_save_state(f.ctx, (root / "ck").c_str()));
  fs::create_directory(root / "empty");
  ASSERT_OK(f.ctx, accel_save_state(f.ctx, (root / "empty").c_str()));
  EXPECT_TRUE(fs::exists(root / "empty" / "manifest.json"));
  // a checkpoint directory with a file of the user's added is no longer only a checkpoint
  std::ofstream(root / "ck" / "README") << "keep";
  EXPECT_EQ(accel_save_state(f.ctx, (root / "ck").c_str()), ACCEL_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(slurp((root / "ck" / "README").string()), "keep");

  // accel_save_model: the same classes; an earlier safetensors file is replaced
  for (const auto& r : {Refusal{(root / "notes.txt").string(), "is a regular file that is not a safetensors file"},
                        Refusal{(root / "mine").string(), "is a directory"},
                        Refusal{(root / "link").string(), "is a symbolic link"},
                        Refusal{"/dev/null", "is a character device"}, Refusal{"", "path is empty"}}) {
    EXPECT_EQ(accel_save_model(f.ctx, f.model, r.path.c_str()), ACCEL_ERR_INVALID_ARGUMENT) << r.path;
    EXPECT_TRUE(contains(accel_last_error(f.ctx), r.says)) << accel_last_error(f.ctx);
  }
  EXPECT_EQ(slurp((root / "notes.txt").string()), "my notes");
  ASSERT_OK(f.ctx, accel_save_model(f.ctx, f.model, (root / "model.safetensors").c_str()));
  ASSERT_OK(f.ctx, accel_save_model(f.ctx, f.model, (root / "model.safetensors").c_str()));
  fs::remove_all(root);
}

// pad_across_processes and gather with tensors whose rank or dtype differ across processes:
// INVALID_ARGUMENT on every process naming both (not a mismatched collective, not OK).
struct Ragged {
  std::vector<accel_status> pad, gather;
  std::vector<std::string> pad_msg, gather_msg;
};

accel_status ragged_ranks(accel_context* ctx, void* user) {
  auto* c = static_cast<Ragged*>(user);
  int32_t rank = 0;
  accel_process_index(ctx, &rank);
  // rank 0: float [2]; rank 1: float [2, 1] (pad); rank 1: int64 [2] (gather)
  accel_tensor* a = rank == 0 ? make_f32({2}, {1, 2}) : make_f32({2, 1}, {1, 2});
  accel_tensor* b = rank == 0 ? make_f32({2}, {1, 2}) : make_i64({2}, {1, 2});
  accel_tensor* out = nullptr;
  c->pad[rank] = accel_pad_across_processes(ctx, a, 0, 0.0, 0, &out);
  c->pad_msg[rank] = accel_last_error(ctx);
  c->gather[rank] = accel_gather(ctx, b, &out);
  c->gather_msg[rank] = accel_last_error(ctx);
  accel_tensor_destroy(a);
  accel_tensor_destroy(b);
  return out == nullptr ? ACCEL_OK : ACCEL_ERR_INTERNAL;
}

TEST(Sim, PadAndGatherRefuseTensorsThatDifferInRankOrDtype) {
  accel_sim_options so = ACCEL_SIM_OPTIONS_INIT;
  Ragged c{{ACCEL_OK, ACCEL_OK}, {ACCEL_OK, ACCEL_OK}, {"", ""}, {"", ""}};
  ASSERT_EQ(accel_sim_run(&so, nullptr, ragged_ranks, &c, nullptr), ACCEL_OK) << accel_last_error(nullptr);
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(c.pad[r], ACCEL_ERR_INVALID_ARGUMENT) << c.pad_msg[r];
    EXPECT_TRUE(contains(c.pad_msg[r].c_str(), "the number of dimensions differs across processes: process 0 has [2], process 1 has [2, 1]"))
        << c.pad_msg[r];
    EXPECT_EQ(c.gather[r], ACCEL_ERR_INVALID_ARGUMENT) << c.gather_msg[r];
    EXPECT_TRUE(contains(c.gather_msg[r].c_str(), "the dtypes differ across processes: process 0 has Float, process 1 has Long"))
        << c.gather_msg[r];
  }
}

// Out of file descriptors: a load reports ACCEL_ERR_OUT_OF_MEMORY naming what ran out and
// changes nothing; with descriptors back, the same load succeeds. In a child: the limit is
// process-wide.
TEST(Checkpoint, RunningOutOfFileDescriptorsIsAResourceError) {
  const std::string dir = tmp_path("fds");
  std::filesystem::remove_all(dir);
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    // the CPU: a forked child cannot initialise CUDA where this process already has
    Fixture f(ACCEL_PRECISION_NO, true, 1, ACCEL_DEVICE_CPU);
    if (accel_save_state(f.ctx, dir.c_str()) != ACCEL_OK) ::_exit(3);
    const int lowest_free = ::dup(0);  // the number the next open would get
    ::close(lowest_free);
    struct rlimit old {};
    ::getrlimit(RLIMIT_NOFILE, &old);
    const struct rlimit none = {static_cast<rlim_t>(lowest_free), old.rlim_max};  // not one more
    if (::setrlimit(RLIMIT_NOFILE, &none) != 0) ::_exit(4);
    const accel_status s = accel_load_state(f.ctx, dir.c_str());
    const std::string msg = accel_last_error(f.ctx);
    ::setrlimit(RLIMIT_NOFILE, &old);
    std::fprintf(stderr, "status %d: %s\n", s, msg.c_str());
    if (s != ACCEL_ERR_OUT_OF_MEMORY || !contains(msg.c_str(), "Too many open files")) ::_exit(1);
    ::_exit(accel_load_state(f.ctx, dir.c_str()) == ACCEL_OK ? 0 : 2);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
  std::filesystem::remove_all(dir);
}

// accel_estimate_memory through the C ABI: a named shape's published counts, a config.json
// directory, the fields of an older out-struct version left alone.
TEST(MemoryEstimate, ThroughTheCABI) {
  accel_memory_estimate_options o;
  ASSERT_EQ(accel_memory_estimate_options_init(&o, ACCEL_MEMORY_ESTIMATE_OPTIONS_VERSION), ACCEL_OK);
  EXPECT_EQ(o.optimizer, ACCEL_OPTIMIZER_ADAMW);
  EXPECT_EQ(o.world_size, 1);
  accel_memory_estimate e{};
  e.version = ACCEL_MEMORY_ESTIMATE_VERSION;
  ASSERT_EQ(accel_estimate_memory("llama-7b", &o, &e), ACCEL_OK) << accel_last_error(nullptr);
  EXPECT_EQ(e.parameters, 6738415616);
  EXPECT_EQ(e.trainable_parameters, 6738415616);
  EXPECT_EQ(e.seq_len, 1024);
  EXPECT_EQ(e.weights, 4ull * 6738415616ull);
  EXPECT_EQ(e.gradients, 4ull * 6738415616ull);
  EXPECT_EQ(e.optimizer_state, 8ull * 6738415616ull);
  EXPECT_GT(e.activations, 0u);
  EXPECT_GE(e.total, e.weights + e.gradients + e.optimizer_state + e.activations);
  EXPECT_TRUE(e.attention == 1 || e.attention == 2);
  // LoRA on 8 GPUs under ZeRO-3: the adapters of q_proj and v_proj, rank 16
  o.lora_rank = 16;
  o.strategy = ACCEL_STRATEGY_ZERO3;
  o.world_size = 8;
  o.mixed_precision = ACCEL_PRECISION_BF16;
  ASSERT_EQ(accel_estimate_memory("llama-7b", &o, &e), ACCEL_OK) << accel_last_error(nullptr);
  EXPECT_EQ(e.trainable_parameters, 32LL * 2 * 16 * (4096 + 4096));
  // a config.json in a directory: a tiny GPT-2 (tied head): wte + wpe + 2 blocks + ln_f
  const auto dir = std::filesystem::temp_directory_path() / ("accel_estimate_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "config.json") << R"({"model_type": "gpt2", "vocab_size": 100, "n_embd": 16, "n_layer": 2,
      "n_head": 2, "n_positions": 32})";
  accel_memory_estimate_options d = ACCEL_MEMORY_ESTIMATE_OPTIONS_INIT;
  ASSERT_EQ(accel_estimate_memory(dir.c_str(), &d, &e), ACCEL_OK) << accel_last_error(nullptr);
  const int64_t block = 2 * 16 + (16 * 48 + 48) + (16 * 16 + 16) + 2 * 16 + (16 * 64 + 64) + (64 * 16 + 16);
  EXPECT_EQ(e.parameters, 100 * 16 + 32 * 16 + 2 * block + 2 * 16);
  EXPECT_EQ(e.seq_len, 32);  // min(1024, n_positions)
  std::filesystem::remove_all(dir);
}

// ---------------------------------------------------------------------------------------
// Trackers (accel_init_trackers, accel_log, accel_end_training)

namespace tracker_tests {
std::string slurp(const std::filesystem::path& p) {
  std::ifstream f(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
}
std::filesystem::path fresh_dir(const std::string& name) {
  const auto d = std::filesystem::temp_directory_path() / ("accel_trackers_" + name + "_" + std::to_string(::getpid()));
  std::filesystem::remove_all(d);
  return d;
}
struct TrackerRanks {
  std::string dir;
  int32_t all_processes = 0;
  std::atomic<int> failures{0};
};
accel_status log_on_rank(accel_context* ctx, void* user) {
  auto* t = static_cast<TrackerRanks*>(user);
  accel_tracker_options o = ACCEL_TRACKER_OPTIONS_INIT;
  o.log_dir = t->dir.c_str();
  o.writers = ACCEL_LOG_JSONL;
  o.all_processes = t->all_processes;
  if (accel_init_trackers(ctx, &o) != ACCEL_OK) return ACCEL_ERR_INTERNAL;
  int32_t rank = 0;
  accel_process_index(ctx, &rank);
  const char* names[1] = {"rank"};
  const double v[1] = {static_cast<double>(rank)};
  if (accel_log(ctx, 1, names, v, 1) != ACCEL_OK) ++t->failures;
  const char* twice[2] = {"a", "a"};  // every process checks its arguments, writing or not
  const double w[2] = {1, 2};
  if (accel_log(ctx, 1, twice, w, 2) != ACCEL_ERR_INVALID_ARGUMENT) ++t->failures;
  return accel_end_training(ctx);
}
}  // namespace tracker_tests

TEST(Trackers, WriteJsonLinesCsvAndTensorBoardFiles) {
  using namespace tracker_tests;
  const auto dir = fresh_dir("write");
  Fixture f(ACCEL_PRECISION_NO, false, 1, ACCEL_DEVICE_CPU);
  const char* names[2] = {"loss", "lr"};
  const double v[2] = {0.25, 1e-3};
  EXPECT_EQ(accel_log(f.ctx, 0, names, v, 2), ACCEL_ERR_INVALID_STATE);
  EXPECT_NE(std::string(accel_last_error(f.ctx)).find("accel_init_trackers"), std::string::npos);
  EXPECT_EQ(accel_end_training(f.ctx), ACCEL_OK);  // none open: nothing to do
  accel_tracker_options o;
  ASSERT_EQ(accel_tracker_options_init(&o, ACCEL_TRACKER_OPTIONS_VERSION), ACCEL_OK);
  EXPECT_EQ(o.writers, 0u);
  EXPECT_EQ(o.log_dir, nullptr);
  EXPECT_EQ(accel_init_trackers(f.ctx, &o), ACCEL_ERR_INVALID_ARGUMENT);  // no log_dir
  const std::string d = (dir / "run").string();
  o.log_dir = d.c_str();
  o.writers = ACCEL_LOG_JSONL | ACCEL_LOG_CSV | ACCEL_LOG_TENSORBOARD;
  ASSERT_EQ(accel_init_trackers(f.ctx, &o), ACCEL_OK) << accel_last_error(f.ctx);
  EXPECT_EQ(accel_init_trackers(f.ctx, &o), ACCEL_ERR_INVALID_STATE);
  ASSERT_EQ(accel_log(f.ctx, 3, names, v, 2), ACCEL_OK) << accel_last_error(f.ctx);
  const double nan_and_inf[2] = {NAN, INFINITY};
  ASSERT_EQ(accel_log(f.ctx, 4, names, nan_and_inf, 2), ACCEL_OK);
  const char* twice[2] = {"loss", "loss"};
  EXPECT_EQ(accel_log(f.ctx, 5, twice, v, 2), ACCEL_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(accel_last_error(f.ctx)).find("'loss' appears twice"), std::string::npos);
  const char* empty[1] = {""};
  EXPECT_EQ(accel_log(f.ctx, 5, empty, v, 1), ACCEL_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(accel_log(f.ctx, -1, names, v, 2), ACCEL_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(accel_log(f.ctx, 5, names, v, 0), ACCEL_ERR_INVALID_ARGUMENT);
  ASSERT_EQ(accel_end_training(f.ctx), ACCEL_OK);
  EXPECT_EQ(accel_log(f.ctx, 6, names, v, 2), ACCEL_ERR_INVALID_STATE);

  // JSON lines: one per call, what was logged (not-finite as null); CSV: a row per scalar
  const std::string jl = slurp(dir / "run" / "metrics.jsonl");
  const auto nl = jl.find('\n');
  ASSERT_NE(nl, std::string::npos) << jl;
  EXPECT_EQ(jl.rfind("{\"step\":3,\"wall_time\":", 0), 0u) << jl;
  EXPECT_NE(jl.find("\"values\":{\"loss\":0.25,\"lr\":0.001}}\n"), std::string::npos) << jl;
  EXPECT_NE(jl.find("{\"step\":4,"), std::string::npos) << jl;
  EXPECT_NE(jl.find("\"values\":{\"loss\":null,\"lr\":null}}\n"), std::string::npos) << jl;
  EXPECT_EQ(std::count(jl.begin(), jl.end(), '\n'), 2);
  const std::string csv = slurp(dir / "run" / "metrics.csv");
  EXPECT_EQ(csv.rfind("wall_time,step,name,value\n", 0), 0u) << csv;
  EXPECT_NE(csv.find(",3,loss,0.25\n"), std::string::npos) << csv;
  EXPECT_NE(csv.find(",3,lr,0.001\n"), std::string::npos) << csv;
  EXPECT_NE(csv.find(",4,loss,nan\n"), std::string::npos) << csv;
  EXPECT_NE(csv.find(",4,lr,inf\n"), std::string::npos) << csv;
  // the event file: TFRecords; the first holds the file version
  std::vector<std::filesystem::path> events;
  for (const auto& e : std::filesystem::directory_iterator(dir / "run"))
    if (e.path().filename().string().rfind("events.out.tfevents.", 0) == 0) events.push_back(e.path());
  ASSERT_EQ(events.size(), 1u);
  const std::string ev = slurp(events[0]);
  ASSERT_GT(ev.size(), 16u);
  uint64_t first = 0;
  std::memcpy(&first, ev.data(), 8);
  EXPECT_EQ(ev.substr(12, first).find("brain.Event:2"), first - 13);  // the last field of the first record
  EXPECT_NE(ev.find("loss"), std::string::npos);

  // again: the lines and rows are appended to, a new event file is written
  ASSERT_EQ(accel_init_trackers(f.ctx, &o), ACCEL_OK) << accel_last_error(f.ctx);
  ASSERT_EQ(accel_log(f.ctx, 7, names, v, 2), ACCEL_OK);
  ASSERT_EQ(accel_end_training(f.ctx), ACCEL_OK);
  const std::string jl2 = slurp(dir / "run" / "metrics.jsonl");
  EXPECT_EQ(jl2.substr(0, jl.size()), jl);
  EXPECT_EQ(std::count(jl2.begin(), jl2.end(), '\n'), 3);
  EXPECT_EQ(slurp(dir / "run" / "metrics.csv").find("wall_time", 1), std::string::npos) << "a second header";
  size_t n_events = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir / "run"))
    n_events += e.path().filename().string().rfind("events.out.tfevents.", 0) == 0;
  EXPECT_EQ(n_events, 2u);
  std::filesystem::remove_all(dir);
}

TEST(Trackers, WritersFromTheEnvironmentAndHostilePaths) {
  using namespace tracker_tests;
  const auto dir = fresh_dir("env");
  std::filesystem::create_directories(dir);
  Fixture f(ACCEL_PRECISION_NO, false, 1, ACCEL_DEVICE_CPU);
  accel_tracker_options o = ACCEL_TRACKER_OPTIONS_INIT;
  const std::string d = (dir / "a").string();
  o.log_dir = d.c_str();
  ::setenv("ACCEL_LOG_WITH", "csv, bogus", 1);
  EXPECT_EQ(accel_init_trackers(f.ctx, &o), ACCEL_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(accel_last_error(f.ctx)).find("ACCEL_LOG_WITH 'csv, bogus': 'bogus' is not a writer"),
            std::string::npos)
      << accel_last_error(f.ctx);
  ::setenv("ACCEL_LOG_WITH", "csv", 1);
  ASSERT_EQ(accel_init_trackers(f.ctx, &o), ACCEL_OK) << accel_last_error(f.ctx);
  ASSERT_EQ(accel_end_training(f.ctx), ACCEL_OK);
  ::unsetenv("ACCEL_LOG_WITH");
  EXPECT_TRUE(std::filesystem::exists(dir / "a" / "metrics.csv"));
  EXPECT_FALSE(std::filesystem::exists(dir / "a" / "metrics.jsonl"));
  // default without the variable: JSON lines
  const std::string b = (dir / "b").string();
  o.log_dir = b.c_str();
  ASSERT_EQ(accel_init_trackers(f.ctx, &o), ACCEL_OK);
  ASSERT_EQ(accel_end_training(f.ctx), ACCEL_OK);
  EXPECT_TRUE(std::filesystem::exists(dir / "b" / "metrics.jsonl"));
  // writers outside the three
  o.writers = 8;
  EXPECT_EQ(accel_init_trackers(f.ctx, &o), ACCEL_ERR_INVALID_ARGUMENT);
  o.writers = ACCEL_LOG_JSONL;
  // a log_dir that is a file; a metrics file that is a symbolic link: refused, nothing written
  std::ofstream(dir / "notes.txt") << "mine";
  const std::string file = (dir / "notes.txt").string();
  o.log_dir = file.c_str();
  EXPECT_EQ(accel_init_trackers(f.ctx, &o), ACCEL_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(accel_last_error(f.ctx)).find("is a regular file, not a directory"), std::string::npos)
      << accel_last_error(f.ctx);
  std::filesystem::create_directories(dir / "c");
  std::filesystem::create_symlink(dir / "notes.txt", dir / "c" / "metrics.jsonl");
  const std::string c = (dir / "c").string();
  o.log_dir = c.c_str();
  EXPECT_EQ(accel_init_trackers(f.ctx, &o), ACCEL_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(accel_last_error(f.ctx)).find("is a symbolic link"), std::string::npos)
      << accel_last_error(f.ctx);
  EXPECT_EQ(slurp(dir / "notes.txt"), "mine");
  const char* names[1] = {"x"};
  const double v[1] = {1};
  EXPECT_EQ(accel_log(f.ctx, 0, names, v, 1), ACCEL_ERR_INVALID_STATE) << "a failed init left trackers open";
  std::filesystem::remove_all(dir);
}

TEST(Trackers, TheMainProcessWritesUnlessEveryProcessIsAsked) {
  using namespace tracker_tests;
  const auto dir = fresh_dir("ranks");
  accel_sim_options so = ACCEL_SIM_OPTIONS_INIT;
  so.world_size = 3;
  TrackerRanks t;
  t.dir = (dir / "main").string();
  ASSERT_EQ(accel_sim_run(&so, nullptr, log_on_rank, &t, nullptr), ACCEL_OK) << accel_last_error(nullptr);
  EXPECT_EQ(t.failures.load(), 0);
  const std::string jl = slurp(dir / "main" / "metrics.jsonl");
  EXPECT_EQ(std::count(jl.begin(), jl.end(), '\n'), 1) << jl;
  EXPECT_NE(jl.find("\"values\":{\"rank\":0.0}"), std::string::npos) << jl;
  EXPECT_FALSE(std::filesystem::exists(dir / "main" / "process-1"));
  TrackerRanks all;
  all.dir = (dir / "all").string();
  all.all_processes = 1;
  ASSERT_EQ(accel_sim_run(&so, nullptr, log_on_rank, &all, nullptr), ACCEL_OK) << accel_last_error(nullptr);
  EXPECT_EQ(all.failures.load(), 0);
  for (int r = 0; r < 3; ++r) {
    const std::string l = slurp(dir / "all" / ("process-" + std::to_string(r)) / "metrics.jsonl");
    EXPECT_NE(l.find("\"values\":{\"rank\":" + std::to_string(r) + ".0}"), std::string::npos) << r << ": " << l;
  }
  std::filesystem::remove_all(dir);
}
