// Tests of the C ABI through include/accel/accel.h only (no libtorch here): ownership,
// tensors, training through the ABI, and every misuse case returning a status and a
// message instead of crashing.
#include "common.h"

using namespace capi_test;  // NOLINT(google-build-using-namespace)

namespace {

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

}  // namespace
