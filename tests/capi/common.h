// Shared by the C ABI's tests (test_capi.cpp, test_capi_sim.cpp, test_capi_versions.cpp):
// temporary paths, tensors made from host data, a small prepared MLP, ranks that train.
#pragma once

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

#define ASSERT_OK(ctx, call) ASSERT_EQ((call), ACCEL_OK) << accel_last_error(ctx)

namespace capi_test {

inline std::string tmp_path(const std::string& name) {
  const char* dir = std::getenv("TMPDIR");
  return std::string(dir ? dir : "/tmp") + "/accel_test_capi_" + std::to_string(::getpid()) + "_" + name;
}

inline bool contains(const char* hay, const std::string& needle) { return std::string(hay).find(needle) != std::string::npos; }

inline accel_tensor* make_f32(std::vector<int64_t> shape, const std::vector<float>& data) {
  accel_tensor* t = nullptr;
  EXPECT_EQ(accel_tensor_create(ACCEL_FLOAT32, shape.data(), shape.size(), data.data(), &t), ACCEL_OK)
      << accel_last_error(nullptr);
  return t;
}

inline accel_tensor* make_i64(std::vector<int64_t> shape, const std::vector<int64_t>& data) {
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

// Each rank trains its own MLP with the same seed on rank-specific data, then the ranks
// average their first weight: twice, bit for bit.
inline accel_status train_and_average(accel_context* ctx, void* user) {
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

inline std::vector<float> host_floats(accel_tensor* t) {
  size_t nb = 0;
  accel_tensor_nbytes(t, &nb);
  std::vector<float> v(nb / 4);
  accel_tensor_copy_to_host(t, v.data(), nb);
  return v;
}

}  // namespace capi_test
