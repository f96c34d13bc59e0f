// Tests of the C++ runtime: accumulation equivalence, loss scaling, autocast and fp16
// emulation, schedules, the data loader, gradient clipping, TorchScript models.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>

#include <zlib.h>

#include <nlohmann/json.hpp>

#include "comm/tensors.h"
#include "runtime/inference.h"
#include "runtime/runtime.h"
#include "runtime/torch_version.h"
#include "runtime/tracker.h"
#include "sim/world.h"

namespace accel {
namespace {

std::string tmp_path(const std::string& name) {
  const char* dir = std::getenv("TMPDIR");
  return std::string(dir ? dir : "/tmp") + "/accel_test_runtime_" + std::to_string(::getpid()) + "_" + name;
}

double max_rel_diff(const torch::Tensor& a, const torch::Tensor& b) {
  auto denom = b.abs().max().item<double>();
  return (a - b).abs().max().item<double>() / std::max(denom, 1e-30);
}

struct Trained {
  std::vector<torch::Tensor> params;
  int64_t optimizer_steps = 0;
};

enum class Opt { SGD, AdamW };

// Trains an MLP (same seed, so the same initial weights) over `steps` optimizer steps of
// global batch K*B, as K micro-batches of B with accumulation.
Trained train(int K, int64_t B, int steps, Opt which, const torch::Tensor& X, const torch::Tensor& Y, bool clip) {
  Options o;
  o.gradient_accumulation_steps = K;
  o.seed = 123;
  o.device = DeviceKind::CPU;
  Accelerator acc(o);
  MLPConfig cfg;
  cfg.sizes = {16, 32, 32, 5};
  std::shared_ptr<Model> model = make_mlp(cfg, acc.generator());
  std::shared_ptr<Optimizer> opt;
  if (which == Opt::SGD) {
    SGDConfig c;
    c.lr = 0.05;
    c.momentum = 0.9;
    c.nesterov = true;
    c.weight_decay = 1e-3;
    opt = std::make_shared<Optimizer>(model, c);
  } else {
    AdamWConfig c;
    c.lr = 1e-2;
    opt = std::make_shared<Optimizer>(model, c);
  }
  DataLoaderConfig lc;
  lc.batch_size = B;
  auto loader = std::make_shared<DataLoader>(X, Y, lc);
  acc.prepare(model, opt, nullptr, loader);
  Trained t;
  while (acc.optimizer_steps() < steps) {
    auto b = acc.next_batch(*loader);
    if (!b) continue;
    auto loss = cross_entropy(acc.forward(*model, {b->inputs}), b->targets);
    acc.backward(loss);
    if (clip) acc.clip_grad_norm(0.5);
    acc.step();
  }
  for (const auto& p : model->parameters()) t.params.push_back(p.detach().clone());
  t.optimizer_steps = acc.optimizer_steps();
  return t;
}

class Accumulation : public ::testing::TestWithParam<std::tuple<Opt, int, bool>> {};

TEST_P(Accumulation, KMicroBatchesEqualOneBatchOfKTimesB) {
  auto [which, K, clip] = GetParam();
  const int64_t B = 8;
  const int steps = 20;
  auto gen = at::make_generator<at::CPUGeneratorImpl>(7);
  auto X = torch::randn({K * B * steps, 16}, gen);
  auto Y = torch::randint(0, 5, {K * B * steps}, gen, torch::kLong);
  auto a = train(K, B, steps, which, X, Y, clip);
  auto b = train(1, K * B, steps, which, X, Y, clip);
  ASSERT_EQ(a.optimizer_steps, steps);
  ASSERT_EQ(a.params.size(), b.params.size());
  double worst = 0;
  for (size_t i = 0; i < a.params.size(); ++i) worst = std::max(worst, max_rel_diff(a.params[i], b.params[i]));
  EXPECT_LE(worst, 1e-6) << "K=" << K;
  // and training did move the weights
  auto init = train(1, K * B, 0, which, X, Y, clip);
  EXPECT_GT(max_rel_diff(init.params[0], b.params[0]), 1e-3);
}

INSTANTIATE_TEST_SUITE_P(Runtime, Accumulation,
                         ::testing::Combine(::testing::Values(Opt::SGD, Opt::AdamW), ::testing::Values(2, 4),
                                            ::testing::Values(false, true)));

TEST(LossScaler, GrowthAndBackoffFollowGradScaler) {
  LossScaler s(true, 65536.0, 2.0, 0.5, 3);
  std::vector<double> seen;
  for (bool inf : {false, false, false, false, true, false, false, false, true, true}) {
    s.update(inf);
    seen.push_back(s.scale());
  }
  std::vector<double> expect = {65536, 65536, 131072, 131072, 65536, 65536, 65536, 131072, 65536, 32768};
  EXPECT_EQ(seen, expect);
  EXPECT_EQ(s.growth_tracker(), 0);
  LossScaler off(false, 65536.0, 2.0, 0.5, 3);
  off.update(true);
  EXPECT_EQ(off.scale(), 1.0);
}

TEST(LossScaler, UnscaleDetectsInfAndNaN) {
  LossScaler s(true, 4.0, 2.0, 0.5, 10);
  auto p = torch::zeros({3}, torch::requires_grad());
  p.mutable_grad() = torch::tensor({4.0f, 8.0f, -12.0f});
  EXPECT_FALSE(s.unscale({p}));
  EXPECT_TRUE(torch::equal(p.grad(), torch::tensor({1.0f, 2.0f, -3.0f})));
  p.mutable_grad() = torch::tensor({4.0f, NAN, 1.0f});
  EXPECT_TRUE(s.unscale({p}));
  p.mutable_grad() = torch::tensor({INFINITY, 0.0f, 1.0f});
  EXPECT_TRUE(s.unscale({p}));
}

// fp16 training from an absurd initial scale: every step overflows and is skipped (weights,
// scheduler and step count untouched) while the scale halves, until the scaled gradients
// fit in fp16; after that, steps are real and the scale grows every `interval` clean steps.
TEST(LossScaler, SkipSequenceInFp16Training) {
  Options o;
  o.precision = Precision::FP16;
  o.device = DeviceKind::CPU;
  o.loss_scale_init = std::ldexp(1.0, 60);
  o.loss_scale_growth_interval = 3;
  Accelerator acc(o);
  MLPConfig cfg;
  cfg.sizes = {8, 16, 4};
  std::shared_ptr<Model> model = make_mlp(cfg, acc.generator());
  auto opt = std::make_shared<Optimizer>(model, SGDConfig{});
  SchedulerConfig sc;
  sc.kind = Schedule::Linear;
  sc.total_steps = 1000;
  auto sched = std::make_shared<Scheduler>(opt, sc);
  acc.prepare(model, opt, sched, nullptr);
  auto gen = at::make_generator<at::CPUGeneratorImpl>(3);
  auto x = torch::randn({32, 8}, gen);
  auto y = torch::randint(0, 4, {32}, gen, torch::kLong);
  auto w0 = model->parameters()[0].detach().clone();
  int skipped = 0;
  double scale = o.loss_scale_init;
  StepResult r;
  for (;;) {
    acc.backward(cross_entropy(acc.forward(*model, {x}), y));
    r = acc.step();
    if (!r.skipped) break;
    ++skipped;
    scale *= 0.5;
    ASSERT_EQ(r.loss_scale, scale);
    ASSERT_EQ(sched->steps(), 0);
    ASSERT_EQ(r.optimizer_steps, 0);
    ASSERT_TRUE(torch::equal(model->parameters()[0], w0));
    ASSERT_LT(skipped, 80);
  }
  EXPECT_GT(skipped, 20);  // gradients ~1e-2 * 2^k overflow fp16 (65504) until 2^k < ~2^22
  EXPECT_TRUE(r.stepped);
  EXPECT_EQ(sched->steps(), 1);
  EXPECT_FALSE(torch::equal(model->parameters()[0], w0));
  const double fitted = r.loss_scale;
  // two more clean steps: the third clean step doubles the scale (interval 3)
  std::vector<double> scales;
  for (int i = 0; i < 2; ++i) {
    acc.backward(cross_entropy(acc.forward(*model, {x}), y));
    r = acc.step();
    ASSERT_TRUE(r.stepped);
    scales.push_back(r.loss_scale);
  }
  EXPECT_EQ(scales, (std::vector<double>{fitted, 2 * fitted}));
}

TEST(Precision, Bf16AutocastRunsMatmulsInBf16) {
  Options o;
  o.precision = Precision::BF16;
  o.device = DeviceKind::CPU;
  Accelerator acc(o);
  MLPConfig cfg;
  cfg.sizes = {32, 16};
  std::shared_ptr<Model> model = make_mlp(cfg, acc.generator());
  acc.prepare(model, nullptr, nullptr, nullptr);
  auto gen = at::make_generator<at::CPUGeneratorImpl>(5);
  auto x = torch::randn({8, 32}, gen);
  auto y = acc.forward(*model, {x});
  EXPECT_EQ(y.scalar_type(), torch::kBFloat16);
  const auto& p = model->parameters();
  auto expect = torch::linear(x.to(torch::kBFloat16), p[0].to(torch::kBFloat16), p[1].to(torch::kBFloat16));
  EXPECT_TRUE(torch::equal(y, expect));
  auto fp32 = torch::linear(x, p[0], p[1]);
  EXPECT_GT((y.to(torch::kFloat) - fp32).abs().max().item<double>(), 1e-4);  // really lower precision
  // master weights stay fp32 and gradients reach them in fp32
  EXPECT_EQ(p[0].scalar_type(), torch::kFloat);
  acc.backward(y.to(torch::kFloat).pow(2).mean());
  EXPECT_EQ(p[0].grad().scalar_type(), torch::kFloat);
  // autocast is scoped to the forward: outside it, matmuls are fp32 again
  EXPECT_EQ(torch::matmul(x, x.t()).scalar_type(), torch::kFloat);
}

TEST(Precision, Fp16EmulationRoundsActivationsWeightsAndGradients) {
  Options o;
  o.precision = Precision::FP16;
  o.device = DeviceKind::CPU;
  Accelerator acc(o);
  ASSERT_TRUE(acc.emulate_fp16());
  MLPConfig cfg;
  cfg.sizes = {4, 3};
  std::shared_ptr<Model> model = make_mlp(cfg, acc.generator());
  acc.prepare(model, nullptr, nullptr, nullptr);
  auto r16 = [](const torch::Tensor& t) { return t.to(torch::kHalf).to(torch::kFloat); };
  auto x = torch::tensor({{0.1f, 0.2f, 0.3f, 1e-9f}});
  const auto& p = model->parameters();
  auto y = acc.forward(*model, {x});
  auto expect = r16(torch::linear(r16(x), r16(p[0]), r16(p[1])));
  EXPECT_TRUE(torch::equal(y, expect));
  EXPECT_FALSE(torch::equal(y, torch::linear(x, p[0], p[1])));
  // values beyond fp16's range (65504) overflow to inf, as on a GPU
  auto big = acc.forward(*model, {torch::full({1, 4}, 70000.0f)});
  EXPECT_FALSE(torch::isfinite(big).all().item<bool>());
}

TEST(Precision, Fp16GradientOverflowThroughRounding) {
  auto w = torch::tensor({1.0f, 2.0f}, torch::requires_grad());
  auto y = round_through_fp16(w);
  (y * 1e5f).sum().backward();
  EXPECT_TRUE(torch::isinf(w.grad()).all().item<bool>());  // 1e5 > 65504
  auto v = torch::tensor({1.0f}, torch::requires_grad());
  (round_through_fp16(v) * 1e-8f).sum().backward();
  EXPECT_EQ(v.grad().item<float>(), 0.0f);  // below fp16's smallest subnormal: flushed
}

TEST(Schedule, FactorsMatchTransformersFormulas) {
  SchedulerConfig c;
  c.kind = Schedule::Linear;
  c.warmup_steps = 10;
  c.total_steps = 110;
  EXPECT_DOUBLE_EQ(schedule_factor(c, 0), 0.0);
  EXPECT_DOUBLE_EQ(schedule_factor(c, 5), 0.5);
  EXPECT_DOUBLE_EQ(schedule_factor(c, 10), 1.0);
  EXPECT_DOUBLE_EQ(schedule_factor(c, 60), 0.5);
  EXPECT_DOUBLE_EQ(schedule_factor(c, 110), 0.0);
  EXPECT_DOUBLE_EQ(schedule_factor(c, 500), 0.0);
  c.kind = Schedule::Cosine;
  EXPECT_DOUBLE_EQ(schedule_factor(c, 10), 1.0);
  EXPECT_NEAR(schedule_factor(c, 60), 0.5, 1e-12);
  EXPECT_NEAR(schedule_factor(c, 35), 0.5 * (1 + std::cos(M_PI * 0.25)), 1e-12);
  EXPECT_NEAR(schedule_factor(c, 110), 0.0, 1e-12);
  EXPECT_NEAR(schedule_factor(c, 300), 0.0, 1e-12);  // clamped: no second cycle
  c.min_lr_ratio = 0.1;
  EXPECT_NEAR(schedule_factor(c, 110), 0.1, 1e-12);
  EXPECT_NEAR(schedule_factor(c, 60), 0.55, 1e-12);
  c.kind = Schedule::Constant;
  EXPECT_DOUBLE_EQ(schedule_factor(c, 3), 0.3);
  EXPECT_DOUBLE_EQ(schedule_factor(c, 1000), 1.0);
}

TEST(DataLoader, ShufflesPerEpochDeterministicallyAndCoversEverySample) {
  auto X = torch::arange(10, torch::kFloat).unsqueeze(1);
  auto Y = torch::arange(10, torch::kLong);
  DataLoaderConfig c;
  c.batch_size = 3;
  c.shuffle = true;
  c.seed = 9;
  DataLoader a(X, Y, c), b(X, Y, c);
  EXPECT_EQ(a.num_batches(), 4);
  std::vector<std::vector<int64_t>> epochs;
  for (int e = 0; e < 2; ++e) {
    std::vector<int64_t> seen;
    int batches = 0;
    while (auto batch = a.next(torch::kCPU)) {
      auto other = b.next(torch::kCPU);
      ASSERT_TRUE(other);
      EXPECT_TRUE(torch::equal(batch->inputs, other->inputs));
      EXPECT_TRUE(torch::equal(batch->inputs.squeeze(1).to(torch::kLong), batch->targets));
      ++batches;
      EXPECT_EQ(batch->last, batches == 4);
      for (int64_t i = 0; i < batch->targets.size(0); ++i) seen.push_back(batch->targets[i].item<int64_t>());
    }
    EXPECT_FALSE(b.next(torch::kCPU));
    EXPECT_EQ(a.epoch(), e + 1);
    ASSERT_EQ(seen.size(), 10u);
    // the permutation is torch.randperm(10) from a generator seeded with seed + epoch
    auto perm = torch::randperm(10, at::make_generator<at::CPUGeneratorImpl>(9 + e), torch::kLong);
    for (int i = 0; i < 10; ++i) EXPECT_EQ(seen[i], perm[i].item<int64_t>());
    epochs.push_back(seen);
  }
  EXPECT_NE(epochs[0], epochs[1]);
  a.set_epoch(1);
  EXPECT_EQ(a.next(torch::kCPU)->targets[0].item<int64_t>(), epochs[1][0]);

  c.shuffle = false;
  c.drop_last = true;
  DataLoader d(X, Y, c);
  EXPECT_EQ(d.num_batches(), 3);
  std::vector<int64_t> last;
  while (auto batch = d.next(torch::kCPU)) last.assign(batch->targets.data_ptr<int64_t>(), batch->targets.data_ptr<int64_t>() + 3);
  EXPECT_EQ(last, (std::vector<int64_t>{6, 7, 8}));
}

TEST(Clip, ReturnsTheGlobalNormAndClipsToMaxNorm) {
  Options o;
  o.device = DeviceKind::CPU;
  Accelerator acc(o);
  MLPConfig cfg;
  cfg.sizes = {6, 5, 3};
  std::shared_ptr<Model> model = make_mlp(cfg, acc.generator());
  auto opt = std::make_shared<Optimizer>(model, SGDConfig{});
  acc.prepare(model, opt, nullptr, nullptr);
  auto x = torch::randn({4, 6});
  acc.backward(acc.forward(*model, {x}).pow(2).sum() * 100);
  double expect = 0;
  for (const auto& p : model->parameters()) expect += p.grad().pow(2).sum().item<double>();
  expect = std::sqrt(expect);
  double norm = acc.clip_grad_norm(1.0);
  EXPECT_NEAR(norm, expect, 1e-4 * expect);
  double after = 0;
  for (const auto& p : model->parameters()) after += p.grad().pow(2).sum().item<double>();
  EXPECT_NEAR(std::sqrt(after), 1.0, 1e-5);
  EXPECT_NEAR(acc.clip_grad_norm(10.0), 1.0, 1e-5);  // already below: unchanged
}

TEST(TorchScript, LoadsTrainsAndRejectsNonTensorOutputs) {
  torch::jit::Module m("Net");
  m.register_parameter("w", torch::ones({3, 2}), false);
  m.define(R"(
def forward(self, x):
    return torch.matmul(x, self.w)

def pair(self, x):
    return x, x
)");
  std::string path = tmp_path("net.pt");
  m.save(path);
  Options o;
  o.device = DeviceKind::CPU;
  Accelerator acc(o);
  std::shared_ptr<Model> model = load_torchscript(path);
  ASSERT_EQ(model->parameter_names(), std::vector<std::string>{"w"});
  auto opt = std::make_shared<Optimizer>(model, SGDConfig{0.5});
  acc.prepare(model, opt, nullptr, nullptr);
  auto x = torch::ones({1, 3});
  auto y = acc.forward(*model, {x});
  EXPECT_TRUE(torch::equal(y, torch::full({1, 2}, 3.0f)));
  acc.backward(mse(y, torch::zeros({1, 2})));  // d/dw mean((xw)^2) = x^T * 2*3/2 = 3
  acc.step();
  EXPECT_TRUE(torch::allclose(model->parameters()[0], torch::full({3, 2}, 1.0f - 0.5f * 3.0f)));
  try {
    acc.forward(*model, {torch::ones({1, 4})});
    FAIL() << "a shape mismatch must throw";
  } catch (const Error& e) {
    EXPECT_EQ(e.status(), Status::InvalidArgument);
    EXPECT_NE(std::string(e.what()).find("[1, 4]"), std::string::npos) << e.what();
  }

  torch::jit::Module t("Tuple");
  t.define(R"(
def forward(self, x):
    return x, x
)");
  std::string tpath = tmp_path("tuple.pt");
  t.save(tpath);
  std::shared_ptr<Model> tm = load_torchscript(tpath);
  try {
    acc.forward(*tm, {x});
    FAIL() << "a tuple output must be rejected";
  } catch (const Error& e) {
    EXPECT_EQ(e.status(), Status::Format);
    EXPECT_NE(std::string(e.what()).find("returned Tuple"), std::string::npos) << e.what();
  }
  std::remove(path.c_str());
  std::remove(tpath.c_str());
}

TEST(TorchScript, Fp16EmulationRoundsParameterGradients) {
  torch::jit::Module m("Scale");
  m.register_parameter("w", torch::ones({2}), false);
  m.define(R"(
def forward(self, x):
    return x * self.w
)");
  std::string path = tmp_path("scale.pt");
  m.save(path);
  Options o;
  o.device = DeviceKind::CPU;
  o.precision = Precision::FP16;
  o.loss_scale_init = 1.0;
  Accelerator acc(o);
  std::shared_ptr<Model> model = load_torchscript(path);
  auto opt = std::make_shared<Optimizer>(model, SGDConfig{});
  acc.prepare(model, opt, nullptr, nullptr);
  auto y = acc.forward(*model, {torch::tensor({1e5f, 0.1f})});  // 1e5 overflows fp16 on the way in
  EXPECT_TRUE(std::isinf(y[0].item<float>()));
  auto y2 = acc.forward(*model, {torch::tensor({3e4f, 0.1f})});
  acc.backward((y2 * 4.0f).sum());  // d/dw = 4x: 1.2e5 overflows fp16, 0.4 rounds
  const auto& g = model->parameters()[0].grad();
  EXPECT_TRUE(std::isinf(g[0].item<float>()));
  EXPECT_EQ(g[1].item<float>(), torch::tensor({0.4f}).to(torch::kHalf).to(torch::kFloat).item<float>());
  EXPECT_TRUE(acc.step().skipped);
  std::remove(path.c_str());
}


// ---------------------------------------------------------------------------------------
// Sharding across processes: Accelerate's batch-sampler semantics (DESIGN.md's examples)

std::vector<std::vector<int64_t>> shard(int64_t n, int64_t b, int rank, int world, bool split, bool even,
                                        bool drop_last = false) {
  std::vector<int64_t> order(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) order[static_cast<size_t>(i)] = i;
  std::vector<std::vector<int64_t>> out;
  for (auto& p : shard_batches(order, b, drop_last, rank, world, split, even)) out.push_back(p.indices);
  return out;
}

using VV = std::vector<std::vector<int64_t>>;

// What Accelerate's own prepare_data_loader yields per process and batch for map-style
// datasets (tests/fixtures/accelerate/loader_table.json.gz, made by scripts/accelerate_table
// with accelerate 1.15.0): dataset sizes 0-40, batch sizes 1-8, 1-4 processes, drop_last,
// even_batches, split_batches. accel's shard_batches must give the same batches, and refuse
// (at shard) exactly the configurations Accelerate refuses; its loaders accept the others and
// count the same batches. The iterable-dataset rows (IterableDatasetShard) against the
// iterable loader itself, batch by batch. (N = 0, which accel_dataloader_create refuses, is
// compared on the sharding functions.)
TEST(Sharding, MatchesAcceleratesTable) {
  gzFile f = gzopen(ACCEL_ACCELERATE_TABLE, "rb");
  ASSERT_NE(f, nullptr) << ACCEL_ACCELERATE_TABLE;
  std::string text;
  char buf[65536];
  for (int n; (n = gzread(f, buf, sizeof buf)) > 0;) text.append(buf, static_cast<size_t>(n));
  gzclose(f);
  const auto table = nlohmann::json::parse(text);
  size_t compared = 0, streamed = 0, refused = 0, mismatched = 0;
  for (const auto& row : table.at("rows")) {
    const bool iterable = row[0] == "iterable";
    const int64_t n = row[1], b = row[2];
    const int p = row[3];
    const bool drop_last = row[4], even = row[5], split = row[6];
    const auto& result = row[7];
    const std::string what = "N=" + std::to_string(n) + " b=" + std::to_string(b) + " P=" + std::to_string(p) +
                             " drop_last=" + std::to_string(drop_last) + " even=" + std::to_string(even) +
                             " split=" + std::to_string(split);
    DataLoaderConfig cfg;
    cfg.batch_size = b;
    cfg.drop_last = drop_last;
    cfg.even_batches = even;
    cfg.split_batches = split;
    cfg.iterable = iterable;
    if (result.is_object()) {  // Accelerate refuses it
      ++refused;
      bool threw = false;
      try {
        DataLoader dl(torch::arange(std::max<int64_t>(n, 1)).to(torch::kFloat).unsqueeze(1), torch::Tensor(), cfg);
        dl.shard(0, p);
      } catch (const Error&) {
        threw = true;
      }
      EXPECT_TRUE(threw) << what << ": Accelerate says " << result.at("error").get<std::string>();
      continue;
    }
    for (int r = 0; r < p; ++r) {
      if (iterable) {  // the loader itself, batch by batch: its inputs are the sample indices
        ++streamed;
        VV mine;
        if (n >= 1) {
          DataLoader dl(torch::arange(n).to(torch::kFloat).unsqueeze(1), torch::Tensor(), cfg);
          dl.shard(r, p);
          EXPECT_EQ(dl.num_batches(), static_cast<int64_t>(result[static_cast<size_t>(r)].size())) << what;
          while (auto batch = dl.next(torch::kCPU)) {
            const torch::Tensor ids = batch->inputs.squeeze(1).to(torch::kLong).contiguous();
            mine.emplace_back(ids.data_ptr<int64_t>(), ids.data_ptr<int64_t>() + ids.numel());
          }
        } else {  // accel_dataloader_create refuses an empty dataset; the sharding itself agrees
          for (auto& pb : shard_stream({}, b, drop_last, r, p, split)) mine.push_back(pb.indices);
        }
        const VV theirs = result[static_cast<size_t>(r)].get<VV>();
        if (mine != theirs && ++mismatched <= 10)
          ADD_FAILURE() << "iterable " << what << " rank " << r << ": accel " << ::testing::PrintToString(mine)
                        << ", Accelerate " << ::testing::PrintToString(theirs);
        continue;
      }
      ++compared;
      if (n >= 1) {  // the loader accepts what Accelerate accepts (a dataset smaller than a batch with drop_last...)
        DataLoader dl(torch::arange(n).to(torch::kFloat).unsqueeze(1), torch::Tensor(), cfg);
        dl.shard(r, p);
        EXPECT_EQ(dl.num_batches(), static_cast<int64_t>(result[static_cast<size_t>(r)].size())) << what << " rank " << r;
      }
      const VV mine = shard(n, b, r, p, split, even, drop_last);
      const VV theirs = result[static_cast<size_t>(r)].get<VV>();
      if (mine != theirs) {
        if (++mismatched <= 10) ADD_FAILURE() << what << " rank " << r << ": accel " << ::testing::PrintToString(mine)
                                              << ", Accelerate " << ::testing::PrintToString(theirs);
      }
    }
  }
  std::printf("  Accelerate %s: %zu map-style and %zu iterable process shards compared, %zu refused configurations, "
              "%zu differ\n",
              table.at("accelerate").get<std::string>().c_str(), compared, streamed, refused, mismatched);
  EXPECT_EQ(mismatched, 0u);
  EXPECT_GT(compared, 9000u);
  EXPECT_GT(streamed, 5000u);
}

// LAMB against the paper's update written out in double precision, two steps (bias
// correction), per tensor trust ratios, one tensor with a zero gradient norm skipped.
TEST(Optimizers, LambFollowsThePaper) {
  MLPConfig cfg;
  cfg.sizes = {3, 2};
  auto gen = at::make_generator<at::CPUGeneratorImpl>(4);
  std::shared_ptr<Model> model = make_mlp(cfg, gen);
  LAMBConfig c;
  c.lr = 0.1;
  c.weight_decay = 0.05;
  Optimizer opt(model, c);
  opt.bind();
  EXPECT_STREQ(opt.name(), "LAMB");
  EXPECT_FALSE(opt.shardable());
  const auto& ps = model->parameters();
  std::vector<torch::Tensor> w, m, v;
  for (const auto& p : ps) {
    w.push_back(p.detach().to(torch::kDouble).clone());
    m.push_back(torch::zeros_like(w.back()));
    v.push_back(torch::zeros_like(w.back()));
  }
  for (int step = 1; step <= 2; ++step) {
    for (size_t i = 0; i < ps.size(); ++i) {
      torch::Tensor g = torch::randn(ps[i].sizes(), gen) * (i + 1.0) * step;
      const_cast<torch::Tensor&>(ps[i]).mutable_grad() = g;
      const torch::Tensor gd = g.to(torch::kDouble);
      m[i] = 0.9 * m[i] + 0.1 * gd;
      v[i] = 0.999 * v[i] + 0.001 * gd * gd;
      const torch::Tensor mh = m[i] / (1 - std::pow(0.9, step)), vh = v[i] / (1 - std::pow(0.999, step));
      const torch::Tensor u = mh / (vh.sqrt() + 1e-6) + 0.05 * w[i];
      const double trust = w[i].norm().item<double>() / u.norm().item<double>();
      w[i] = w[i] - 0.1 * trust * u;
    }
    opt.step();
    for (size_t i = 0; i < ps.size(); ++i)
      EXPECT_TRUE(torch::allclose(ps[i].detach().to(torch::kDouble), w[i], 1e-5, 1e-6)) << "step " << step << " param " << i;
  }
  EXPECT_THROW(Optimizer(model, LAMBConfig{0.1, 1.5}), Error);  // beta1 out of range
}

TEST(Sharding, WorkedExamplesFromTheDesign) {
  EXPECT_EQ(shard(24, 3, 0, 2, false, true), (VV{{0, 1, 2}, {6, 7, 8}, {12, 13, 14}, {18, 19, 20}}));
  EXPECT_EQ(shard(24, 3, 1, 2, false, true), (VV{{3, 4, 5}, {9, 10, 11}, {15, 16, 17}, {21, 22, 23}}));
  EXPECT_EQ(shard(22, 3, 1, 2, false, true), (VV{{3, 4, 5}, {9, 10, 11}, {15, 16, 17}, {21, 0, 1}}));
  EXPECT_EQ(shard(22, 3, 1, 2, false, false), (VV{{3, 4, 5}, {9, 10, 11}, {15, 16, 17}, {21}}));
  EXPECT_EQ(shard(22, 3, 0, 2, false, false), (VV{{0, 1, 2}, {6, 7, 8}, {12, 13, 14}, {18, 19, 20}}));
  EXPECT_EQ(shard(24, 4, 0, 2, true, true), (VV{{0, 1}, {4, 5}, {8, 9}, {12, 13}, {16, 17}, {20, 21}}));
  EXPECT_EQ(shard(24, 4, 1, 2, true, true), (VV{{2, 3}, {6, 7}, {10, 11}, {14, 15}, {18, 19}, {22, 23}}));
  // drop_last stops at the last full round
  EXPECT_EQ(shard(22, 3, 0, 2, false, true, true), (VV{{0, 1, 2}, {6, 7, 8}, {12, 13, 14}}));
  EXPECT_EQ(shard(22, 3, 1, 2, false, true, true), (VV{{3, 4, 5}, {9, 10, 11}, {15, 16, 17}}));
  // split with an incomplete last batch: padded from the start with even batches
  EXPECT_EQ(shard(10, 4, 1, 2, true, true).back(), (std::vector<int64_t>{0, 1}));
  EXPECT_EQ(shard(10, 4, 0, 2, true, true).back(), (std::vector<int64_t>{8, 9}));
  EXPECT_EQ(shard(10, 4, 1, 2, true, false).size(), 2u);  // nothing left for rank 1 without even batches
}

TEST(Sharding, EverySampleOnceAmongTheValidRowsAndEqualCountsWithEvenBatches) {
  for (int world : {2, 3, 4, 8})
    for (int64_t b : {1, 2, 3, 4, 8})
      for (int64_t n : {1, 5, 22, 24, 37, 64})
        for (bool split : {false, true})
          for (bool even : {false, true}) {
            if (split && b % world != 0) continue;
            std::vector<int64_t> order(static_cast<size_t>(n));
            for (int64_t i = 0; i < n; ++i) order[static_cast<size_t>(i)] = i;
            std::vector<int> seen(static_cast<size_t>(n), 0);
            std::vector<size_t> counts;
            for (int r = 0; r < world; ++r) {
              auto plan = shard_batches(order, b, false, r, world, split, even);
              counts.push_back(plan.size());
              for (const auto& p : plan) {
                ASSERT_LE(p.valid, static_cast<int64_t>(p.indices.size()));
                if (even) {
                  ASSERT_EQ(static_cast<int64_t>(p.indices.size()), split ? b / world : b);
                }
                for (int64_t i = 0; i < p.valid; ++i) ++seen[static_cast<size_t>(p.indices[static_cast<size_t>(i)])];
              }
            }
            for (int64_t i = 0; i < n; ++i)
              ASSERT_EQ(seen[static_cast<size_t>(i)], 1) << "sample " << i << " n=" << n << " b=" << b << " P=" << world
                                                          << " split=" << split << " even=" << even;
            if (even) {
              for (size_t c : counts) ASSERT_EQ(c, counts[0]) << "n=" << n << " b=" << b << " P=" << world;
            }
          }
}

TEST(Sharding, SplitNeedsADivisibleBatchSize) {
  DataLoaderConfig c;
  c.batch_size = 3;
  c.split_batches = true;
  DataLoader d(torch::zeros({10, 1}), torch::Tensor(), c);
  try {
    d.shard(0, 2);
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.status(), Status::InvalidArgument);
    EXPECT_NE(std::string(e.what()).find("split_batches needs a batch size (3) divisible by the number of processes (2)"),
              std::string::npos);
  }
}

// A backend that reaches no memory of the caller's (as a GPU backend does not reach host
// tensors): the tensor collectives must stage every buffer through copies and write the
// results back. It forwards to a simulated rank, and checks it never sees the tensors' memory.
class ReachesNothing final : public comm::Communicator {
 public:
  ReachesNothing(comm::Communicator& inner, std::vector<const torch::Tensor*> forbidden) : in_(inner), forbidden_(std::move(forbidden)) {}
  int rank() const override { return in_.rank(); }
  int size() const override { return in_.size(); }
  std::string backend() const override { return "reaches-nothing"; }
  bool reaches(const comm::Device&) const override { return false; }
  std::shared_ptr<comm::Work> all_reduce(const void* s, void* r, size_t n, comm::DataType t, comm::RedOp op, comm::PreMul pm) override {
    ok(s), ok(r);
    return in_.all_reduce(s, r, n, t, op, pm);
  }
  std::shared_ptr<comm::Work> reduce_scatter(const void* s, void* r, size_t n, comm::DataType t, comm::RedOp op, comm::PreMul pm) override {
    ok(s), ok(r);
    return in_.reduce_scatter(s, r, n, t, op, pm);
  }
  std::shared_ptr<comm::Work> all_gather(const void* s, void* r, size_t n, comm::DataType t) override {
    ok(s), ok(r);
    return in_.all_gather(s, r, n, t);
  }
  std::shared_ptr<comm::Work> broadcast(const void* s, void* r, size_t n, comm::DataType t, int root) override {
    ok(s), ok(r);
    return in_.broadcast(s, r, n, t, root);
  }
  std::shared_ptr<comm::Work> reduce(const void* s, void* r, size_t n, comm::DataType t, comm::RedOp op, int root, comm::PreMul pm) override {
    return in_.reduce(s, r, n, t, op, root, pm);
  }
  std::shared_ptr<comm::Work> send(const void* b, size_t n, comm::DataType t, int peer) override { return in_.send(b, n, t, peer); }
  std::shared_ptr<comm::Work> recv(void* b, size_t n, comm::DataType t, int peer) override { return in_.recv(b, n, t, peer); }
  void barrier() override { in_.barrier(); }
  void group_start() override { in_.group_start(); }
  void group_end() override { in_.group_end(); }
  int calls = 0;

 private:
  void ok(const void* p) {
    ++calls;
    for (const torch::Tensor* t : forbidden_) {
      const char* lo = static_cast<const char*>(t->storage().data());
      ASSERT_FALSE(p >= lo && p < lo + t->storage().nbytes()) << "the backend was handed the tensor's own memory";
    }
  }
  comm::Communicator& in_;
  std::vector<const torch::Tensor*> forbidden_;
};

TEST(TensorCollectives, StagedThroughCopiesWhereTheBackendCannotReach) {
  sim::WorldOptions wo;
  wo.world_size = 2;
  sim::World world(wo);
  auto rep = world.run([&](sim::Rank& rank) {
    const int r = rank.rank();
    torch::Tensor sum = torch::full({3}, float(r + 1)), bcast = torch::full({2}, float(10 * (r + 1)));
    torch::Tensor gathered = torch::full({4}, -1.0f), scattered = torch::arange(4, torch::kFloat) * (r + 1);
    torch::Tensor out = torch::empty({2});
    ReachesNothing c(rank.comm(), {&sum, &bcast, &gathered, &scattered, &out});
    comm::all_reduce(c, sum, comm::RedOp::Sum)->wait();
    EXPECT_TRUE(sum.equal(torch::full({3}, 3.0f)));
    comm::broadcast(c, bcast, 1)->wait();
    EXPECT_TRUE(bcast.equal(torch::full({2}, 20.0f)));
    // in place: this rank's slot of the output is the input (NCCL's rule)
    gathered.narrow(0, 2 * r, 2).fill_(float(r));
    comm::all_gather(c, gathered.narrow(0, 2 * r, 2), gathered)->wait();
    EXPECT_TRUE(gathered.equal(torch::tensor({0.f, 0.f, 1.f, 1.f})));
    // reduce-scatter into a separate output, then in place (the output is the input's slot)
    comm::reduce_scatter(c, scattered, out, comm::RedOp::Sum)->wait();
    EXPECT_TRUE(out.equal(torch::arange(2 * r, 2 * r + 2, torch::kFloat) * 3)) << out;
    auto w = comm::reduce_scatter(c, scattered, scattered.narrow(0, 2 * r, 2), comm::RedOp::Sum);
    w->wait();
    EXPECT_TRUE(w->test());
    EXPECT_TRUE(scattered.narrow(0, 2 * r, 2).equal(torch::arange(2 * r, 2 * r + 2, torch::kFloat) * 3));
    EXPECT_EQ(c.calls, 10);
  });
  ASSERT_TRUE(rep.ok()) << rep.first_error();
}

// accel's fused SGD and AdamW against libtorch's torch::optim on the same gradients: the
// same bits (they round every term as libtorch's CPU kernels do), on sizes that exercise
// the vector loops' tails, over steps that change the learning rate (a schedule).
TEST(FusedOptimizers, MatchTorchOptimBitForBit) {
  for (int kind = 0; kind < 3; ++kind) {  // AdamW, SGD with momentum and decay, SGD Nesterov
    torch::manual_seed(7);
    MLPConfig cfg;
    cfg.sizes = {37, 300, 11};  // odd sizes: vector tails
    auto model = std::shared_ptr<Model>(make_mlp(cfg, at::make_generator<at::CPUGeneratorImpl>(3)));
    std::vector<torch::Tensor> ref;
    for (const auto& p : model->parameters()) ref.push_back(p.detach().clone().requires_grad_(true));
    std::shared_ptr<Optimizer> mine;
    std::unique_ptr<torch::optim::Optimizer> theirs;
    if (kind == 0) {
      AdamWConfig c{3e-3, 0.9, 0.999, 1e-8, 0.01};
      mine = std::make_shared<Optimizer>(model, c);
      theirs = std::make_unique<torch::optim::AdamW>(
          ref, torch::optim::AdamWOptions(c.lr).betas({c.beta1, c.beta2}).eps(c.eps).weight_decay(c.weight_decay));
    } else {
      SGDConfig c{0.05, 0.9, kind == 1 ? 0.1 : 0.0, 1e-3, kind == 2};
      mine = std::make_shared<Optimizer>(model, c);
      theirs = std::make_unique<torch::optim::SGD>(
          ref, torch::optim::SGDOptions(c.lr).momentum(c.momentum).dampening(c.dampening).weight_decay(c.weight_decay).nesterov(
                   c.nesterov));
    }
    mine->bind();
    for (int step = 1; step <= 5; ++step) {
      const double lr = (kind == 0 ? 3e-3 : 0.05) / step;  // as a schedule would set it
      mine->set_lr(lr);
      for (auto& group : theirs->param_groups()) group.options().set_lr(lr);
      for (size_t i = 0; i < ref.size(); ++i) {
        torch::Tensor g = torch::randn(ref[i].sizes());
        ref[i].mutable_grad() = g.clone();
        model->parameters()[i].mutable_grad() = g.clone();
      }
      mine->step();
      theirs->step();
      for (size_t i = 0; i < ref.size(); ++i) {
        const torch::Tensor a = model->parameters()[i].detach(), b = ref[i].detach();
        // The same bits as libtorch 1.13's vectorized kernels (AVX2, AVX-512). libtorch 2.x,
        // and 1.13's scalar kernels (ATEN_CPU_CAPABILITY=default, or a CPU without AVX2: the
        // kernel-set rerun found differences of 1.5e-8 and 6e-8) round a term or two of the
        // update differently: at most a few ulps of the tensor's scale a step. Bound: 8 ulps
        // (8 x 2^-23 = 9.5e-7) of the tensor's largest magnitude per step taken.
        const char* cap = std::getenv("ATEN_CPU_CAPABILITY");
        const bool vector_kernels = __builtin_cpu_supports("avx2") && !(cap && std::string(cap) == "default");
        const double scale = b.abs().max().item<double>();
        const bool same = !ACCEL_TORCH_AT_LEAST(2, 0) && vector_kernels
                              ? a.equal(b)
                              : (a - b).abs().max().item<double>() <= 8 * std::ldexp(1.0, -23) * scale * step;
        ASSERT_TRUE(same) << "optimizer " << kind << ", step " << step << ", parameter " << i << ": max difference "
                          << (a - b).abs().max().item<double>();
      }
    }
  }
}

// A backend that cannot reach host memory (as nccl on a GPU, which a GPU run found failing
// with "illegal memory access" at the first accel_reduce): the runtime's own host buffers go
// through copies in its home, and the results come back. This one is a local world whose
// "other rank" adds 1 to every element, and that records the buffers it was given.
class NoHostComm final : public comm::Communicator {
 public:
  std::vector<const void*> seen;
  int rank() const override { return 0; }
  int size() const override { return 2; }
  std::string backend() const override { return "no-host"; }
  bool reaches(const comm::Device& d) const override { return d.kind == comm::Device::Kind::Cuda; }
  std::shared_ptr<comm::Work> all_reduce(const void* send, void* recv, size_t n, comm::DataType t, comm::RedOp,
                                         comm::PreMul) override {
    seen.push_back(send);
    EXPECT_EQ(t, comm::DataType::Int64);
    for (size_t i = 0; i < n; ++i) static_cast<int64_t*>(recv)[i] = static_cast<const int64_t*>(send)[i] + 1;
    return done();
  }
  std::shared_ptr<comm::Work> broadcast(const void* send, void* recv, size_t n, comm::DataType t, int) override {
    seen.push_back(send);
    std::memset(recv, 7, n * comm::dtype_size(t));
    return done();
  }
  std::shared_ptr<comm::Work> all_gather(const void* send, void* recv, size_t n, comm::DataType t) override {
    seen.push_back(send);
    const size_t b = n * comm::dtype_size(t);
    std::memcpy(recv, send, b);
    std::memset(static_cast<char*>(recv) + b, 9, b);
    return done();
  }
  std::shared_ptr<comm::Work> reduce_scatter(const void*, void*, size_t, comm::DataType, comm::RedOp,
                                             comm::PreMul) override { return unused(); }
  std::shared_ptr<comm::Work> reduce(const void*, void*, size_t, comm::DataType, comm::RedOp, int,
                                     comm::PreMul) override { return unused(); }
  std::shared_ptr<comm::Work> send(const void*, size_t, comm::DataType, int) override { return unused(); }
  std::shared_ptr<comm::Work> recv(void*, size_t, comm::DataType, int) override { return unused(); }
  void barrier() override {}
  void group_start() override {}
  void group_end() override {}

 private:
  struct Done final : comm::Work {
    void wait() override {}
    bool test() override { return true; }
  };
  static std::shared_ptr<comm::Work> done() { return std::make_shared<Done>(); }
  static std::shared_ptr<comm::Work> unused() {
    ADD_FAILURE() << "not used by the host helpers";
    return done();
  }
};

TEST(Comm, HostBuffersAreStagedWhereTheBackendCannotReachThem) {
  NoHostComm c;
  int64_t x[3] = {1, 2, 3};
  comm::host_all_reduce(c, x, 3, comm::DataType::Int64, comm::RedOp::Sum);
  EXPECT_EQ(x[0], 2);
  EXPECT_EQ(x[2], 4);
  uint8_t b[4] = {0, 0, 0, 0};
  comm::host_broadcast(c, b, 4, comm::DataType::Uint8, 0);
  EXPECT_EQ(b[3], 7);
  int32_t mine = 5, all[2] = {0, 0};
  comm::host_all_gather(c, &mine, all, 1, comm::DataType::Int32);
  EXPECT_EQ(all[0], 5);
  EXPECT_EQ(all[1], 0x09090909);
  ASSERT_EQ(c.seen.size(), 3u);
  EXPECT_NE(c.seen[0], static_cast<const void*>(x)) << "the backend was given the host buffer itself";
  EXPECT_NE(c.seen[1], static_cast<const void*>(b));
  EXPECT_NE(c.seen[2], static_cast<const void*>(&mine));
  // a backend that reaches the host gets the buffers themselves
  auto local = comm::make_local_communicator();
  int64_t y = 4;
  comm::host_all_reduce(*local, &y, 1, comm::DataType::Int64, comm::RedOp::Sum);
  EXPECT_EQ(y, 4);
}


// CRC-32C's check value, and TensorBoard's masked form (the values its own
// tensorflow_stub.pywrap_tensorflow.masked_crc32c gives).
// An inference copy runs with its own thread count on the thread that calls it, leaving the
// other threads' (the trainer's) as they are; publications reuse sets no copy holds.
TEST(Inference, ThreadCountIsTheCallingThreadsAndSetsAreReused) {
  const int before = at::get_num_threads();
  at::set_num_threads(2);
  MLPConfig cfg;
  cfg.sizes = {4, 8, 2};
  auto gen = at::detail::createCPUGenerator(1);
  std::unique_ptr<Model> model = make_mlp(cfg, gen);
  auto channel = std::make_shared<WeightChannel>();
  const std::vector<c10::ScalarType> dtypes(model->parameters().size(), torch::kFloat);
  EXPECT_EQ(channel->publish(model->parameters(), dtypes, torch::kCPU), 1u);
  Inference inf(model->clone(), channel, torch::kCPU, 1);
  int threads_there = -1, after_a_run = -1;
  std::thread([&] {
    threads_there = at::get_num_threads();  // a new thread starts with the process's setting
    inf.run({torch::ones({3, 4})});
    after_a_run = at::get_num_threads();
  }).join();
#if AT_PARALLEL_OPENMP
  EXPECT_EQ(threads_there, 2);
  EXPECT_EQ(after_a_run, 1);
#endif
  EXPECT_EQ(at::get_num_threads(), 2) << "the inference copy changed this thread's count";
  // the copy holds version 1; the latest may be adopted at any moment, so the next is written
  // into a third set: versions 2, 3, 4... alternate between two sets beside the held one
  for (int v = 2; v <= 6; ++v) EXPECT_EQ(channel->publish(model->parameters(), dtypes, torch::kCPU), uint64_t(v));
  EXPECT_EQ(channel->sets(), 3u) << "one set held, the latest, and one written";
  inf.run({torch::ones({1, 4})});  // adopts 6, releases 1
  EXPECT_EQ(inf.weights().first, 6u);
  for (int v = 7; v <= 9; ++v) channel->publish(model->parameters(), dtypes, torch::kCPU);
  EXPECT_EQ(channel->sets(), 3u);
  at::set_num_threads(before);
}

TEST(Trackers, Crc32cAndTheRecordFraming) {
  EXPECT_EQ(tracker::crc32c("123456789", 9), 0xE3069283u);
  EXPECT_EQ(tracker::crc32c("", 0), 0u);
  EXPECT_EQ(tracker::masked_crc32c("123456789", 9), 0xC78AB0E5u);
  EXPECT_EQ(tracker::masked_crc32c("accel", 5), 0x21ABCEE2u);
  const std::string r = tracker::tfrecord("accel");
  ASSERT_EQ(r.size(), 8u + 4 + 5 + 4);
  EXPECT_EQ(r.substr(12, 5), "accel");
  uint32_t tail = 0;
  std::memcpy(&tail, r.data() + 17, 4);
  EXPECT_EQ(tail, 0x21ABCEE2u);
  EXPECT_EQ(r[0], 5);
  // an Event: wall_time (field 1, double), step (2, varint), then the summary's tag and value
  const std::string e = tracker::event_bytes(1.5, 300, "", {"x"}, {2.0f});
  EXPECT_EQ(e.substr(0, 9), std::string("\x09\x00\x00\x00\x00\x00\x00\xf8\x3f", 9));
  EXPECT_EQ(e.substr(9, 3), "\x10\xac\x02");  // 300 as a varint
  EXPECT_EQ(tracker::parse_writers("jsonl, tensorboard", "w"), tracker::JsonLines | tracker::TensorBoard);
  EXPECT_EQ(tracker::parse_writers("all", "w"), tracker::kAllWriters);
  EXPECT_THROW(tracker::parse_writers("", "w"), Error);
}

}  // namespace
}  // namespace accel
