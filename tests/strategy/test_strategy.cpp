// Tests of the strategies on the simulator: DDP and ZeRO 1-3 against one process with the
// global batch (SGD and AdamW, accumulation, clipping, mixed precision, TorchScript models),
// failures at prepare, uneven batches, the peak memory and the bytes sent per rank against
// the ZeRO paper's arithmetic, DDP's overlap of all-reduces with backward in the trace.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <atomic>
#include <cmath>
#include <map>
#include <nlohmann/json.hpp>

#include "../sim/common.h"
#include "comm/kernels.h"
#include "runtime/runtime.h"

namespace accel::sim {
namespace {

// ---------------------------------------------------------------------------------------
// DDP on the simulator: N ranks x micro-batch B x accumulation K give the weights of one
// process with batch N*B*K.

enum class OptKind { SGD, AdamW };

std::shared_ptr<Optimizer> make_opt(const std::shared_ptr<Model>& m, OptKind k) {
  if (k == OptKind::SGD) {
    SGDConfig c;
    c.lr = 0.05;
    c.momentum = 0.9;
    c.weight_decay = 1e-3;
    return std::make_shared<Optimizer>(m, c);
  }
  AdamWConfig c;
  c.lr = 1e-2;
  return std::make_shared<Optimizer>(m, c);
}

// Low enough that clipping acts on most steps of the equivalence tests.
constexpr double kMaxNorm = 0.2;

// The loop both sides run: forward, cross-entropy, backward, clipping, step. Returns the
// global gradient norms before clipping, one per optimizer step.
std::vector<double> train_steps(Accelerator& acc, Model& model, DataLoader& loader, int steps) {
  std::vector<double> norms;
  while (acc.optimizer_steps() < steps) {
    auto b = acc.next_batch(loader);
    if (!b) continue;
    acc.backward(cross_entropy(acc.forward(model, {b->inputs}), b->targets));
    const double norm = acc.clip_grad_norm(kMaxNorm);
    if (!std::isnan(norm)) norms.push_back(norm);
    acc.step();
  }
  return norms;
}

struct DdpRun {
  std::vector<torch::Tensor> params;
  RunReport report;
  std::vector<double> norms;  // rank 0's gradient norms before clipping
};

DdpRun train_ddp(int N, int K, int64_t B, int steps, OptKind which, const torch::Tensor& X, const torch::Tensor& Y,
                 Strategy strategy = Strategy::DDP, Precision precision = Precision::No) {
  WorldOptions wo = world(N);
  World w(wo);
  DdpRun out;
  std::vector<std::vector<torch::Tensor>> per_rank(static_cast<size_t>(N));
  out.report = w.run([&](Rank& rk) {
    Options o;
    o.gradient_accumulation_steps = K;
    o.seed = 123;
    o.device = DeviceKind::CPU;
    o.strategy = strategy;
    o.precision = precision;
    o.bucket_bytes = 4096;  // several buckets
    std::shared_ptr<comm::Communicator> c(&rk.comm(), [](comm::Communicator*) {});
    Accelerator acc(o, c);
    MLPConfig cfg;
    cfg.sizes = {16, 32, 32, 5};
    std::shared_ptr<Model> model = make_mlp(cfg, acc.generator());
    if (rk.rank() > 0) {  // different starting weights: prepare must broadcast rank 0's
      torch::NoGradGuard ng;
      for (const auto& p : model->parameters()) p.add_(static_cast<double>(rk.rank()));
    }
    auto opt = make_opt(model, which);
    DataLoaderConfig lc;
    lc.batch_size = B;
    auto loader = std::make_shared<DataLoader>(X, Y, lc);
    acc.prepare(model, opt, nullptr, loader);
    auto norms = train_steps(acc, *model, *loader, steps);
    if (rk.rank() == 0) out.norms = norms;
    per_rank[static_cast<size_t>(rk.rank())] = acc.full_parameters(*model);
  });
  for (int r = 1; r < N && out.report.ok(); ++r)
    for (size_t i = 0; i < per_rank[0].size(); ++i)
      EXPECT_TRUE(torch::equal(per_rank[static_cast<size_t>(r)][i], per_rank[0][i])) << "rank " << r << " param " << i;
  out.params = per_rank[0];
  return out;
}

std::vector<torch::Tensor> train_single(int64_t batch, int steps, OptKind which, const torch::Tensor& X,
                                        const torch::Tensor& Y, Precision precision = Precision::No,
                                        std::vector<double>* norms = nullptr) {
  Options o;
  o.precision = precision;
  o.seed = 123;
  o.device = DeviceKind::CPU;
  Accelerator acc(o);
  MLPConfig cfg;
  cfg.sizes = {16, 32, 32, 5};
  std::shared_ptr<Model> model = make_mlp(cfg, acc.generator());
  auto opt = make_opt(model, which);
  DataLoaderConfig lc;
  lc.batch_size = batch;
  auto loader = std::make_shared<DataLoader>(X, Y, lc);
  acc.prepare(model, opt, nullptr, loader);
  auto seen = train_steps(acc, *model, *loader, steps);
  if (norms) *norms = seen;
  std::vector<torch::Tensor> out;
  for (const auto& p : model->parameters()) out.push_back(p.detach().clone());
  return out;
}

struct DdpCase {
  int n, k;
  OptKind opt;
  Strategy strategy = Strategy::DDP;
  int64_t b = 4;  // micro-batch per process
};

// N in {2, 4, 8} x K in {1, 2} x micro-batch B in {2, 3, 4, 5}, SGD and AdamW
std::vector<DdpCase> equivalence_cases(Strategy s) {
  return {DdpCase{2, 1, OptKind::SGD, s, 3}, DdpCase{2, 2, OptKind::AdamW, s, 4}, DdpCase{4, 2, OptKind::SGD, s, 2},
          DdpCase{4, 1, OptKind::AdamW, s, 5}, DdpCase{8, 2, OptKind::AdamW, s, 3}, DdpCase{8, 1, OptKind::SGD, s, 4}};
}

std::string case_name(const DdpCase& c) {
  return std::to_string(c.n) + "ranks_k" + std::to_string(c.k) + "_b" + std::to_string(c.b) +
         (c.opt == OptKind::SGD ? "_sgd" : "_adamw");
}

// ||got - ref|| / ||ref|| over all the parameters together.
double norm_rel_err(const std::vector<torch::Tensor>& got, const std::vector<torch::Tensor>& ref) {
  double num = 0, den = 0;
  for (size_t i = 0; i < ref.size() && i < got.size(); ++i) {
    num += (got[i] - ref[i]).pow(2).sum().item<double>();
    den += ref[i].pow(2).sum().item<double>();
  }
  return std::sqrt(num / std::max(den, 1e-300));
}

double max_rel_err(const std::vector<torch::Tensor>& got, const std::vector<torch::Tensor>& ref) {
  double worst = 0;
  EXPECT_EQ(got.size(), ref.size());
  for (size_t i = 0; i < ref.size() && i < got.size(); ++i) {
    double denom = std::max(ref[i].abs().max().item<double>(), 1e-30);
    worst = std::max(worst, (got[i] - ref[i]).abs().max().item<double>() / denom);
  }
  return worst;
}

// One norm per optimizer step, equal to the single process's (relative 1e-5), and clipping
// active on most steps: the equivalence covers the clipped path.
void expect_same_clipping(const std::vector<double>& got, const std::vector<double>& ref) {
  ASSERT_EQ(got.size(), ref.size());
  int clipped = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    EXPECT_NEAR(got[i], ref[i], 1e-5 * ref[i]) << "step " << i + 1;
    clipped += ref[i] > kMaxNorm;
  }
  EXPECT_GE(2 * clipped, static_cast<int>(ref.size())) << "steps with gradient norms above the clipping threshold";
}

class Ddp : public ::testing::TestWithParam<DdpCase> {};

TEST_P(Ddp, EqualsOneProcessWithTheGlobalBatch) {
  const auto [N, K, which, strategy, B] = GetParam();
  (void)strategy;
  const int steps = 20;
  auto gen = at::make_generator<at::CPUGeneratorImpl>(11);
  auto X = torch::randn({N * K * B * steps, 16}, gen);
  auto Y = torch::randint(0, 5, {N * K * B * steps}, gen, torch::kLong);
  DdpRun ddp = train_ddp(N, K, B, steps, which, X, Y);
  ASSERT_TRUE(ddp.report.ok()) << ddp.report.first_error();
  std::vector<double> ref_norms;
  auto ref = train_single(N * K * B, steps, which, X, Y, Precision::No, &ref_norms);
  EXPECT_LE(max_rel_err(ddp.params, ref), 1e-5) << "N=" << N << " K=" << K;
  expect_same_clipping(ddp.norms, ref_norms);
  // communication only on real steps: the initial broadcasts, then one all-reduce per
  // bucket per optimizer step; none on accumulation micro-steps
  const int64_t params = 6;
  int64_t buckets = 0;
  {  // the bucket layout of 4096-byte buckets in reverse order: recompute it
    const int64_t numel[] = {16 * 32, 32, 32 * 32, 32, 32 * 5, 5};
    int64_t total = 0;
    bool open = false;
    for (int k = 5; k >= 0; --k) {
      if (open && (total + numel[k]) * 4 > 4096) {
        ++buckets;
        total = 0;
      }
      total += numel[k];
      open = true;
    }
    ++buckets;
  }
  for (const auto& r : ddp.report.ranks)
    EXPECT_EQ(static_cast<int64_t>(r.collectives), params + steps * buckets) << "rank " << r.rank;
}

INSTANTIATE_TEST_SUITE_P(Sim, Ddp, ::testing::ValuesIn(equivalence_cases(Strategy::DDP)),
                         [](const auto& info) { return case_name(info.param); });


// ZeRO stages 1-3: the same equivalence (fp32), with the shards gathered at the end.
class Zero : public ::testing::TestWithParam<DdpCase> {};

TEST_P(Zero, EqualsOneProcessWithTheGlobalBatch) {
  const auto [N, K, which, strategy, B] = GetParam();
  const int steps = 20;
  auto gen = at::make_generator<at::CPUGeneratorImpl>(11);
  auto X = torch::randn({N * K * B * steps, 16}, gen);
  auto Y = torch::randint(0, 5, {N * K * B * steps}, gen, torch::kLong);
  DdpRun run = train_ddp(N, K, B, steps, which, X, Y, strategy);
  ASSERT_TRUE(run.report.ok()) << run.report.first_error();
  std::vector<double> ref_norms;
  auto ref = train_single(N * K * B, steps, which, X, Y, Precision::No, &ref_norms);
  EXPECT_LE(max_rel_err(run.params, ref), 1e-5) << "N=" << N << " K=" << K << " stage " << zero_stage(strategy);
  // the norm over every process's shard is the whole gradient's
  expect_same_clipping(run.norms, ref_norms);
}

// Mixed precision: 16-bit working weights, fp32 master chunks, gradients reduced in 16
// bits. Against one fp32 process the result is off by the precision's rounding, as much as
// DDP under the same precision (fp32 weights, autocast) is, and no more (SGD, so that
// the difference is not amplified by Adam's normalisation of near-zero gradients).
TEST(Zero, MixedPrecisionTrainsEveryStage) {
  const int N = 4, K = 2, steps = 20;
  const int64_t B = 4;
  auto gen = at::make_generator<at::CPUGeneratorImpl>(11);
  auto X = torch::randn({N * K * B * steps, 16}, gen);
  auto Y = torch::randint(0, 5, {N * K * B * steps}, gen, torch::kLong);
  auto ref = train_single(N * K * B, steps, OptKind::SGD, X, Y);
  for (Precision p : {Precision::BF16, Precision::FP16}) {
    DdpRun ddp = train_ddp(N, K, B, steps, OptKind::SGD, X, Y, Strategy::DDP, p);
    ASSERT_TRUE(ddp.report.ok()) << ddp.report.first_error();
    const double ddp_err = norm_rel_err(ddp.params, ref);
    EXPECT_LT(ddp_err, p == Precision::BF16 ? 0.01 : 0.004);
    for (Strategy s : {Strategy::Zero1, Strategy::Zero2, Strategy::Zero3}) {
      DdpRun run = train_ddp(N, K, B, steps, OptKind::SGD, X, Y, s, p);
      ASSERT_TRUE(run.report.ok()) << run.report.first_error();
      const double err = norm_rel_err(run.params, ref);
      const char* name = p == Precision::BF16 ? " bf16" : " fp16";
      EXPECT_LE(err, 1.25 * ddp_err + 1e-4) << strategy_name(s) << name << " (DDP: " << ddp_err << ")";
      EXPECT_GT(err, 1e-5) << strategy_name(s) << name << ": the 16-bit working weights must show";
    }
  }
}

// A TorchScript model: ZeRO cannot see its layers, so stages 1-2 bucket its parameters and
// stage 3 gathers the whole model around forward and backward. Same weights as DDP.
TEST(Zero, TorchScriptModelsMatchDdp) {
  torch::jit::Module m("TwoLayers");
  auto g0 = at::make_generator<at::CPUGeneratorImpl>(3);
  m.register_parameter("w1", torch::randn({16, 32}, g0) * 0.25, false);
  m.register_parameter("b1", torch::zeros({32}), false);
  m.register_parameter("w2", torch::randn({32, 5}, g0) * 0.2, false);
  m.define(R"(
def forward(self, x):
    return torch.relu(x.matmul(self.w1) + self.b1).matmul(self.w2)
)");
  std::string path = std::string(std::getenv("TMPDIR") ? std::getenv("TMPDIR") : "/tmp") + "/accel_test_sim_zero_" +
                     std::to_string(::getpid()) + ".pt";
  m.save(path);
  const int N = 4, steps = 10;
  const int64_t B = 4;
  auto gen = at::make_generator<at::CPUGeneratorImpl>(11);
  auto X = torch::randn({N * B * steps, 16}, gen);
  auto Y = torch::randint(0, 5, {N * B * steps}, gen, torch::kLong);
  auto train = [&](Strategy s) {
    World w(world(N));
    std::vector<torch::Tensor> out;
    auto rep = w.run([&](Rank& rk) {
      Options o;
      o.device = DeviceKind::CPU;
      o.strategy = s;
      o.bucket_bytes = 1024;  // the biases and w2 in one bucket, w1 in another
      std::shared_ptr<comm::Communicator> c(&rk.comm(), [](comm::Communicator*) {});
      Accelerator acc(o, c);
      std::shared_ptr<Model> model = load_torchscript(path);
      auto opt = make_opt(model, OptKind::AdamW);
      DataLoaderConfig lc;
      lc.batch_size = B;
      auto loader = std::make_shared<DataLoader>(X, Y, lc);
      acc.prepare(model, opt, nullptr, loader);
      train_steps(acc, *model, *loader, steps);
      auto full = acc.full_parameters(*model);
      if (rk.rank() == 0) out = full;
    });
    EXPECT_TRUE(rep.ok()) << rep.first_error();
    return out;
  };
  auto ddp = train(Strategy::DDP);
  ASSERT_EQ(ddp.size(), 3u);
  for (Strategy s : {Strategy::Zero1, Strategy::Zero2, Strategy::Zero3})
    EXPECT_LE(max_rel_err(train(s), ddp), 1e-5) << strategy_name(s);
  std::remove(path.c_str());
}

// Bad input fails at prepare, on every rank, with a message: a strategy the backend lacks
// a collective for, split batches that do not divide.
TEST(Zero, MissingCollectiveFailsAtPrepareOnEveryRank) {
  std::atomic<int> prepared{0};
  auto zero2 = [&](Precision p) {  // on a world whose backend lacks bf16 reduce-scatter
    WorldOptions wo = world(4);
    wo.missing = {"reduce_scatter:bfloat16"};
    World w(wo);
    return w.run([&](Rank& rk) {
      Options o;
      o.device = DeviceKind::CPU;
      o.strategy = Strategy::Zero2;
      o.precision = p;
      std::shared_ptr<comm::Communicator> c(&rk.comm(), [](comm::Communicator*) {});
      Accelerator acc(o, c);
      MLPConfig cfg;
      cfg.sizes = {8, 4};
      std::shared_ptr<Model> model = make_mlp(cfg, acc.generator());
      acc.prepare(model, make_opt(model, OptKind::SGD), nullptr, nullptr);
      ++prepared;
    });
  };
  RunReport rep = zero2(Precision::BF16);
  EXPECT_EQ(prepared.load(), 0);
  for (const auto& r : rep.ranks) {
    EXPECT_EQ(r.status, Status::Unsupported) << r.error;
    EXPECT_NE(r.error.find("zero2 needs reduce_scatter of bfloat16"), std::string::npos) << r.error;
    EXPECT_EQ(r.collectives, 0u) << "refused before any communication";
  }
  // its other collectives still serve fp32 ZeRO
  RunReport ok = zero2(Precision::No);
  EXPECT_TRUE(ok.ok()) << ok.first_error();
  EXPECT_EQ(prepared.load(), 4);
}

TEST(Ddp, SplitBatchesThatDoNotDivideFailAtPrepareOnEveryRank) {
  World w(world(3));
  auto rep = w.run([&](Rank& rk) {
    Options o;
    o.device = DeviceKind::CPU;
    o.strategy = Strategy::DDP;
    std::shared_ptr<comm::Communicator> c(&rk.comm(), [](comm::Communicator*) {});
    Accelerator acc(o, c);
    DataLoaderConfig lc;
    lc.batch_size = 8;
    lc.split_batches = true;
    auto loader = std::make_shared<DataLoader>(torch::zeros({32, 2}), torch::Tensor(), lc);
    acc.prepare(nullptr, nullptr, nullptr, loader);
  });
  for (const auto& r : rep.ranks) {
    EXPECT_EQ(r.status, Status::InvalidArgument);
    EXPECT_NE(r.error.find("split_batches needs a batch size (8) divisible by the number of processes (3)"),
              std::string::npos)
        << r.error;
  }
}

// Without even_batches, 20 samples in batches of 3 on 2 processes give process 0 four
// batches per epoch and process 1 three. Where that makes the processes issue different
// numbers of collectives, every process fails with the cause named (instead of a
// mismatch, or a hang on GPUs): process 0 at the collective process 1 will never make,
// process 1 at the end of its epoch. Where it does not (accumulation over 2 micro-batches
// under DDP: two synchronisations each; no collective in an evaluation loop), training
// and evaluation go on.
struct UnevenRun {
  RunReport report;
  std::vector<int64_t> batches;  // batches each process consumed
  std::vector<std::vector<torch::Tensor>> params;
};

UnevenRun run_uneven(Strategy s, int K, bool train, int epochs = 1) {
  World w(world(2));
  UnevenRun out;
  out.batches.assign(2, 0);
  out.params.resize(2);
  auto gen = at::make_generator<at::CPUGeneratorImpl>(4);
  auto X = torch::randn({20, 6}, gen);
  auto Y = torch::randint(0, 3, {20}, gen, torch::kLong);
  out.report = w.run([&](Rank& rk) {
    Options o;
    o.device = DeviceKind::CPU;
    o.strategy = s;
    o.gradient_accumulation_steps = K;
    std::shared_ptr<comm::Communicator> c(&rk.comm(), [](comm::Communicator*) {});
    Accelerator acc(o, c);
    MLPConfig cfg;
    cfg.sizes = {6, 8, 3};
    std::shared_ptr<Model> model = make_mlp(cfg, acc.generator());
    auto opt = make_opt(model, OptKind::SGD);
    DataLoaderConfig lc;
    lc.batch_size = 3;
    lc.even_batches = false;
    auto loader = std::make_shared<DataLoader>(X, Y, lc);
    acc.prepare(model, opt, nullptr, loader);
    if (!train) model->train(false);
    for (int e = 0; e < epochs; ++e)
      while (auto b = acc.next_batch(*loader)) {
        ++out.batches[static_cast<size_t>(rk.rank())];
        torch::Tensor logits = acc.forward(*model, {b->inputs});
        if (!train) continue;
        acc.backward(cross_entropy(logits, b->targets));
        acc.step();
      }
    out.params[static_cast<size_t>(rk.rank())] = acc.full_parameters(*model);
  });
  return out;
}

TEST(Ddp, UnevenBatchesThatWouldDesynchroniseFailOnEveryProcess) {
  for (Strategy s : {Strategy::DDP, Strategy::Zero1, Strategy::Zero2, Strategy::Zero3}) {
    UnevenRun run = run_uneven(s, 1, true);
    ASSERT_EQ(run.report.ranks.size(), 2u);
    for (const auto& r : run.report.ranks) {
      EXPECT_EQ(r.status, Status::InvalidState) << strategy_name(s) << " rank " << r.rank << ": " << r.error;
      EXPECT_NE(r.error.find("(even_batches is off)"), std::string::npos) << r.error;
      EXPECT_EQ(r.error.find("mismatched"), std::string::npos) << "the cause, not the symptom: " << r.error;
    }
    const std::string& e0 = run.report.ranks[0].error;
    EXPECT_NE(e0.find("process 0 4 batches per epoch and process 1 3"), std::string::npos) << e0;
    EXPECT_NE(e0.find("batch 4 of this epoch has no counterpart on process 1"), std::string::npos) << e0;
    EXPECT_NE(run.report.ranks[1].error.find("process 1 3 batches per epoch and process 0 4"), std::string::npos)
        << run.report.ranks[1].error;
    EXPECT_EQ(run.batches, (std::vector<int64_t>{4, 3})) << strategy_name(s);
  }
  // ZeRO-3 gathers weights in every forward, even in evaluation
  UnevenRun eval3 = run_uneven(Strategy::Zero3, 1, false);
  for (const auto& r : eval3.report.ranks) EXPECT_EQ(r.status, Status::InvalidState) << r.error;
  // ZeRO-2 reduce-scatters every micro-batch: accumulation does not even it out
  UnevenRun z2 = run_uneven(Strategy::Zero2, 2, true);
  for (const auto& r : z2.report.ranks) EXPECT_EQ(r.status, Status::InvalidState) << r.error;
}

TEST(Ddp, UnevenBatchesWithMatchingCollectivesTrain) {
  // DDP and ZeRO-1 with 2 micro-batches per step: 4 and 3 batches both make 2 steps
  for (Strategy s : {Strategy::DDP, Strategy::Zero1}) {
    UnevenRun run = run_uneven(s, 2, true, 3);
    ASSERT_TRUE(run.report.ok()) << strategy_name(s) << ": " << run.report.first_error();
    EXPECT_EQ(run.batches, (std::vector<int64_t>{12, 9}));
    for (size_t i = 0; i < run.params[0].size(); ++i) EXPECT_TRUE(torch::equal(run.params[0][i], run.params[1][i]));
  }
  // evaluation under DDP makes no collective
  UnevenRun eval = run_uneven(Strategy::DDP, 1, false, 2);
  ASSERT_TRUE(eval.report.ok()) << eval.report.first_error();
  EXPECT_EQ(eval.batches, (std::vector<int64_t>{8, 6}));
}

std::vector<DdpCase> zero_cases() {
  std::vector<DdpCase> v;
  for (Strategy s : {Strategy::Zero1, Strategy::Zero2, Strategy::Zero3})
    for (const DdpCase& c : equivalence_cases(s)) v.push_back(c);
  return v;
}

INSTANTIATE_TEST_SUITE_P(Sim, Zero, ::testing::ValuesIn(zero_cases()), [](const auto& info) {
  return std::string("stage") + std::to_string(zero_stage(info.param.strategy)) + "_" + case_name(info.param);
});

// ---------------------------------------------------------------------------------------
// Memory and communication per strategy, against the ZeRO paper's arithmetic.

struct StrategyRun {
  RunReport report;
  uint64_t psi = 0;  // parameters
  uint64_t layer = 0;  // parameters of one layer (a ZeRO unit)
};

// An MLP of `layers` layers of width w, bf16 AdamW, `steps` steps of micro-batch 1 on N
// ranks. Peaks are measured from after prepare (the unsharded model each rank builds
// before prepare shards it is not training memory).
StrategyRun run_strategy(Strategy s, int N, int layers, int64_t w, int steps, uint64_t capacity = 0,
                         Precision precision = Precision::BF16, World** keep = nullptr, const std::string& algorithms = "") {
  WorldOptions wo = world(N, 30.0);
  wo.device_capacity = capacity;
  wo.algorithms = algorithms;
  wo.record_trace = keep != nullptr;
  auto wp = std::make_unique<World>(wo);
  World& wr = *wp;
  auto gen = at::make_generator<at::CPUGeneratorImpl>(5);
  auto X = torch::randn({64, w}, gen);
  auto Y = torch::randint(0, w, {64}, gen, torch::kLong);
  StrategyRun out;
  out.layer = static_cast<uint64_t>(w * w + w);
  out.psi = out.layer * static_cast<uint64_t>(layers);
  out.report = wr.run([&](Rank& rk) {
    Options o;
    o.seed = 1;
    o.device = DeviceKind::CPU;
    o.strategy = s;
    o.precision = precision;
    o.bucket_bytes = 1 << 20;  // DDP's buckets: a small part of the model, as on real models
    std::shared_ptr<comm::Communicator> c(&rk.comm(), [](comm::Communicator*) {});
    Accelerator acc(o, c);
    MLPConfig cfg;
    cfg.sizes.assign(static_cast<size_t>(layers) + 1, w);
    std::shared_ptr<Model> model = make_mlp(cfg, acc.generator());
    AdamWConfig ac;
    auto opt = std::make_shared<Optimizer>(model, ac);
    DataLoaderConfig lc;
    lc.batch_size = 1;
    auto loader = std::make_shared<DataLoader>(X, Y, lc);
    acc.prepare(model, opt, nullptr, loader);
    rk.comm().barrier();
    if (rk.rank() == 0) rk.world().budget()->reset_peaks();
    rk.comm().barrier();
    while (acc.optimizer_steps() < steps) {
      auto b = acc.next_batch(*loader);
      if (!b) continue;
      acc.backward(cross_entropy(acc.forward(*model, {b->inputs}), b->targets));
      acc.step();
    }
  });
  if (keep) *keep = wp.release();
  return out;
}

// Peak bytes per rank, bf16 AdamW (Psi parameters, N ranks): DDP 16Psi (fp32 weights and
// gradients, two fp32 moments); ZeRO-1 4Psi + 12Psi/N; ZeRO-2 2Psi + 14Psi/N; ZeRO-3
// 16Psi/N; plus what docs/distributed.md documents on top: under ZeRO-2 the gradient of the
// layer autograd just computed, the unit buffer being filled and the one being reduced
// (3 layers in bf16), under ZeRO-3 also the gathered layer (4 layers). Within 10%.
TEST(StrategyMemory, PeakBytesPerRankFollowTheZeroArithmetic) {
  const int N = 8, layers = 48;
  const int64_t w = 256;
  std::vector<double> peaks;
  for (Strategy s : {Strategy::DDP, Strategy::Zero1, Strategy::Zero2, Strategy::Zero3}) {
    StrategyRun run = run_strategy(s, N, layers, w, 2);
    ASSERT_TRUE(run.report.ok()) << run.report.first_error();
    const double psi = static_cast<double>(run.psi), n = N, layer_bf16 = 2.0 * static_cast<double>(run.layer);
    double expected = 0;
    switch (s) {
      case Strategy::DDP: expected = 16 * psi; break;
      case Strategy::Zero1: expected = 4 * psi + 12 * psi / n; break;
      case Strategy::Zero2: expected = 2 * psi + 14 * psi / n + 3 * layer_bf16; break;
      default: expected = 16 * psi / n + 4 * layer_bf16; break;
    }
    std::printf("%s: peak %llu bytes on rank 0, expected %.0f, ratio %.3f\n", strategy_name(s),
                static_cast<unsigned long long>(run.report.ranks[0].peak_bytes), expected,
                static_cast<double>(run.report.ranks[0].peak_bytes) / expected);
    for (const auto& r : run.report.ranks) {
      const double ratio = static_cast<double>(r.peak_bytes) / expected;
      EXPECT_NEAR(ratio, 1.0, 0.10) << strategy_name(s) << " rank " << r.rank << ": peak " << r.peak_bytes
                                    << " bytes, expected " << expected;
    }
    peaks.push_back(static_cast<double>(run.report.ranks[0].peak_bytes));
  }
  for (size_t i = 1; i < peaks.size(); ++i) EXPECT_LT(peaks[i], peaks[i - 1]) << "each stage saves memory";
}

TEST(StrategyMemory, OutOfMemoryUnderDdpTrainsUnderZero3) {
  const int N = 8, layers = 48;
  const int64_t w = 256;
  const uint64_t budget = 20ull << 20;  // the unsharded model (12.6 MB in fp32) fits; DDP's 51 MB does not
  StrategyRun ddp = run_strategy(Strategy::DDP, N, layers, w, 2, budget);
  EXPECT_FALSE(ddp.report.ok());
  int oom = 0;
  for (const auto& r : ddp.report.ranks) {
    EXPECT_TRUE(r.status == Status::OutOfMemory || r.status == Status::Communication) << r.error;
    oom += r.status == Status::OutOfMemory;
  }
  EXPECT_GE(oom, 1);
  EXPECT_NE(ddp.report.first_error().find("out of memory"), std::string::npos) << ddp.report.first_error();
  StrategyRun z3 = run_strategy(Strategy::Zero3, N, layers, w, 2, budget);
  ASSERT_TRUE(z3.report.ok()) << z3.report.first_error();
  for (const auto& r : z3.report.ranks) EXPECT_LE(r.peak_bytes, budget);
}

// Bytes each rank sends per optimizer step (the difference between 3 and 2 steps), in
// elements of the gradient's type: the ZeRO paper's 2Psi for DDP (ring all-reduce) and
// stages 1-2 (reduce-scatter + all-gather), 3Psi for stage 3 (all-gather in forward and
// in backward, reduce-scatter), each times (N-1)/N for a ring.
TEST(StrategyCommunication, BytesPerStepMatchTheZeroPaper) {
  const int N = 4, layers = 6;
  const int64_t w = 64;
  for (Strategy s : {Strategy::DDP, Strategy::Zero1, Strategy::Zero2, Strategy::Zero3}) {
    StrategyRun a = run_strategy(s, N, layers, w, 2, 0, Precision::No);
    StrategyRun b = run_strategy(s, N, layers, w, 3, 0, Precision::No);
    ASSERT_TRUE(a.report.ok() && b.report.ok()) << a.report.first_error() << b.report.first_error();
    const double psi = static_cast<double>(a.psi), factor = s == Strategy::Zero3 ? 3.0 : 2.0;
    const double expected = factor * psi * (N - 1) / N;
    for (int r = 0; r < N; ++r) {
      const double sent = static_cast<double>(b.report.ranks[static_cast<size_t>(r)].bytes_sent -
                                              a.report.ranks[static_cast<size_t>(r)].bytes_sent) / 4.0;
      EXPECT_NEAR(sent / expected, 1.0, 0.02) << strategy_name(s) << " rank " << r << ": " << sent << " elements, expected "
                                              << expected;
    }
  }
}

// DDP's buckets are launched from backward: in the simulator's trace (compute charged from
// the FLOP estimate of each bucket's layers), all-reduces run while later buckets' backward
// compute is still going on; without a gradient to wait for the last bucket, the step
// would serialise them.
TEST(Ddp, AllReducesOverlapBackwardInTheTrace) {
  World* kept = nullptr;
  StrategyRun run = run_strategy(Strategy::DDP, 4, 8, 512, 2, 0, Precision::No, &kept);
  std::unique_ptr<World> w(kept);
  ASSERT_TRUE(run.report.ok()) << run.report.first_error();
  auto j = nlohmann::json::parse(w->trace_json());
  struct Ev {
    double ts, end;
  };
  std::vector<Ev> backward, allreduce;
  for (const auto& e : j["traceEvents"]) {
    if (e["ph"] != "X" || e["pid"] != 0) continue;
    const Ev ev{e["ts"].get<double>(), e["ts"].get<double>() + e["dur"].get<double>()};
    if (e["name"] == "backward") backward.push_back(ev);
    if (e["name"] == "all_reduce") allreduce.push_back(ev);
  }
  ASSERT_GE(backward.size(), 8u);   // one charge per bucket per step
  ASSERT_GE(allreduce.size(), 4u);  // several buckets per step
  int overlapping = 0;
  for (const auto& a : allreduce)
    for (const auto& b : backward)
      if (b.ts < a.end && a.ts < b.end) {
        ++overlapping;
        break;
      }
  EXPECT_GE(overlapping, 2) << "all-reduces running during backward compute";
}

TEST(Ddp, PrepareBroadcastsParametersAndBuffersFromRankZero) {
  torch::jit::Module m("WithBuffer");
  m.register_parameter("w", torch::ones({3}), false);
  m.register_buffer("running", torch::zeros({2}));
  m.define(R"(
def forward(self, x):
    return x * self.w
)");
  std::string path = std::string(std::getenv("TMPDIR") ? std::getenv("TMPDIR") : "/tmp") + "/accel_test_sim_buffer_" +
                     std::to_string(::getpid()) + ".pt";
  m.save(path);
  World w(world(3));
  std::vector<std::vector<float>> seen(3);
  auto rep = w.run([&](Rank& rk) {
    Options o;
    o.device = DeviceKind::CPU;
    o.strategy = Strategy::DDP;
    std::shared_ptr<comm::Communicator> c(&rk.comm(), [](comm::Communicator*) {});
    Accelerator acc(o, c);
    std::shared_ptr<Model> model = load_torchscript(path);
    {
      torch::NoGradGuard ng;
      model->parameters()[0].fill_(static_cast<float>(rk.rank() + 1));
      model->buffers().at(0).fill_(static_cast<float>(10 * (rk.rank() + 1)));
    }
    acc.prepare(model, nullptr, nullptr, nullptr);
    auto& v = seen[static_cast<size_t>(rk.rank())];
    for (float x : {model->parameters()[0][0].item<float>(), model->buffers()[0][1].item<float>()}) v.push_back(x);
  });
  std::remove(path.c_str());
  ASSERT_TRUE(rep.ok()) << rep.first_error();
  for (int r = 0; r < 3; ++r) EXPECT_EQ(seen[static_cast<size_t>(r)], (std::vector<float>{1.f, 10.f})) << "rank " << r;
  EXPECT_EQ(rep.ranks[0].collectives, 2u);  // one broadcast for the parameter, one for the buffer
}

// DDP on the backends with NCCL's semantics multiplies each bucket by NCCL's avg factor (1/n
// in the gradients' type) and sums, instead of asking for avg: the same bits as NCCL's avg on
// the ring and the tree, for every floating type and a world that is not a power of two. The
// factor is rounded to the type as NCCL rounds it, so libtorch's multiply gives NCCL's products
// whether it rounds a scalar to the tensor's type first (libtorch 1.13) or not (2.x).
TEST(Ddp, PreMultiplyAndSumIsNcclsAverage) {
  const size_t count = 4099;
  for (comm::DataType t : {comm::DataType::Float32, comm::DataType::Float16, comm::DataType::BFloat16, comm::DataType::Float64})
    for (int n : {3, 6})
      for (comm::NcclAlgo algo : {comm::NcclAlgo::Ring, comm::NcclAlgo::Tree}) {
        const c10::ScalarType st = t == comm::DataType::Float32   ? torch::kFloat
                                   : t == comm::DataType::Float16 ? torch::kHalf
                                   : t == comm::DataType::BFloat16 ? torch::kBFloat16
                                                                   : torch::kDouble;
        auto gen = at::make_generator<at::CPUGeneratorImpl>(static_cast<uint64_t>(n) * 31 + static_cast<uint64_t>(st));
        std::vector<torch::Tensor> in, pre;
        std::vector<const void*> in_p, pre_p;
        for (int r = 0; r < n; ++r) {
          in.push_back((torch::randn({static_cast<int64_t>(count)}, gen) * 3.0).to(st));
          pre.push_back(in.back().clone().mul_(comm::avg_factor(t, n)));
        }
        for (int r = 0; r < n; ++r) {
          in_p.push_back(in[r].data_ptr());
          pre_p.push_back(pre[r].data_ptr());
        }
        comm::NcclOrder order;
        order.algo = algo;
        order.count = count;
        order.ranks_per_node = algo == comm::NcclAlgo::Tree ? 2 : 8;  // the tree across 2 or 3 nodes
        torch::Tensor avg = torch::empty({static_cast<int64_t>(count)}, in[0].options()), sum = torch::empty_like(avg);
        comm::reduce_nccl(avg.data_ptr(), in_p.data(), n, 0, count, t, comm::RedOp::Avg, 0, order);
        comm::reduce_nccl(sum.data_ptr(), pre_p.data(), n, 0, count, t, comm::RedOp::Sum, 0, order);
        const std::string what = std::string(comm::dtype_name(t)) + ", " + std::to_string(n) + " ranks, " +
                                 (algo == comm::NcclAlgo::Tree ? "tree" : "ring");
        EXPECT_TRUE(torch::equal(avg, sum)) << what;
      }
  EXPECT_EQ(comm::avg_factor(comm::DataType::BFloat16, 3), 0.333984375);  // bf16(1/3): 0x3eab
  EXPECT_EQ(comm::avg_factor(comm::DataType::Float16, 3), 0.333251953125);  // fp16(1/3): 0x3555
  EXPECT_EQ(comm::avg_factor(comm::DataType::Float32, 4), 0.25);
  EXPECT_EQ(comm::avg_factor(comm::DataType::Int32, 4), 1.0);
}

// So NCCL may run DDP's gradient all-reduces on NVLink SHARP: on the 8xH100 preset (one node,
// NVLS, which its cost model picks for a float sum from 16 MiB) the weights' buckets of 16 MiB
// run "nvls" in the trace, and the steps are predicted faster than with the ring forced
// (NCCL_ALGO=Ring); NCCL's avg could not run there (NVLS does no pre-multiply).
TEST(Ddp, GradientsAllReduceOnNvlsOnOneH100Node) {
  auto algorithms_of = [](World& w) {
    std::map<std::string, int> seen;
    const auto trace = nlohmann::json::parse(w.trace_json());
    for (const auto& e : trace["traceEvents"])
      if (e.value("ph", "") == "X" && e.value("pid", -1) == 0 && e.value("name", "") == "all_reduce")
        ++seen[e["args"].value("algorithm", "")];
    return seen;
  };
  World* kept = nullptr;
  StrategyRun nvls = run_strategy(Strategy::DDP, 8, 2, 2048, 2, 0, Precision::No, &kept);
  std::unique_ptr<World> w(kept);
  ASSERT_TRUE(nvls.report.ok()) << nvls.report.first_error();
  const auto on_nvls = algorithms_of(*w);
  StrategyRun ring = run_strategy(Strategy::DDP, 8, 2, 2048, 2, 0, Precision::No, &kept, "Ring");
  w.reset(kept);
  ASSERT_TRUE(ring.report.ok()) << ring.report.first_error();
  const auto on_ring = algorithms_of(*w);
  ASSERT_EQ(on_nvls.count("nvls"), 1u);
  EXPECT_EQ(on_nvls.at("nvls"), 4);  // two layers' weights a step, two steps
  EXPECT_EQ(on_ring.count("nvls"), 0u);
  EXPECT_GE(on_ring.count("ring"), 1u);
  EXPECT_LT(nvls.report.predicted_seconds, ring.report.predicted_seconds);
}

}  // namespace
}  // namespace accel::sim
