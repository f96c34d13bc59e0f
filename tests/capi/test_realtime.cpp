// Inference beside training through the C ABI (accel_inference_*, accel_publish_weights) and
// the bounded training call (accel_train_micro_batches): values, versions, threads, errors.
#include <accel/accel.h>
#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <cstring>
#include <map>
#include <string>
#include <thread>
#include <vector>

#ifndef ACCEL_TEST_LM_FIXTURES
#define ACCEL_TEST_LM_FIXTURES "tests/fixtures/lm"
#endif
#ifndef ACCEL_TEST_TORCHSCRIPT
#define ACCEL_TEST_TORCHSCRIPT "digits_model.pt"
#endif

namespace {

#define ASSERT_OK(ctx, call) ASSERT_EQ((call), ACCEL_OK) << accel_last_error(ctx)

bool contains(const char* hay, const std::string& needle) { return std::string(hay).find(needle) != std::string::npos; }

accel_tensor* f32(std::vector<int64_t> shape, const std::vector<float>& data) {
  accel_tensor* t = nullptr;
  EXPECT_EQ(accel_tensor_create(ACCEL_FLOAT32, shape.data(), shape.size(), data.data(), &t), ACCEL_OK)
      << accel_last_error(nullptr);
  return t;
}

accel_tensor* i64(std::vector<int64_t> shape, const std::vector<int64_t>& data) {
  accel_tensor* t = nullptr;
  EXPECT_EQ(accel_tensor_create(ACCEL_INT64, shape.data(), shape.size(), data.data(), &t), ACCEL_OK);
  return t;
}

std::vector<float> floats(const accel_tensor* t) {
  size_t n = 0;
  EXPECT_EQ(accel_tensor_nbytes(t, &n), ACCEL_OK);
  std::vector<float> v(n / sizeof(float));
  EXPECT_EQ(accel_tensor_copy_to_host_as(t, ACCEL_FLOAT32, v.data(), n), ACCEL_OK) << accel_last_error(nullptr);
  return v;
}

// A context training an MLP (5 -> 16 -> 3, tanh) with AdamW, prepared.
struct Trainer {
  accel_context* ctx = nullptr;
  accel_model* model = nullptr;
  accel_optimizer* opt = nullptr;
  std::vector<float> xs;  // 8 samples of 5
  std::vector<float> ys;  // their targets, 8 of 3

  explicit Trainer(int accum = 1, uint64_t seed = 3) {
    accel_options o = ACCEL_OPTIONS_INIT;
    o.seed = seed;
    o.device = ACCEL_DEVICE_CPU;
    o.gradient_accumulation_steps = accum;
    EXPECT_EQ(accel_init(&o, &ctx), ACCEL_OK) << accel_last_error(nullptr);
    const int64_t sizes[] = {5, 16, 3};
    accel_mlp_options m = ACCEL_MLP_OPTIONS_INIT;
    m.layer_sizes = sizes;
    m.num_layer_sizes = 3;
    m.activation = ACCEL_ACT_TANH;
    EXPECT_EQ(accel_model_create_mlp(ctx, &m, &model), ACCEL_OK) << accel_last_error(ctx);
    accel_adamw_options a = ACCEL_ADAMW_OPTIONS_INIT;
    a.lr = 0.01;
    EXPECT_EQ(accel_optimizer_create_adamw(ctx, model, &a, &opt), ACCEL_OK) << accel_last_error(ctx);
    EXPECT_EQ(accel_prepare(ctx, model, opt, nullptr, nullptr), ACCEL_OK) << accel_last_error(ctx);
    for (int i = 0; i < 8 * 5; ++i) xs.push_back(std::sin(0.7f * static_cast<float>(i)));
    for (int i = 0; i < 8 * 3; ++i) ys.push_back(std::cos(0.3f * static_cast<float>(i)));
  }
  ~Trainer() {
    accel_optimizer_destroy(opt);
    accel_model_destroy(model);
    accel_destroy(ctx);
  }
  // The model's own forward on xs (training mode: the MLP has no dropout, so the same values).
  std::vector<float> forward() {
    accel_tensor* x = f32({8, 5}, xs);
    accel_tensor* y = nullptr;
    EXPECT_EQ(accel_model_forward(ctx, model, &x, 1, &y), ACCEL_OK) << accel_last_error(ctx);
    std::vector<float> v = floats(y);
    accel_tensor_destroy(x);
    accel_tensor_destroy(y);
    return v;
  }
  // One step of MSE on (xs, ys) through the calls accel_train_micro_batches replaces.
  double step() {
    accel_tensor* x = f32({8, 5}, xs);
    accel_tensor* t = f32({8, 3}, ys);
    accel_tensor *y = nullptr, *loss = nullptr;
    EXPECT_EQ(accel_model_forward(ctx, model, &x, 1, &y), ACCEL_OK) << accel_last_error(ctx);
    EXPECT_EQ(accel_loss_mse(ctx, y, t, &loss), ACCEL_OK) << accel_last_error(ctx);
    EXPECT_EQ(accel_backward(ctx, loss), ACCEL_OK) << accel_last_error(ctx);
    EXPECT_EQ(accel_step(ctx, nullptr), ACCEL_OK) << accel_last_error(ctx);
    double v = 0;
    accel_tensor_item(loss, &v);
    for (auto* p : {x, t, y, loss}) accel_tensor_destroy(p);
    return v;
  }
};

std::vector<float> run(accel_inference* inf, const std::vector<float>& xs) {
  accel_tensor* x = f32({static_cast<int64_t>(xs.size() / 5), 5}, xs);
  accel_tensor* y = nullptr;
  EXPECT_EQ(accel_inference_run(inf, &x, 1, &y), ACCEL_OK) << accel_last_error(nullptr);
  std::vector<float> v = y ? floats(y) : std::vector<float>();
  accel_tensor_destroy(x);
  accel_tensor_destroy(y);
  return v;
}

uint64_t version_of(const accel_inference* inf) {
  uint64_t v = 0;
  double age = -1;
  EXPECT_EQ(accel_inference_weights(inf, &v, &age), ACCEL_OK);
  EXPECT_GE(age, 0.0);
  return v;
}

// ---------------------------------------------------------------------------------------
// Inference copies

TEST(Inference, RunsTheModelsForwardAndPicksUpPublishedWeightsAtTheNextRun) {
  Trainer t;
  accel_inference* inf = nullptr;
  ASSERT_OK(t.ctx, accel_inference_create(t.ctx, t.model, nullptr, &inf));
  EXPECT_EQ(version_of(inf), 1u);  // the creation published version 1
  const std::vector<float> before = t.forward();
  EXPECT_EQ(run(inf, t.xs), before);  // the same forward, bit for bit

  t.step();
  const std::vector<float> after = t.forward();
  ASSERT_NE(after, before);
  EXPECT_EQ(run(inf, t.xs), before) << "a step the trainer did not publish reached inference";
  EXPECT_EQ(version_of(inf), 1u);
  uint64_t v = 0;
  ASSERT_OK(t.ctx, accel_publish_weights(t.ctx, t.model, &v));
  EXPECT_EQ(v, 2u);
  EXPECT_EQ(version_of(inf), 1u) << "a copy changes weights only when a run starts";
  EXPECT_EQ(run(inf, t.xs), after);
  EXPECT_EQ(version_of(inf), 2u);

  // the copy's output is an ordinary tensor: a loss (with autograd) may read it
  accel_tensor* x = f32({8, 5}, t.xs);
  accel_tensor *y = nullptr, *target = f32({8, 3}, t.ys), *loss = nullptr;
  ASSERT_OK(nullptr, accel_inference_run(inf, &x, 1, &y));
  ASSERT_OK(t.ctx, accel_loss_mse(t.ctx, y, target, &loss));
  for (auto* p : {x, y, target, loss}) accel_tensor_destroy(p);
  accel_inference_destroy(inf);
}

TEST(Inference, TwoCopiesAndPublicationsBeforeCreation) {
  Trainer t;
  uint64_t v = 0;
  ASSERT_OK(t.ctx, accel_publish_weights(t.ctx, t.model, &v));  // before any copy: still counted
  EXPECT_EQ(v, 1u);
  t.step();
  accel_inference *a = nullptr, *b = nullptr;
  ASSERT_OK(t.ctx, accel_inference_create(t.ctx, t.model, nullptr, &a));
  EXPECT_EQ(version_of(a), 2u);  // the current weights, not the older publication
  EXPECT_EQ(run(a, t.xs), t.forward());
  t.step();
  ASSERT_OK(t.ctx, accel_inference_create(t.ctx, t.model, nullptr, &b));
  EXPECT_EQ(version_of(b), 3u);
  const std::vector<float> now = t.forward();
  EXPECT_EQ(run(b, t.xs), now);
  EXPECT_EQ(run(a, t.xs), now);  // the other copy takes the latest at its next run
  EXPECT_EQ(version_of(a), 3u);
  accel_inference_destroy(a);
  accel_inference_destroy(b);
}

TEST(Inference, ACopyOutlivesItsModelAndItsContext) {
  auto* t = new Trainer();
  accel_inference* inf = nullptr;
  ASSERT_OK(t->ctx, accel_inference_create(t->ctx, t->model, nullptr, &inf));
  t->step();
  ASSERT_OK(t->ctx, accel_publish_weights(t->ctx, t->model, nullptr));
  const std::vector<float> expect = t->forward();
  const std::vector<float> xs = t->xs;
  delete t;  // the optimizer, the model and the context
  EXPECT_EQ(run(inf, xs), expect);
  EXPECT_EQ(version_of(inf), 2u);
  accel_inference_destroy(inf);
}

// The trainer publishes while another thread runs inference as fast as it can: every output
// is exactly the model's output for the version the run reports, so no run ever saw a set
// being written, and the runs saw many versions (they never waited for the trainer).
TEST(Inference, RunsOnAnotherThreadSeeWholePublicationsOnly) {
  Trainer t;
  accel_inference* inf = nullptr;
  ASSERT_OK(t.ctx, accel_inference_create(t.ctx, t.model, nullptr, &inf));
  std::map<uint64_t, std::vector<float>> expected;  // version -> the trainer's forward (this thread's)
  expected[1] = t.forward();
  std::vector<std::pair<uint64_t, std::vector<float>>> seen;  // the reader's alone until it is joined
  std::atomic<size_t> runs{0};
  std::atomic<bool> done{false};
  const std::vector<float> xs = t.xs;
  std::thread reader([&] {
    while (!done.load()) {
      std::vector<float> y = run(inf, xs);
      seen.emplace_back(version_of(inf), std::move(y));
      ++runs;
    }
  });
  while (runs.load() < 2) std::this_thread::yield();  // version 1 run
  for (int i = 0; i < 150; ++i) {
    t.step();
    uint64_t v = 0;
    ASSERT_OK(t.ctx, accel_publish_weights(t.ctx, t.model, &v));
    expected[v] = t.forward();
    if (v % 10 == 1) {  // paced: a run that began after this publication has ended (a busy machine may
      const size_t r = runs.load();  // pause the reader for milliseconds while 150 steps take 20)
      while (runs.load() < r + 2) std::this_thread::yield();
    }
  }
  // let the reader run on the last weights too
  const size_t runs_before = runs.load();
  while (runs.load() < runs_before + 3) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  done.store(true);
  reader.join();
  std::map<uint64_t, int> versions;
  for (const auto& [v, y] : seen) {
    ASSERT_TRUE(expected.count(v)) << "version " << v;
    ASSERT_EQ(y, expected[v]) << "the run of version " << v << " saw other weights";
    ++versions[v];
  }
  for (uint64_t v = 1; v <= 151; v += 10) EXPECT_TRUE(versions.count(v)) << "no run saw version " << v;
  accel_inference_destroy(inf);
}

TEST(Inference, TorchScriptModulesAndLanguageModels) {
  accel_options o = ACCEL_OPTIONS_INIT;
  o.device = ACCEL_DEVICE_CPU;
  accel_context* ctx = nullptr;
  ASSERT_OK(nullptr, accel_init(&o, &ctx));
  // a TorchScript module: the copy is the module's deep copy
  accel_model* ts = nullptr;
  ASSERT_OK(ctx, accel_model_load_torchscript(ctx, ACCEL_TEST_TORCHSCRIPT, &ts));
  accel_inference* inf = nullptr;
  ASSERT_OK(ctx, accel_inference_create(ctx, ts, nullptr, &inf));
  std::vector<float> img(2 * 64);
  for (size_t i = 0; i < img.size(); ++i) img[i] = static_cast<float>(i % 17) / 16.0f;
  accel_tensor* x = f32({2, 64}, img);
  accel_tensor *a = nullptr, *b = nullptr;
  ASSERT_OK(ctx, accel_model_set_training(ctx, ts, 0));
  ASSERT_OK(ctx, accel_model_forward(ctx, ts, &x, 1, &a));
  ASSERT_OK(nullptr, accel_inference_run(inf, &x, 1, &b));
  EXPECT_EQ(floats(a), floats(b));
  for (auto* p : {x, a, b}) accel_tensor_destroy(p);
  accel_inference_destroy(inf);
  accel_model_destroy(ts);

  // a causal LM, then the same with LoRA adapters (the published weights are the adapters)
  for (const bool lora : {false, true}) {
    accel_model* lm = nullptr;
    ASSERT_OK(ctx, accel_model_create_lm(ctx, ACCEL_TEST_LM_FIXTURES "/llama-tiny", nullptr, &lm));
    if (lora) {
      accel_lora_options lo = ACCEL_LORA_OPTIONS_INIT;
      lo.r = 4;
      ASSERT_OK(ctx, accel_model_add_lora(ctx, lm, &lo));
    }
    accel_optimizer* opt = nullptr;
    accel_adamw_options ao = ACCEL_ADAMW_OPTIONS_INIT;
    ao.lr = 0.05;
    ASSERT_OK(ctx, accel_optimizer_create_adamw(ctx, lm, &ao, &opt));
    ASSERT_OK(ctx, accel_prepare(ctx, lm, opt, nullptr, nullptr));  // a context binds one model: a new one each
    ASSERT_OK(ctx, accel_inference_create(ctx, lm, nullptr, &inf));
    accel_tensor* ids = i64({1, 6}, {1, 5, 9, 2, 7, 3});
    accel_tensor *loss = nullptr, *want = nullptr, *got = nullptr;
    ASSERT_OK(ctx, accel_lm_forward(ctx, lm, ids, nullptr, ids, nullptr, &loss, nullptr));
    ASSERT_OK(ctx, accel_backward(ctx, loss));
    ASSERT_OK(ctx, accel_step(ctx, nullptr));
    ASSERT_OK(ctx, accel_publish_weights(ctx, lm, nullptr));
    ASSERT_OK(ctx, accel_model_set_training(ctx, lm, 0));
    ASSERT_OK(ctx, accel_model_forward(ctx, lm, &ids, 1, &want));
    ASSERT_OK(nullptr, accel_inference_run(inf, &ids, 1, &got));
    EXPECT_EQ(floats(want), floats(got)) << (lora ? "with LoRA" : "without LoRA");
    EXPECT_EQ(version_of(inf), 2u);
    for (auto* p : {ids, loss, want, got}) accel_tensor_destroy(p);
    accel_inference_destroy(inf);
    accel_optimizer_destroy(opt);
    accel_model_destroy(lm);
    accel_destroy(ctx);
    ASSERT_OK(nullptr, accel_init(&o, &ctx));
  }
  accel_destroy(ctx);
}

TEST(Inference, Errors) {
  Trainer t;
  accel_inference* inf = reinterpret_cast<accel_inference*>(0x1);
  accel_inference_options io = ACCEL_INFERENCE_OPTIONS_INIT;
  EXPECT_EQ(io.num_threads, 1);
  for (int bad : {0, -1, 4097}) {
    io.num_threads = bad;
    EXPECT_EQ(accel_inference_create(t.ctx, t.model, &io, &inf), ACCEL_ERR_INVALID_ARGUMENT);
    EXPECT_TRUE(contains(accel_last_error(t.ctx), "num_threads must be in [1, 4096], got " + std::to_string(bad)))
        << accel_last_error(t.ctx);
  }
  io = ACCEL_INFERENCE_OPTIONS_INIT;
  io.version = 2;
  EXPECT_EQ(accel_inference_create(t.ctx, t.model, &io, &inf), ACCEL_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(accel_inference_create(t.ctx, nullptr, nullptr, &inf), ACCEL_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(accel_inference_create(t.ctx, t.model, nullptr, nullptr), ACCEL_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(inf, reinterpret_cast<accel_inference*>(0x1)) << "*out changed by a failing call";
  Trainer other;
  EXPECT_EQ(accel_inference_create(other.ctx, t.model, nullptr, &inf), ACCEL_ERR_INVALID_ARGUMENT);
  EXPECT_TRUE(contains(accel_last_error(other.ctx), "another context")) << accel_last_error(other.ctx);
  EXPECT_EQ(accel_publish_weights(other.ctx, t.model, nullptr), ACCEL_ERR_INVALID_ARGUMENT);

  ASSERT_OK(t.ctx, accel_inference_create(t.ctx, t.model, nullptr, &inf));
  accel_tensor* wrong = f32({2, 4}, std::vector<float>(8, 1.0f));
  accel_tensor* out = reinterpret_cast<accel_tensor*>(0x1);
  EXPECT_EQ(accel_inference_run(inf, &wrong, 1, &out), ACCEL_ERR_INVALID_ARGUMENT);
  EXPECT_TRUE(contains(accel_last_error(nullptr), "the MLP expects input [batch, 5], got [2, 4]"))
      << accel_last_error(nullptr);
  EXPECT_EQ(accel_inference_run(inf, nullptr, 1, &out), ACCEL_ERR_INVALID_ARGUMENT);
  accel_tensor* none = nullptr;
  EXPECT_EQ(accel_inference_run(inf, &none, 1, &out), ACCEL_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(accel_inference_run(nullptr, &wrong, 1, &out), ACCEL_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(out, reinterpret_cast<accel_tensor*>(0x1));
  EXPECT_EQ(accel_inference_weights(nullptr, nullptr, nullptr), ACCEL_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(accel_inference_weights(inf, nullptr, nullptr), ACCEL_OK);
  accel_tensor_destroy(wrong);
  accel_inference_destroy(inf);
  accel_inference_destroy(nullptr);
}

// ---------------------------------------------------------------------------------------
// accel_train_micro_batches

struct Data {
  std::vector<float> xs, ys;
  explicit Data(int rows) {
    for (int i = 0; i < rows * 5; ++i) xs.push_back(std::sin(0.37f * static_cast<float>(i)));
    for (int i = 0; i < rows * 3; ++i) ys.push_back(std::cos(0.11f * static_cast<float>(i)));
  }
  accel_dataloader* loader(accel_context* ctx, int batch, bool targets = true, bool shuffle = true) const {
    accel_tensor* x = f32({static_cast<int64_t>(xs.size() / 5), 5}, xs);
    accel_tensor* y = targets ? f32({static_cast<int64_t>(ys.size() / 3), 3}, ys) : nullptr;
    accel_dataloader_options o = ACCEL_DATALOADER_OPTIONS_INIT;
    o.batch_size = batch;
    o.shuffle = shuffle ? 1 : 0;
    o.seed = 5;
    accel_dataloader* l = nullptr;
    EXPECT_EQ(accel_dataloader_create(ctx, x, y, &o, &l), ACCEL_OK) << accel_last_error(ctx);
    accel_tensor_destroy(x);
    accel_tensor_destroy(y);
    return l;
  }
};

std::vector<float> all_weights(Trainer& t) {
  std::vector<float> w;
  size_t n = 0;
  accel_model_num_parameters(t.model, &n, nullptr);
  for (size_t i = 0; i < n; ++i) {
    accel_tensor* p = nullptr;
    EXPECT_EQ(accel_model_parameter(t.ctx, t.model, i, &p), ACCEL_OK);
    const std::vector<float> v = floats(p);
    w.insert(w.end(), v.begin(), v.end());
    accel_tensor_destroy(p);
  }
  return w;
}

TEST(TrainMicroBatches, DoesWhatTheLoopOfCallsDoes) {
  const Data d(20);  // 5 batches of 4 an epoch
  Trainer a(/*accum=*/2), b(/*accum=*/2);
  accel_dataloader* la = d.loader(a.ctx, 4);
  accel_dataloader* lb = d.loader(b.ctx, 4);
  ASSERT_OK(a.ctx, accel_prepare(a.ctx, nullptr, nullptr, nullptr, la));
  ASSERT_OK(b.ctx, accel_prepare(b.ctx, nullptr, nullptr, nullptr, lb));
  // a: the calls one by one, 3 micro-batches; then the rest of the epoch
  std::vector<double> losses;
  int steps = 0;
  auto loop = [&](int n) {
    for (int i = 0; i < n; ++i) {
      accel_tensor *x = nullptr, *y = nullptr, *out = nullptr, *loss = nullptr;
      ASSERT_OK(a.ctx, accel_dataloader_next(a.ctx, la, &x, &y));
      if (!x) return;
      ASSERT_OK(a.ctx, accel_model_forward(a.ctx, a.model, &x, 1, &out));
      ASSERT_OK(a.ctx, accel_loss_mse(a.ctx, out, y, &loss));
      ASSERT_OK(a.ctx, accel_backward(a.ctx, loss));
      accel_step_result r{};
      ASSERT_OK(a.ctx, accel_step(a.ctx, &r));
      steps += r.stepped;
      double v = 0;
      accel_tensor_item(loss, &v);
      losses.push_back(v);
      for (auto* p : {x, y, out, loss}) accel_tensor_destroy(p);
    }
  };
  loop(3);
  accel_train_result r{};
  r.version = ACCEL_TRAIN_RESULT_VERSION;
  ASSERT_OK(b.ctx, accel_train_micro_batches(b.ctx, b.model, lb, ACCEL_LOSS_MSE, 3, 0.0, &r));
  EXPECT_EQ(r.micro_batches, 3);
  EXPECT_EQ(r.optimizer_steps, steps);  // 1: after the second micro-batch (K = 2)
  EXPECT_EQ(steps, 1);
  EXPECT_EQ(r.skipped_steps, 0);
  EXPECT_EQ(r.epoch_ended, 0);
  EXPECT_DOUBLE_EQ(r.mean_loss, (losses[0] + losses[1] + losses[2]) / 3);
  EXPECT_GE(r.seconds, 0.0);
  EXPECT_EQ(all_weights(a), all_weights(b));
  // the rest of the epoch: 2 batches, the last a real step (the end of the data), then the end
  losses.clear();
  steps = 0;
  loop(3);
  ASSERT_OK(b.ctx, accel_train_micro_batches(b.ctx, b.model, lb, ACCEL_LOSS_MSE, 10, 0.0, &r));
  EXPECT_EQ(r.micro_batches, 2);
  EXPECT_EQ(r.optimizer_steps, 2);
  EXPECT_EQ(steps, 2);
  EXPECT_EQ(r.epoch_ended, 1);
  EXPECT_DOUBLE_EQ(r.mean_loss, (losses[0] + losses[1]) / 2);
  EXPECT_EQ(all_weights(a), all_weights(b));
  int64_t epoch = -1;
  ASSERT_OK(b.ctx, accel_dataloader_epoch(lb, &epoch));
  EXPECT_EQ(epoch, 1);
  // the next call starts the next epoch; out may be NULL
  ASSERT_OK(b.ctx, accel_train_micro_batches(b.ctx, b.model, lb, ACCEL_LOSS_MSE, 1, 0.0, nullptr));
  loop(1);
  EXPECT_EQ(all_weights(a), all_weights(b));
  accel_dataloader_destroy(la);
  accel_dataloader_destroy(lb);
}

TEST(TrainMicroBatches, StopsWithinItsTimeBudgetAfterAtLeastOne) {
  const Data d(400);
  Trainer t;
  accel_dataloader* l = d.loader(t.ctx, 4);
  accel_train_result r{};
  r.version = ACCEL_TRAIN_RESULT_VERSION;
  ASSERT_OK(t.ctx, accel_train_micro_batches(t.ctx, t.model, l, ACCEL_LOSS_MSE, 50, 1e-9, &r));
  EXPECT_EQ(r.micro_batches, 1);  // at least one runs; the second would end past 1 ns
  EXPECT_EQ(r.optimizer_steps, 1);
  // a generous budget: the bound is the micro-batch count
  ASSERT_OK(t.ctx, accel_train_micro_batches(t.ctx, t.model, l, ACCEL_LOSS_MSE, 7, 60.0, &r));
  EXPECT_EQ(r.micro_batches, 7);
  // a budget of a few micro-batches' time: it stops before the count, inside the budget
  const double per = r.seconds / 7;
  ASSERT_OK(t.ctx, accel_train_micro_batches(t.ctx, t.model, l, ACCEL_LOSS_MSE, 90, per * 5, &r));
  EXPECT_LT(r.micro_batches, 90);
  EXPECT_GE(r.micro_batches, 1);
  accel_dataloader_destroy(l);
}

TEST(TrainMicroBatches, CrossEntropyAndTheCausalLmLoss) {
  // cross-entropy: an MLP classifier trained by the call gets better on its data
  Trainer t;
  std::vector<float> xs;
  std::vector<int64_t> ys;
  for (int i = 0; i < 60; ++i) {
    const int c = i % 3;
    for (int k = 0; k < 5; ++k) xs.push_back(static_cast<float>(k == c) + 0.1f * std::sin(static_cast<float>(i * 5 + k)));
    ys.push_back(c);
  }
  accel_tensor* X = f32({60, 5}, xs);
  accel_tensor* Y = i64({60}, ys);
  accel_dataloader_options lo = ACCEL_DATALOADER_OPTIONS_INIT;
  lo.batch_size = 6;
  accel_dataloader* l = nullptr;
  ASSERT_OK(t.ctx, accel_dataloader_create(t.ctx, X, Y, &lo, &l));
  accel_train_result first{}, last{};
  first.version = last.version = ACCEL_TRAIN_RESULT_VERSION;
  ASSERT_OK(t.ctx, accel_train_micro_batches(t.ctx, t.model, l, ACCEL_LOSS_CROSS_ENTROPY, 10, 0, &first));
  for (int e = 0; e < 10; ++e)
    ASSERT_OK(t.ctx, accel_train_micro_batches(t.ctx, t.model, l, ACCEL_LOSS_CROSS_ENTROPY, 10, 0, &last));
  EXPECT_LT(last.mean_loss, first.mean_loss * 0.5) << first.mean_loss << " -> " << last.mean_loss;
  accel_dataloader_destroy(l);
  accel_tensor_destroy(X);
  accel_tensor_destroy(Y);

  // the causal LM loss on a token loader, against accel_lm_forward's
  accel_options o = ACCEL_OPTIONS_INIT;
  o.device = ACCEL_DEVICE_CPU;
  accel_context* ctx = nullptr;
  ASSERT_OK(nullptr, accel_init(&o, &ctx));
  accel_model* lm = nullptr;
  ASSERT_OK(ctx, accel_model_create_lm(ctx, ACCEL_TEST_LM_FIXTURES "/llama-tiny", nullptr, &lm));
  accel_optimizer* opt = nullptr;
  ASSERT_OK(ctx, accel_optimizer_create_sgd(ctx, lm, nullptr, &opt));
  ASSERT_OK(ctx, accel_prepare(ctx, lm, opt, nullptr, nullptr));
  std::vector<int64_t> toks;
  for (int i = 0; i < 64; ++i) toks.push_back((i * 7) % 50);
  accel_tensor* tokens = i64({64}, toks);
  accel_lm_data_options ld = ACCEL_LM_DATA_OPTIONS_INIT;
  ld.block_size = 8;
  accel_dataloader_options dl = ACCEL_DATALOADER_OPTIONS_INIT;
  dl.batch_size = 2;
  accel_dataloader* lml = nullptr;
  ASSERT_OK(ctx, accel_lm_dataloader_create(ctx, tokens, nullptr, &ld, &dl, &lml));
  accel_tensor *ids = nullptr, *labels = nullptr, *loss = nullptr;
  ASSERT_OK(ctx, accel_dataloader_next(ctx, lml, &ids, &labels));
  ASSERT_OK(ctx, accel_lm_forward(ctx, lm, ids, nullptr, labels ? labels : ids, nullptr, &loss, nullptr));
  double want = 0;
  ASSERT_OK(ctx, accel_tensor_item(loss, &want));
  for (auto* p : {ids, labels, loss}) accel_tensor_destroy(p);
  ASSERT_OK(ctx, accel_dataloader_set_epoch(lml, 0));
  accel_train_result r{};
  r.version = ACCEL_TRAIN_RESULT_VERSION;
  ASSERT_OK(ctx, accel_train_micro_batches(ctx, lm, lml, ACCEL_LOSS_CAUSAL_LM, 1, 0, &r));
  EXPECT_EQ(r.micro_batches, 1);
  EXPECT_NEAR(r.mean_loss, want, 1e-6 * std::fabs(want));
  EXPECT_EQ(r.optimizer_steps, 1);
  accel_dataloader_destroy(lml);
  accel_tensor_destroy(tokens);
  accel_optimizer_destroy(opt);
  accel_model_destroy(lm);
  accel_destroy(ctx);
}

TEST(TrainMicroBatches, Errors) {
  const Data d(8);
  Trainer t;
  accel_dataloader* l = d.loader(t.ctx, 4);
  accel_train_result r{};
  r.version = ACCEL_TRAIN_RESULT_VERSION;
  r.micro_batches = -7;
  auto refused = [&](accel_status want, accel_loss loss, int32_t n, double secs, const std::string& says,
                     accel_dataloader* loader = nullptr, accel_context* ctx = nullptr, accel_model* model = nullptr) {
    ctx = ctx ? ctx : t.ctx;
    EXPECT_EQ(accel_train_micro_batches(ctx, model ? model : t.model, loader ? loader : l, loss, n, secs, &r), want);
    EXPECT_TRUE(contains(accel_last_error(ctx), says)) << accel_last_error(ctx);
    EXPECT_EQ(r.micro_batches, -7) << "*out changed by a failing call";
  };
  refused(ACCEL_ERR_INVALID_ARGUMENT, ACCEL_LOSS_MSE, 0, 0, "max_micro_batches must be >= 1, got 0");
  refused(ACCEL_ERR_INVALID_ARGUMENT, ACCEL_LOSS_MSE, 1, -1, "max_seconds must be finite and >= 0, got -1");
  refused(ACCEL_ERR_INVALID_ARGUMENT, ACCEL_LOSS_MSE, 1, NAN, "max_seconds must be finite");
  refused(ACCEL_ERR_INVALID_ARGUMENT, static_cast<accel_loss>(9), 1, 0, "loss must be an accel_loss (0..2), got 9");
  refused(ACCEL_ERR_INVALID_ARGUMENT, ACCEL_LOSS_CAUSAL_LM, 1, 0, "ACCEL_LOSS_CAUSAL_LM needs a causal LM");
  accel_dataloader* bare = d.loader(t.ctx, 4, /*targets=*/false);
  refused(ACCEL_ERR_INVALID_ARGUMENT, ACCEL_LOSS_MSE, 1, 0, "the loader has no targets", bare);
  int64_t position_epoch = -1;
  ASSERT_OK(t.ctx, accel_dataloader_epoch(bare, &position_epoch));
  accel_tensor* first = nullptr;  // the refused call took no batch: the epoch's first is still there
  ASSERT_OK(t.ctx, accel_dataloader_next(t.ctx, bare, &first, nullptr));
  ASSERT_NE(first, nullptr);
  std::vector<float> expect_first;
  {
    accel_dataloader* again = d.loader(t.ctx, 4, false);
    accel_tensor* f = nullptr;
    ASSERT_OK(t.ctx, accel_dataloader_next(t.ctx, again, &f, nullptr));
    expect_first = floats(f);
    accel_tensor_destroy(f);
    accel_dataloader_destroy(again);
  }
  EXPECT_EQ(floats(first), expect_first);
  EXPECT_EQ(position_epoch, 0);
  accel_tensor_destroy(first);
  accel_dataloader_destroy(bare);
  r.version = 99;
  EXPECT_EQ(accel_train_micro_batches(t.ctx, t.model, l, ACCEL_LOSS_MSE, 1, 0, &r), ACCEL_ERR_INVALID_ARGUMENT);
  EXPECT_TRUE(contains(accel_last_error(t.ctx), "accel_train_result version 99")) << accel_last_error(t.ctx);
  r.version = ACCEL_TRAIN_RESULT_VERSION;
  ASSERT_OK(t.ctx, accel_model_set_training(t.ctx, t.model, 0));
  refused(ACCEL_ERR_INVALID_STATE, ACCEL_LOSS_MSE, 1, 0, "evaluation mode");
  ASSERT_OK(t.ctx, accel_model_set_training(t.ctx, t.model, 1));
  // a model the context has not prepared, a loader of another context
  Trainer other;
  accel_context* fresh = nullptr;
  accel_options o = ACCEL_OPTIONS_INIT;
  o.device = ACCEL_DEVICE_CPU;
  ASSERT_OK(nullptr, accel_init(&o, &fresh));
  accel_model* m = nullptr;
  const int64_t sizes[] = {5, 3};
  accel_mlp_options mo = ACCEL_MLP_OPTIONS_INIT;
  mo.layer_sizes = sizes;
  mo.num_layer_sizes = 2;
  ASSERT_OK(fresh, accel_model_create_mlp(fresh, &mo, &m));
  accel_dataloader* fl = d.loader(fresh, 4);
  refused(ACCEL_ERR_INVALID_STATE, ACCEL_LOSS_MSE, 1, 0, "accel_prepare has not bound this model", fl, fresh, m);
  refused(ACCEL_ERR_INVALID_ARGUMENT, ACCEL_LOSS_MSE, 1, 0, "belongs to another context", fl);
  accel_dataloader_destroy(fl);
  accel_model_destroy(m);
  accel_destroy(fresh);
  // a NaN loss in the second micro-batch: the first stays trained, *out untouched
  Data bad(8);
  bad.ys[3 * 5] = NAN;  // row 5: the second batch of 4, in order
  accel_dataloader* nl = bad.loader(t.ctx, 4, true, /*shuffle=*/false);
  const std::vector<float> before = all_weights(t);
  refused(ACCEL_ERR_NON_FINITE, ACCEL_LOSS_MSE, 2, 0, "", nl);
  EXPECT_NE(all_weights(t), before) << "the first micro-batch was not trained";
  accel_dataloader_destroy(nl);
  accel_dataloader_destroy(l);
}

// With several processes every process must train the same number of micro-batches: a time
// budget is refused there, on every rank, and the call without one trains.
accel_status budget_on_ranks(accel_context* ctx, void* user) {
  auto* seen = static_cast<std::atomic<int>*>(user);
  const int64_t sizes[] = {5, 3};
  accel_mlp_options m = ACCEL_MLP_OPTIONS_INIT;
  m.layer_sizes = sizes;
  m.num_layer_sizes = 2;
  accel_model* model = nullptr;
  accel_optimizer* opt = nullptr;
  accel_status s = accel_model_create_mlp(ctx, &m, &model);
  if (s == ACCEL_OK) s = accel_optimizer_create_sgd(ctx, model, nullptr, &opt);
  const Data d(8);
  accel_dataloader* l = d.loader(ctx, 2);
  if (s == ACCEL_OK) s = accel_prepare(ctx, model, opt, nullptr, l);
  if (s == ACCEL_OK) {
    if (accel_train_micro_batches(ctx, model, l, ACCEL_LOSS_MSE, 1, 0.5, nullptr) == ACCEL_ERR_INVALID_ARGUMENT &&
        contains(accel_last_error(ctx), "max_seconds must be 0 with 2 processes"))
      ++*seen;
    s = accel_train_micro_batches(ctx, model, l, ACCEL_LOSS_MSE, 1, 0.0, nullptr);
  }
  accel_dataloader_destroy(l);
  accel_optimizer_destroy(opt);
  accel_model_destroy(model);
  return s;
}

TEST(TrainMicroBatches, ATimeBudgetIsRefusedWithSeveralProcesses) {
  accel_sim_options so = ACCEL_SIM_OPTIONS_INIT;
  so.world_size = 2;
  std::atomic<int> seen{0};
  ASSERT_EQ(accel_sim_run(&so, nullptr, budget_on_ranks, &seen, nullptr), ACCEL_OK) << accel_last_error(nullptr);
  EXPECT_EQ(seen.load(), 2);
}

}  // namespace
