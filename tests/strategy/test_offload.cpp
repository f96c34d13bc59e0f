// Optimizer offload (issue 37, docs/memory.md "Offload"): the optimizer's state and master
// weights in host memory give the same weights as without, bit for bit, under every strategy,
// optimizer, accumulation, clipping and precision; the simulator counts the device's and the
// host's memory apart and charges the transfers over the topology's host link; a model that
// runs out of device memory trains with offload; checkpoints resume across offload.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <filesystem>
#include <sstream>

#include "../sim/common.h"
#include "runtime/runtime.h"

namespace accel::sim {
namespace {

enum class Opt { SGD, AdamW, Adafactor };

const char* opt_name(Opt o) { return o == Opt::SGD ? "sgd" : o == Opt::AdamW ? "adamw" : "adafactor"; }

std::shared_ptr<Optimizer> make(const std::shared_ptr<Model>& m, Opt o) {
  if (o == Opt::SGD) {
    SGDConfig c;
    c.lr = 0.05;
    c.momentum = 0.9;
    c.weight_decay = 1e-3;
    return std::make_shared<Optimizer>(m, c);
  }
  if (o == Opt::AdamW) {
    AdamWConfig c;
    c.lr = 1e-2;
    return std::make_shared<Optimizer>(m, c);
  }
  return std::make_shared<Optimizer>(m, AdafactorConfig{});
}

struct Case {
  Strategy strategy = Strategy::DDP;
  Opt opt = Opt::AdamW;
  Precision precision = Precision::No;
  int accumulation = 1;
  bool clip = false;
  int ranks = 2;
  std::vector<int64_t> sizes = {16, 32, 32, 5};
  uint64_t device_capacity = 0;
  int steps = 4;
  std::string topology = "8xH100";
  bool parameters = false;  // with offload: Offload::Parameters (ZeRO-3) instead of Optimizer
  int64_t rows = 96, batch = 4;  // the data set's rows, a micro-batch's
  bool trace = false;            // keep the run's Chrome trace
};

struct Outcome {
  std::vector<torch::Tensor> params;  // rank 0's, whole
  RunReport report;
  std::string trace;  // Case::trace: the timeline's JSON
};

// Rank 0's events on a lane of a trace (chrome_trace_json: one event a line): [start, end) in us.
std::vector<std::pair<double, double>> lane_events(const std::string& trace, int lane, const std::string& name = "") {
  std::vector<std::pair<double, double>> out;
  std::istringstream in(trace);
  std::string line;
  const std::string where = "\"pid\":0,\"tid\":" + std::to_string(lane) + ",";
  auto number = [&](const std::string& key) {
    const size_t at = line.find("\"" + key + "\":");
    return at == std::string::npos ? -1.0 : std::stod(line.substr(at + key.size() + 3));
  };
  while (std::getline(in, line))
    if (line.find("\"ph\":\"X\"") != std::string::npos && line.find(where) != std::string::npos &&
        (name.empty() || line.find("\"name\":\"" + name + "\"") != std::string::npos))
      out.emplace_back(number("ts"), number("ts") + number("dur"));
  return out;
}

// `steps` optimizer steps of an MLP on simulated ranks; with `save` the state is saved after
// them, with `load` restored before them.
Outcome train(const Case& s, bool offload, const std::string& save = "", const std::string& load = "") {
  WorldOptions wo = world(s.ranks, 30.0);
  wo.device_capacity = s.device_capacity;
  wo.topology = s.topology;
  wo.record_trace = s.trace;
  World w(wo);
  auto gen = at::make_generator<at::CPUGeneratorImpl>(11);
  auto X = torch::randn({s.rows, s.sizes.front()}, gen);
  auto Y = torch::randint(0, s.sizes.back(), {s.rows}, gen, torch::kLong);
  Outcome out;
  std::vector<std::vector<torch::Tensor>> per_rank(static_cast<size_t>(s.ranks));
  out.report = w.run([&](Rank& rk) {
    Options o;
    o.seed = 7;
    o.device = DeviceKind::CPU;
    o.strategy = s.ranks > 1 ? s.strategy : Strategy::None;
    o.precision = s.precision;
    o.gradient_accumulation_steps = s.accumulation;
    o.bucket_bytes = 4096;
    o.offload = offload ? (s.parameters ? Offload::Parameters : Offload::Optimizer) : Offload::None;
    std::shared_ptr<comm::Communicator> c(&rk.comm(), [](comm::Communicator*) {});
    Accelerator acc(o, c);
    MLPConfig cfg;
    cfg.sizes = s.sizes;
    std::shared_ptr<Model> model = make_mlp(cfg, acc.generator());
    auto opt = make(model, s.opt);
    DataLoaderConfig lc;
    lc.batch_size = s.batch;
    auto loader = std::make_shared<DataLoader>(X, Y, lc);
    acc.prepare(model, opt, nullptr, loader);
    if (!load.empty()) acc.load_state(load);
    const int64_t target = acc.optimizer_steps() + s.steps;
    while (acc.optimizer_steps() < target) {
      auto b = acc.next_batch(*loader);
      if (!b) continue;
      acc.backward(cross_entropy(acc.forward(*model, {b->inputs}), b->targets));
      if (s.clip) acc.clip_grad_norm(0.2);
      acc.step();
    }
    if (!save.empty()) acc.save_state(save);
    per_rank[static_cast<size_t>(rk.rank())] = acc.full_parameters(*model);
  });
  if (out.report.ok()) out.params = per_rank[0];
  if (s.trace) out.trace = w.trace_json();
  return out;
}

bool same(const std::vector<torch::Tensor>& a, const std::vector<torch::Tensor>& b) {
  if (a.size() != b.size() || a.empty()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (!torch::equal(a[i], b[i])) return false;
  return true;
}

// Offload changes where the state lives and adds copies, not the arithmetic: the weights
// after every step equal those without it, bit for bit.
TEST(Offload, SameWeightsBitForBitUnderEveryStrategy) {
  int cases = 0;
  for (Strategy st : {Strategy::None, Strategy::DDP, Strategy::Zero1, Strategy::Zero2, Strategy::Zero3})
    for (Opt op : {Opt::SGD, Opt::AdamW, Opt::Adafactor})
      for (Precision pr : {Precision::No, Precision::BF16, Precision::FP16}) {
        Case s;
        s.strategy = st;
        s.ranks = st == Strategy::None ? 1 : 2;
        s.opt = op;
        s.precision = pr;
        s.accumulation = op == Opt::SGD ? 2 : 1;
        s.clip = op != Opt::Adafactor;
        const std::string what = std::string(strategy_name(st)) + " " + opt_name(op) + " precision " +
                                 std::to_string(static_cast<int>(pr));
        Outcome plain = train(s, false), off = train(s, true);
        ASSERT_TRUE(plain.report.ok()) << what << ": " << plain.report.first_error();
        ASSERT_TRUE(off.report.ok()) << what << ": " << off.report.first_error();
        EXPECT_TRUE(same(plain.params, off.params)) << what;
        // the state moved: less device memory, host memory used, transfers charged
        EXPECT_LT(off.report.ranks[0].peak_bytes, plain.report.ranks[0].peak_bytes) << what;
        EXPECT_EQ(plain.report.ranks[0].host_peak_bytes, 0u) << what;
        EXPECT_GT(off.report.ranks[0].host_peak_bytes, 0u) << what;
        EXPECT_GT(off.report.ranks[0].host_transfer_bytes, 0u) << what;
        EXPECT_EQ(plain.report.ranks[0].host_transfer_bytes, 0u) << what;
        ++cases;
      }
  std::printf("[ offload ] %d cases (no strategy, DDP, ZeRO 1-3 x SGD, AdamW, Adafactor x fp32, bf16, fp16): "
              "weights equal bit for bit with and without offload\n", cases);
}

// Where the bytes go, AdamW on 2 ranks under DDP (Psi fp32 parameters): without offload the
// device holds weights, gradients and two moments (16 Psi); with it the moments and the fp32
// copies of the step are the host's (the device keeps about 8 Psi). The transfers per step:
// the gradient and the weight down, the weight back (12 Psi bytes), over the 8xH100 preset's
// PCIe 5.0 x16 link at 63 GB/s.
TEST(Offload, DeviceMemoryMovesToTheHost) {
  Case s;
  s.sizes = {256, 256, 256, 256, 256};
  s.steps = 2;
  Outcome plain = train(s, false), off = train(s, true);
  ASSERT_TRUE(plain.report.ok() && off.report.ok()) << plain.report.first_error() << off.report.first_error();
  const double psi = 4.0 * (256 * 256 + 256);
  const RankReport &p = plain.report.ranks[0], &o = off.report.ranks[0];
  std::printf("[ offload ] DDP AdamW, Psi = %.0f: device peak %.2f MiB -> %.2f MiB (%.1f -> %.1f bytes a parameter), "
              "host peak %.2f MiB (%.1f), %.2f MiB moved in %.3f ms of simulated time\n",
              psi, p.peak_bytes / 1048576.0, o.peak_bytes / 1048576.0, p.peak_bytes / psi, o.peak_bytes / psi,
              o.host_peak_bytes / 1048576.0, o.host_peak_bytes / psi, o.host_transfer_bytes / 1048576.0,
              o.host_transfer_seconds * 1e3);
  EXPECT_GT(p.peak_bytes / psi, 15.0);
  EXPECT_LT(o.peak_bytes / psi, 12.5);
  EXPECT_GE(o.host_peak_bytes / psi, 8.0);
  // 2 steps x 12 bytes a parameter (gradient down, weight down and back)
  EXPECT_DOUBLE_EQ(static_cast<double>(o.host_transfer_bytes), 2 * 12 * psi);
  EXPECT_NEAR(o.host_transfer_seconds, static_cast<double>(o.host_transfer_bytes) / 63e9, 1e-12);
  EXPECT_GT(o.virtual_seconds, p.virtual_seconds);
}

// On Grace Hopper (the 4xGH200 preset) the host is across NVLink-C2C, 450 GB/s a direction:
// the same bytes move 450/63 = 7.1 times faster than over the H100 presets' PCIe 5.0 x16.
TEST(Offload, GraceHopperMovesTheSameBytesOverNVLinkC2C) {
  Case s;
  s.sizes = {256, 256, 256, 256, 256};
  s.steps = 2;
  Outcome pcie = train(s, true);
  s.topology = "4xGH200";
  Outcome c2c = train(s, true), plain = train(s, false);
  ASSERT_TRUE(pcie.report.ok() && c2c.report.ok() && plain.report.ok()) << c2c.report.first_error();
  const RankReport &a = pcie.report.ranks[0], &b = c2c.report.ranks[0];
  EXPECT_EQ(a.host_transfer_bytes, b.host_transfer_bytes);
  EXPECT_EQ(a.host_peak_bytes, b.host_peak_bytes);
  EXPECT_NEAR(b.host_transfer_seconds, static_cast<double>(b.host_transfer_bytes) / 450e9, 1e-12);
  EXPECT_NEAR(a.host_transfer_seconds / b.host_transfer_seconds, 450.0 / 63.0, 1e-9);
  // the offload's cost on the clock, what it adds to the plain run's: the weights' 8 bytes a
  // parameter at the step, and what the gradients' copies did not hide behind the backward
  const double added = b.virtual_seconds - plain.report.ranks[0].virtual_seconds;
  const double psi = 4.0 * (256 * 256 + 256);
  EXPECT_GE(added, 2 * 8 * psi / 450e9 - 1e-12);
  EXPECT_LT(added, b.host_transfer_seconds);
  std::printf("[ offload ] %.2f MiB moved: %.3f ms over PCIe 5.0 x16 (8xH100), %.4f ms over NVLink-C2C (4xGH200)\n",
              b.host_transfer_bytes / 1048576.0, a.host_transfer_seconds * 1e3, b.host_transfer_seconds * 1e3);
}

// The gradients go to the host bucket by bucket as they are reduced (one process: as each
// is complete), beside the backward (DeepSpeed's overlap): on the clock, the step waits only
// for what the backward and its collectives did not hide. Every strategy on 8xH100 (PCIe 5.0
// x16 to the host, 63 GB/s), micro-batches of 2,048 rows (8,192 on one process) so that the
// backward's compute is comparable with the copies: the run takes less than the plain run
// plus all its transfers less half the gradients', and (but under ZeRO-3, whose gathers from
// the host wait for the link too) at least the plain run plus the copies at the step (the
// weights' 8 bytes a parameter); the trace has the copies on a "host link" lane, beside the
// backward's compute or collectives.
TEST(Offload, GradientCopiesOverlapTheBackward) {
  for (Strategy st : {Strategy::None, Strategy::DDP, Strategy::Zero1, Strategy::Zero2, Strategy::Zero3}) {
    Case s;
    s.strategy = st;
    s.ranks = st == Strategy::None ? 1 : 2;
    s.sizes = {256, 256, 256, 256, 256};
    s.steps = 2;
    s.batch = st == Strategy::None ? 8192 : 2048;  // (one process has no collectives to hide copies behind)
    s.rows = 2 * s.batch * s.ranks;
    s.trace = true;
    Outcome plain = train(s, false), off = train(s, true);
    ASSERT_TRUE(plain.report.ok() && off.report.ok()) << off.report.first_error();
    const RankReport &p = plain.report.ranks[0], &o = off.report.ranks[0];
    const double added = o.virtual_seconds - p.virtual_seconds;
    // the gradients' bytes: 4 a parameter (fp32), each rank's share under ZeRO
    const double psi = 4.0 * (256 * 256 + 256), grads = 2 * 4 * psi / (st == Strategy::None || st == Strategy::DDP ? 1 : 2);
    const double serial = (static_cast<double>(o.host_transfer_bytes) - grads) / 63e9;
    std::printf("[ offload ] %s: %.2f MiB moved in %.4f ms of link time, %.4f ms added to the step (%.4f ms can overlap)\n",
                strategy_name(st), o.host_transfer_bytes / 1048576.0, o.host_transfer_seconds * 1e3, added * 1e3,
                grads / 63e9 * 1e3);
    EXPECT_LT(added, o.host_transfer_seconds - 0.5 * grads / 63e9) << strategy_name(st);  // half of them hidden, at least
    if (st != Strategy::Zero3) {
      EXPECT_GE(added, serial - 1e-12) << strategy_name(st);
    } else {
      EXPECT_GT(added, 0.0);
    }
    // on the timeline: the copies on the host link's lane, one at least while the backward
    // computes or its collectives run
    const auto copies = lane_events(off.trace, 2);
    auto backward = lane_events(off.trace, 0, "backward");
    for (const auto& c : lane_events(off.trace, 1)) backward.push_back(c);
    EXPECT_NE(off.trace.find("\"name\":\"host link\""), std::string::npos) << strategy_name(st);
    EXPECT_EQ(plain.trace.find("host link"), std::string::npos);
    bool beside = false;
    for (const auto& c : copies)
      for (const auto& b : backward) beside = beside || (c.first < b.second && b.first < c.second);
    EXPECT_TRUE(beside) << strategy_name(st) << ": " << copies.size() << " copies, " << backward.size()
                        << " backward and collective events";
  }
}

// A budget between the two: the plain run fails with the simulator's CUDA out-of-memory, the
// offloaded one trains within it, under DDP and ZeRO-1.
TEST(Offload, OutOfMemoryWithoutTrainsWith) {
  for (Strategy st : {Strategy::DDP, Strategy::Zero1}) {
    Case s;
    s.strategy = st;
    s.sizes = {256, 256, 256, 256, 256};
    s.steps = 2;
    Outcome free_plain = train(s, false), free_off = train(s, true);
    ASSERT_TRUE(free_plain.report.ok() && free_off.report.ok());
    const uint64_t lo = free_off.report.ranks[0].peak_bytes, hi = free_plain.report.ranks[0].peak_bytes;
    ASSERT_LT(lo, hi);
    s.device_capacity = (lo + hi) / 2;
    Outcome plain = train(s, false), off = train(s, true);
    EXPECT_FALSE(plain.report.ok()) << strategy_name(st);
    EXPECT_NE(plain.report.first_error().find("CUDA out of memory"), std::string::npos) << plain.report.first_error();
    ASSERT_TRUE(off.report.ok()) << strategy_name(st) << ": " << off.report.first_error();
    for (const auto& r : off.report.ranks) EXPECT_LE(r.peak_bytes, s.device_capacity);
    EXPECT_TRUE(same(off.params, free_plain.params)) << strategy_name(st);
    std::printf("[ offload ] %s under a %.2f MiB device budget: without offload %s; with it, peak %.2f MiB\n",
                strategy_name(st), s.device_capacity / 1048576.0, "CUDA out of memory",
                off.report.ranks[0].peak_bytes / 1048576.0);
  }
}

// The checkpoint format does not change: a run saved with offload resumes without it and the
// reverse, each giving the uninterrupted run's weights bit for bit.
TEST(Offload, CheckpointsResumeAcrossOffload) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("accel_offload_ckpt_" + std::to_string(::getpid()));
  for (Strategy st : {Strategy::DDP, Strategy::Zero2, Strategy::Zero3}) {
    Case s;
    s.strategy = st;
    s.steps = 6;
    Outcome whole = train(s, false);
    ASSERT_TRUE(whole.report.ok()) << whole.report.first_error();
    s.steps = 3;
    for (bool first_offloaded : {true, false}) {
      fs::remove_all(dir);
      Outcome a = train(s, first_offloaded, (dir / "ckpt").string());
      ASSERT_TRUE(a.report.ok()) << a.report.first_error();
      Outcome b = train(s, !first_offloaded, "", (dir / "ckpt").string());
      ASSERT_TRUE(b.report.ok()) << b.report.first_error();
      EXPECT_TRUE(same(b.params, whole.params)) << strategy_name(st) << (first_offloaded ? ": saved with offload"
                                                                                         : ": resumed with offload");
    }
  }
  // ZeRO-3 with its bf16 shard offloaded: saved with it, resumed without, and the reverse
  Case p;
  p.strategy = Strategy::Zero3;
  p.precision = Precision::BF16;
  p.parameters = true;
  p.steps = 6;
  Outcome whole = train(p, false);
  ASSERT_TRUE(whole.report.ok()) << whole.report.first_error();
  p.steps = 3;
  for (bool first_offloaded : {true, false}) {
    fs::remove_all(dir);
    Outcome a = train(p, first_offloaded, (dir / "ckpt").string());
    ASSERT_TRUE(a.report.ok()) << a.report.first_error();
    Outcome b = train(p, !first_offloaded, "", (dir / "ckpt").string());
    ASSERT_TRUE(b.report.ok()) << b.report.first_error();
    EXPECT_TRUE(same(b.params, whole.params)) << (first_offloaded ? "parameters: saved with offload"
                                                                  : "parameters: resumed with offload");
  }
  fs::remove_all(dir);
}

// Host memory has a budget of its own: over it, the offloaded state fails naming host memory.
TEST(Offload, HostBudgetIsItsOwn) {
  WorldOptions wo = world(1, 30.0);
  wo.host_capacity = 1024;
  World w(wo);
  RunReport rep = w.run([&](Rank&) {
    Options o;
    o.device = DeviceKind::CPU;
    o.offload = Offload::Optimizer;
    Accelerator acc(o);
    MLPConfig cfg;
    cfg.sizes = {64, 64, 4};
    std::shared_ptr<Model> model = make_mlp(cfg, acc.generator());
    auto opt = make(model, Opt::AdamW);
    acc.prepare(model, opt, nullptr, nullptr);
    auto x = torch::randn({4, 64});
    acc.backward(cross_entropy(acc.forward(*model, {x}), torch::zeros({4}, torch::kLong)));
    acc.step();
  });
  ASSERT_FALSE(rep.ok());
  EXPECT_NE(rep.first_error().find("host out of memory"), std::string::npos) << rep.first_error();
}

// Parameter offload under ZeRO-3 (fp32: the shard is the master): the same weights bit for
// bit as without offload and as with the optimizer's; each unit's shard goes to the device
// for its forward's and its backward's gathers (2 x 4 bytes of the rank's shard a step), its
// gradient to the host (4 bytes), and no weight comes back after the step. Another strategy
// is refused.
TEST(Offload, ParametersUnderZeRO3) {
  Case s;
  s.strategy = Strategy::Zero3;
  s.sizes = {32, 64, 64, 8};
  s.steps = 3;
  Outcome plain = train(s, false), opt = train(s, true);
  s.parameters = true;
  Outcome par = train(s, true);
  ASSERT_TRUE(plain.report.ok() && opt.report.ok() && par.report.ok()) << par.report.first_error();
  ASSERT_EQ(plain.params.size(), par.params.size());
  for (size_t i = 0; i < plain.params.size(); ++i) {
    EXPECT_TRUE(torch::equal(plain.params[i], par.params[i])) << i;
    EXPECT_TRUE(torch::equal(opt.params[i], par.params[i])) << i;
  }
  const double shard = (32 * 64 + 64 + 64 * 64 + 64 + 64 * 8 + 8) / 2.0;  // the rank's elements, about
  const RankReport& r = par.report.ranks[0];
  EXPECT_NEAR(static_cast<double>(r.host_transfer_bytes) / s.steps, 3 * 4 * shard, 3 * 4 * 8.0 * 3);  // units' padding
  EXPECT_EQ(r.host_transfer_bytes, opt.report.ranks[0].host_transfer_bytes);  // fp32: optimizer offload is the same
  EXPECT_GT(r.host_peak_bytes, 0u);
  // bf16 mixed precision (16-bit working weights, an fp32 master): the bf16 shard moves to the
  // host, each gather reads it there (2 bytes), the gradient goes down in 16 bits (2 bytes); SGD,
  // AdamW and Adafactor, with fp16's loss scaling too, all to the same weights bit for bit
  for (Precision pr : {Precision::BF16, Precision::FP16})
    for (Opt op : {Opt::SGD, Opt::AdamW, Opt::Adafactor}) {
      Case h = s;
      h.precision = pr;
      h.opt = op;
      h.parameters = false;
      Outcome hp = train(h, false), ho = train(h, true);
      h.parameters = true;
      Outcome hq = train(h, true);
      ASSERT_TRUE(hp.report.ok() && ho.report.ok() && hq.report.ok()) << hq.report.first_error();
      EXPECT_TRUE(same(hp.params, hq.params)) << static_cast<int>(pr) << " " << static_cast<int>(op);
      const RankReport& q = hq.report.ranks[0];
      const RankReport& oo = ho.report.ranks[0];
      // instead of the updated weight back (2 bytes), two gathers' shards up (2 x 2)
      EXPECT_NEAR((static_cast<double>(q.host_transfer_bytes) - static_cast<double>(oo.host_transfer_bytes)) / h.steps,
                  2 * shard, 2 * 8.0 * 3);
      if (op != Opt::Adafactor) {  // (whose offloaded step reads the weight too)
        EXPECT_NEAR(static_cast<double>(q.host_transfer_bytes) / h.steps, 3 * 2 * shard, 3 * 2 * 8.0 * 3);
      }
      // the 16-bit shard left the device for the host: 2 bytes per element
      EXPECT_NEAR(static_cast<double>(q.host_peak_bytes) - static_cast<double>(oo.host_peak_bytes), 2 * shard, 2 * 8.0 * 3);
      EXPECT_LT(q.peak_bytes, oo.peak_bytes);
    }
  s.strategy = Strategy::DDP;
  Outcome ddp = train(s, true);
  ASSERT_FALSE(ddp.report.ok());
  EXPECT_NE(ddp.report.first_error().find("only ZeRO-3"), std::string::npos) << ddp.report.first_error();
}

TEST(Offload, RefusesAnOptimizerThatNeedsWholeTensors) {
  Options o;
  o.device = DeviceKind::CPU;
  o.offload = Offload::Optimizer;
  Accelerator acc(o);
  MLPConfig cfg;
  cfg.sizes = {8, 4};
  std::shared_ptr<Model> model = make_mlp(cfg, acc.generator());
  auto opt = std::make_shared<Optimizer>(model, LAMBConfig{});
  try {
    acc.prepare(model, opt, nullptr, nullptr);
    ADD_FAILURE() << "LAMB was prepared with offload";
  } catch (const Error& e) {
    EXPECT_EQ(e.status(), Status::Unsupported);
    EXPECT_NE(std::string(e.what()).find("LAMB"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace accel::sim
