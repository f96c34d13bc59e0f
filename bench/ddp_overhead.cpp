// bench_ddp_overhead: what the distributed strategies' machinery costs, and what the cost
// model predicts they cost at scale.
//
// 1. "ddp_overhead": N simulated ranks, each with a micro-batch of B, train with DDP (and,
//    side by side, ZeRO stages 1-3) against one process training the same model on the
//    global batch N*B, both in this process with the same intra-op threads. The simulator
//    runs one rank at a time, so N ranks do the single process's arithmetic in N slices;
//    what is left is the strategy's own work: gradient hooks, bucket copies, the
//    collectives' memory traffic, sharded optimizer steps, ZeRO-3's gathers.
//    ratio = strategy_us / single_us per optimizer step (medians over interleaved rounds).
//    Running N ranks costs N times libtorch's per-operation dispatch, which a small model
//    feels: independent_us is the same N ranks training without a strategy (no
//    communication), and vs_independent = strategy_us / independent_us isolates the
//    strategy machinery from that.
//
//      {"bench":"ddp_overhead","model":"mlp-...","ranks":4,"batch":32,"global_batch":128,
//       "strategy":"ddp","single_us":…,"strategy_us":…,"ratio":…}
//
// 2. "scaling": the cost model's predicted step time and weak-scaling efficiency
//    (step time on 8 GPUs / step time on G GPUs) of a 1B-parameter model with 16,384 tokens
//    per GPU per step, bf16, from 8 to 1,024 H100s (G/8 nodes of the 8xH100-IB preset), per
//    strategy (sim::estimate_step, documented in sim/cost.h and docs/distributed.md).
//
//   bench_ddp_overhead [--quick] [--rounds N] [--steps-scale X] [--threads N] [--ranks N]
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "runtime/runtime.h"
#include "sim/cost.h"
#include "sim/world.h"

namespace {

using namespace accel;
using Clock = std::chrono::steady_clock;

struct Config {
  std::string name;
  std::vector<int64_t> sizes;
  int64_t batch;
  int steps;  // per timed run (--steps scales them)
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[v.size() / 2];
}

std::shared_ptr<Model> make_model(Accelerator& acc, const Config& c) {
  MLPConfig m;
  m.sizes = c.sizes;
  return make_mlp(m, acc.generator());
}

// One training loop: `steps` optimizer steps; returns the seconds they took (after prepare).
double loop(Accelerator& acc, Model& model, DataLoader& loader, int steps) {
  const auto t0 = Clock::now();
  while (acc.optimizer_steps() < steps) {
    auto b = acc.next_batch(loader);
    if (!b) continue;
    acc.backward(cross_entropy(acc.forward(model, {b->inputs}), b->targets));
    acc.step();
  }
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

double run_single(const Config& c, int64_t global_batch, int steps, const torch::Tensor& X, const torch::Tensor& Y) {
  Options o;
  o.device = DeviceKind::CPU;
  o.seed = 1;
  Accelerator acc(o);
  auto model = make_model(acc, c);
  auto opt = std::make_shared<Optimizer>(model, AdamWConfig{});
  DataLoaderConfig lc;
  lc.batch_size = global_batch;
  auto loader = std::make_shared<DataLoader>(X, Y, lc);
  acc.prepare(model, opt, nullptr, loader);
  return loop(acc, *model, *loader, steps) / steps;
}

double run_ranks(const Config& c, Strategy s, int ranks, int steps, const torch::Tensor& X, const torch::Tensor& Y) {
  sim::WorldOptions wo;
  wo.world_size = ranks;
  wo.timeout_seconds = 120;
  wo.engine_threads = 1;
  sim::World w(wo);
  double seconds = 0;
  auto rep = w.run([&](sim::Rank& rk) {
    Options o;
    o.device = DeviceKind::CPU;
    o.seed = 1;
    o.strategy = s;
    std::shared_ptr<comm::Communicator> comm(&rk.comm(), [](comm::Communicator*) {});
    Accelerator acc(o, comm);
    auto model = make_model(acc, c);
    auto opt = std::make_shared<Optimizer>(model, AdamWConfig{});
    DataLoaderConfig lc;
    lc.batch_size = c.batch;
    auto loader = std::make_shared<DataLoader>(X, Y, lc);
    acc.prepare(model, opt, nullptr, loader);
    rk.comm().barrier();
    const auto t0 = Clock::now();
    loop(acc, *model, *loader, steps);
    rk.comm().barrier();
    if (rk.rank() == 0) seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  });
  if (!rep.ok()) {
    std::fprintf(stderr, "bench_ddp_overhead: %s failed: %s\n", strategy_name(s), rep.first_error().c_str());
    std::exit(1);
  }
  return seconds / steps;
}

}  // namespace

int main(int argc, char** argv) {
  int rounds = 5, threads = 1, ranks = 4;
  double scale = 1.0;  // of each model's steps per run
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--quick")) {
      rounds = 3;
      scale = 0.25;
    } else if (!std::strcmp(argv[i], "--rounds") && i + 1 < argc) {
      rounds = std::atoi(argv[++i]);
    } else if (!std::strcmp(argv[i], "--steps-scale") && i + 1 < argc) {
      scale = std::atof(argv[++i]);
    } else if (!std::strcmp(argv[i], "--threads") && i + 1 < argc) {
      threads = std::atoi(argv[++i]);
    } else if (!std::strcmp(argv[i], "--ranks") && i + 1 < argc) {
      ranks = std::atoi(argv[++i]);
    } else if (!std::strcmp(argv[i], "--breakdown") || !std::strncmp(argv[i], "--model", 7)) {
      if (!std::strcmp(argv[i], "--model")) ++i;  // options of the other benchmarks (scripts/bench passes them to all)
    } else {
      std::fprintf(stderr, "usage: %s [--quick] [--rounds N] [--steps-scale X] [--threads N] [--ranks N]\n", argv[0]);
      return 2;
    }
  }
  if (rounds < 1 || !(scale > 0) || threads < 1 || ranks < 2) {
    std::fprintf(stderr, "bench_ddp_overhead: rounds, threads >= 1, steps-scale > 0 and ranks >= 2\n");
    return 2;
  }
  at::set_num_threads(threads);
  const std::vector<Config> configs = {{"mlp-64-128-64-10", {64, 128, 64, 10}, 32, 40},
                                       {"mlp-512-512-512-512-10", {512, 512, 512, 512, 10}, 64, 8}};
  const std::vector<Strategy> strategies = {Strategy::DDP, Strategy::Zero1, Strategy::Zero2, Strategy::Zero3};
  for (const auto& c : configs) {
    const int steps = std::max(2, static_cast<int>(c.steps * scale));
    const int64_t global = c.batch * ranks;
    auto gen = at::make_generator<at::CPUGeneratorImpl>(7);
    auto X = torch::randn({global * steps, c.sizes.front()}, gen);
    auto Y = torch::randint(0, c.sizes.back(), {global * steps}, gen, torch::kLong);
    std::vector<double> single, independent;
    std::vector<std::vector<double>> per(strategies.size());
    run_single(c, global, 2, X, Y);  // warm-up
    for (int r = 0; r < rounds; ++r) {
      std::fprintf(stderr, "bench_ddp_overhead: %s round %d/%d\n", c.name.c_str(), r + 1, rounds);
      single.push_back(run_single(c, global, steps, X, Y));
      independent.push_back(run_ranks(c, Strategy::None, ranks, steps, X, Y));
      for (size_t k = 0; k < strategies.size(); ++k) per[k].push_back(run_ranks(c, strategies[k], ranks, steps, X, Y));
    }
    const double s_us = median(single) * 1e6, i_us = median(independent) * 1e6;
    for (size_t k = 0; k < strategies.size(); ++k) {
      const double us = median(per[k]) * 1e6;
      std::printf(
          "{\"bench\":\"ddp_overhead\",\"model\":\"%s\",\"ranks\":%d,\"batch\":%lld,\"global_batch\":%lld,\"threads\":%d,"
          "\"steps\":%d,\"rounds\":%d,\"strategy\":\"%s\",\"single_us\":%.1f,\"independent_us\":%.1f,"
          "\"strategy_us\":%.1f,\"ratio\":%.3f,\"vs_independent\":%.3f}\n",
          c.name.c_str(), ranks, static_cast<long long>(c.batch), static_cast<long long>(global), threads, steps, rounds,
          strategy_name(strategies[k]), s_us, i_us, us, us / s_us, us / i_us);
      std::fflush(stdout);
    }
  }

  // the cost model at scale
  const double params = 1e9, tokens = 16384;
  for (const char* s : {"ddp", "zero1", "zero2", "zero3"}) {
    std::vector<int> gpus;
    std::vector<double> step, eff, exposed, comm;
    double base = 0;
    for (int g = 8; g <= 1024; g *= 2) {
      const sim::Topology topo = sim::topology_preset(std::to_string(g / 8) + "x8xH100-IB");
      const sim::StepEstimate e = sim::estimate_step(topo, s, params, tokens, g);
      if (g == 8) base = e.total;
      gpus.push_back(g);
      step.push_back(e.total);
      eff.push_back(base / e.total);
      exposed.push_back(e.exposed);
      comm.push_back(e.comm);
    }
    auto list = [](const auto& v, const char* fmt) {
      std::string out = "[";
      char buf[64];
      for (size_t i = 0; i < v.size(); ++i) {
        std::snprintf(buf, sizeof buf, fmt, v[i]);
        out += (i ? "," : "") + std::string(buf);
      }
      return out + "]";
    };
    std::printf("{\"bench\":\"scaling\",\"params\":%.0f,\"tokens_per_gpu\":%.0f,\"topology\":\"Nx8xH100-IB\",\"strategy\":\"%s\","
                "\"gpus\":%s,\"step_s\":%s,\"comm_s\":%s,\"exposed_comm_s\":%s,\"efficiency\":%s}\n",
                params, tokens, s, list(gpus, "%d").c_str(), list(step, "%.4f").c_str(), list(comm, "%.4f").c_str(),
                list(exposed, "%.4f").c_str(),
                list(eff, "%.3f").c_str());
  }
  return 0;
}
