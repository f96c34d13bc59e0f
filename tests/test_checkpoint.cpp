// Checkpoints: exact resume under every strategy, resharding, project directories, and
// hostile checkpoint directories. Multi-rank cases run on the simulator.
#include <gtest/gtest.h>
#include <torch/torch.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "runtime/runtime.h"
#include "runtime/safetensors.h"
#include "sim/world.h"

namespace accel {
namespace {

namespace fs = std::filesystem;

fs::path scratch(const std::string& name) {
  const char* t = std::getenv("TMPDIR");
  fs::path p = fs::path(t ? t : "/tmp") / ("accel_ckpt_" + std::to_string(::getpid()) + "_" + name);
  fs::remove_all(p);
  return p;
}

struct RunOut {
  std::vector<torch::Tensor> params;       // gathered, rank 0
  std::vector<double> batch_sums;          // rank 0's inputs, one per micro-batch
  sim::RunReport report;
  std::string saved;
};

struct RunSpec {
  Strategy strategy = Strategy::DDP;
  Precision precision = Precision::No;
  int ranks = 4;
  int until = 14;          // train until this many optimizer steps
  std::string save_dir;    // save at the end ("" none)
  std::string load_dir;    // load after prepare ("" none)
  std::string project;     // a project directory (automatic names)
};

// An MLP with dropout, AdamW, a cosine schedule, a shuffled loader, 2 micro-batches per step:
// the state a resume must carry exactly. 40 samples per rank per epoch: 5 steps an epoch.
RunOut run(const RunSpec& spec) {
  sim::WorldOptions wo;
  wo.world_size = spec.ranks;
  wo.timeout_seconds = 30;
  sim::World w(wo);
  auto gen = at::make_generator<at::CPUGeneratorImpl>(21);
  auto X = torch::randn({160, 12}, gen);
  auto Y = torch::randint(0, 4, {160}, gen, torch::kLong);
  RunOut out;
  out.report = w.run([&](sim::Rank& rk) {
    Options o;
    o.device = DeviceKind::CPU;
    o.seed = 5;
    o.strategy = spec.strategy;
    o.precision = spec.precision;
    o.gradient_accumulation_steps = 2;
    o.bucket_bytes = 2048;
    std::shared_ptr<comm::Communicator> c(&rk.comm(), [](comm::Communicator*) {});
    Accelerator acc(o, c);
    MLPConfig cfg;
    cfg.sizes = {12, 24, 16, 4};
    cfg.dropout = 0.1;
    std::shared_ptr<Model> model = make_mlp(cfg, acc.generator());
    auto opt = std::make_shared<Optimizer>(model, AdamWConfig{3e-3});
    SchedulerConfig sc;
    sc.kind = Schedule::Cosine;
    sc.warmup_steps = 2;
    sc.total_steps = 40;
    auto sched = std::make_shared<Scheduler>(opt, sc);
    DataLoaderConfig lc;
    lc.batch_size = 4;
    lc.shuffle = true;
    lc.seed = 9;
    auto loader = std::make_shared<DataLoader>(X, Y, lc);
    acc.prepare(model, opt, sched, loader);
    if (!spec.project.empty()) acc.set_project(ProjectConfig{spec.project, 0});
    if (!spec.load_dir.empty() || (!spec.project.empty() && spec.save_dir.empty() && spec.until < 0))
      acc.load_state(spec.load_dir);
    while (acc.optimizer_steps() < spec.until) {
      auto b = acc.next_batch(*loader);
      if (!b) continue;
      if (rk.rank() == 0) out.batch_sums.push_back(b->inputs.sum().item<double>());
      acc.backward(cross_entropy(acc.forward(*model, {b->inputs}), b->targets));
      acc.clip_grad_norm(1.0);
      acc.step();
    }
    if (!spec.save_dir.empty() || !spec.project.empty()) {
      std::string d = acc.save_state(spec.save_dir);
      if (rk.rank() == 0) out.saved = d;
    }
    auto full = acc.full_parameters(*model);
    if (rk.rank() == 0) out.params = full;
  });
  return out;
}

struct ResumeCase {
  Strategy strategy;
  Precision precision;
};

class ExactResume : public ::testing::TestWithParam<ResumeCase> {};

// 14 steps straight == 7 steps, save (mid-epoch: 5 steps an epoch), a fresh world, load,
// 7 more: bit-identical weights and the same batches.
TEST_P(ExactResume, BitIdenticalWeightsAndTheSameBatches) {
  const auto [strategy, precision] = GetParam();
  const fs::path dir = scratch(std::string("resume_") + strategy_name(strategy));
  RunSpec straight{strategy, precision, 4, 14, "", "", ""};
  RunOut a = run(straight);
  ASSERT_TRUE(a.report.ok()) << a.report.first_error();
  RunSpec first{strategy, precision, 4, 7, dir.string(), "", ""};
  RunOut b1 = run(first);
  ASSERT_TRUE(b1.report.ok()) << b1.report.first_error();
  RunSpec second{strategy, precision, 4, 14, "", dir.string(), ""};
  RunOut b2 = run(second);
  ASSERT_TRUE(b2.report.ok()) << b2.report.first_error();
  ASSERT_EQ(a.params.size(), b2.params.size());
  for (size_t i = 0; i < a.params.size(); ++i) EXPECT_TRUE(torch::equal(a.params[i], b2.params[i])) << "parameter " << i;
  ASSERT_EQ(b1.batch_sums.size() + b2.batch_sums.size(), a.batch_sums.size());
  for (size_t i = 0; i < b2.batch_sums.size(); ++i)
    EXPECT_EQ(b2.batch_sums[i], a.batch_sums[b1.batch_sums.size() + i]) << "micro-batch " << i << " after the resume";
  fs::remove_all(dir);
}

INSTANTIATE_TEST_SUITE_P(Sim, ExactResume,
                         ::testing::Values(ResumeCase{Strategy::DDP, Precision::No}, ResumeCase{Strategy::DDP, Precision::BF16},
                                           ResumeCase{Strategy::Zero1, Precision::No}, ResumeCase{Strategy::Zero1, Precision::BF16},
                                           ResumeCase{Strategy::Zero2, Precision::No}, ResumeCase{Strategy::Zero2, Precision::BF16},
                                           ResumeCase{Strategy::Zero3, Precision::No}, ResumeCase{Strategy::Zero3, Precision::BF16}),
                         [](const auto& info) {
                           return std::string(strategy_name(info.param.strategy)) +
                                  (info.param.precision == Precision::BF16 ? "_bf16" : "_fp32");
                         });

}  // namespace
}  // namespace accel
