// Checkpoints: exact resume under every strategy, resharding, project directories, and
// hostile checkpoint directories. Multi-rank cases run on the simulator.
#include <gtest/gtest.h>
#include <torch/script.h>
#include <torch/torch.h>
#include <unistd.h>
#include <zlib.h>

#include <signal.h>
#include <sys/wait.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
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

// Saved on 4 ranks under ZeRO-2, loaded on 1, 2 and 3 ranks under other strategies: the
// weights arrive whole, training goes on; on 4 ranks under DDP the continuation follows
// the straight ZeRO-2 run (the optimizer state moved from shards to whole tensors).
TEST(Resharding, AnyWorldSizeAnyStrategy) {
  const fs::path dir = scratch("reshard");
  RunOut saved = run(RunSpec{Strategy::Zero2, Precision::No, 4, 7, dir.string(), "", ""});
  ASSERT_TRUE(saved.report.ok()) << saved.report.first_error();
  for (auto [ranks, strategy] : std::vector<std::pair<int, Strategy>>{
           {1, Strategy::None}, {2, Strategy::Zero3}, {3, Strategy::DDP}, {2, Strategy::Zero1}}) {
    RunOut at_load = run(RunSpec{strategy, Precision::No, ranks, 7, "", dir.string(), ""});
    ASSERT_TRUE(at_load.report.ok()) << at_load.report.first_error();
    for (size_t i = 0; i < saved.params.size(); ++i)
      EXPECT_TRUE(torch::equal(at_load.params[i], saved.params[i])) << ranks << " ranks, parameter " << i;
    RunOut more = run(RunSpec{strategy, Precision::No, ranks, 10, "", dir.string(), ""});
    ASSERT_TRUE(more.report.ok()) << more.report.first_error();
    for (size_t i = 0; i < saved.params.size(); ++i) {
      EXPECT_TRUE(torch::isfinite(more.params[i]).all().item<bool>());
      EXPECT_FALSE(torch::equal(more.params[i], saved.params[i])) << "training went on";
    }
  }
  RunOut straight = run(RunSpec{Strategy::Zero2, Precision::No, 4, 14, "", "", ""});
  RunOut ddp = run(RunSpec{Strategy::DDP, Precision::No, 4, 14, "", dir.string(), ""});
  ASSERT_TRUE(straight.report.ok() && ddp.report.ok());
  for (size_t i = 0; i < straight.params.size(); ++i) {
    const double err = (ddp.params[i] - straight.params[i]).abs().max().item<double>() /
                       straight.params[i].abs().max().item<double>();
    EXPECT_LE(err, 1e-5) << "parameter " << i;
  }
  fs::remove_all(dir);
}

// ---------------------------------------------------------------------------------------
// One process: project directories and hostile checkpoints.

struct Single {
  std::unique_ptr<Accelerator> acc;
  std::shared_ptr<Model> model;
  std::shared_ptr<Optimizer> opt;
  std::shared_ptr<DataLoader> loader;
  explicit Single(std::vector<int64_t> sizes = {6, 8, 3}) {
    Options o;
    o.device = DeviceKind::CPU;
    o.seed = 3;
    acc = std::make_unique<Accelerator>(o);
    MLPConfig cfg;
    cfg.sizes = sizes;
    model = make_mlp(cfg, acc->generator());
    opt = std::make_shared<Optimizer>(model, AdamWConfig{1e-2});
    auto gen = at::make_generator<at::CPUGeneratorImpl>(2);
    DataLoaderConfig lc;
    lc.batch_size = 4;
    lc.shuffle = true;
    loader = std::make_shared<DataLoader>(torch::randn({32, sizes.front()}, gen),
                                          torch::randint(0, sizes.back(), {32}, gen, torch::kLong), lc);
    acc->prepare(model, opt, nullptr, loader);
  }
  void train(int steps) {
    const int64_t until = acc->optimizer_steps() + steps;
    while (acc->optimizer_steps() < until) {
      auto b = acc->next_batch(*loader);
      if (!b) continue;
      acc->backward(cross_entropy(acc->forward(*model, {b->inputs}), b->targets));
      acc->step();
    }
  }
  std::vector<torch::Tensor> weights() { return acc->full_parameters(*model); }
};

TEST(Project, AutomaticNamesTotalLimitAndLatest) {
  const fs::path proj = scratch("project");
  Single s;
  s.acc->set_project(ProjectConfig{proj.string(), 2});
  std::vector<std::string> dirs;
  for (int i = 0; i < 3; ++i) {
    s.train(1);
    dirs.push_back(s.acc->save_state(""));
  }
  EXPECT_EQ(fs::path(dirs[0]).filename(), "checkpoint_0");
  EXPECT_EQ(fs::path(dirs[2]).filename(), "checkpoint_2");
  EXPECT_FALSE(fs::exists(dirs[0])) << "the oldest goes beyond total_limit";
  EXPECT_TRUE(fs::exists(dirs[1]) && fs::exists(dirs[2]));
  EXPECT_FALSE(fs::exists(proj / "checkpoints" / ".checkpoint_0.deleting")) << "pruning leaves nothing behind";
  const auto w = s.weights();
  s.acc.reset();  // the run ends: the project is free for the next one
  // a temporary directory of a crashed save is not a checkpoint
  fs::create_directories(proj / "checkpoints" / ".checkpoint_3.tmp");
  fs::create_directories(proj / "checkpoints" / "checkpoint_9");  // no manifest: incomplete
  Single t;
  t.acc->set_project(ProjectConfig{proj.string(), 2});
  EXPECT_EQ(t.acc->load_state(""), dirs[2]);
  const auto v = t.weights();
  for (size_t i = 0; i < w.size(); ++i) EXPECT_TRUE(torch::equal(v[i], w[i]));
  EXPECT_EQ(t.acc->optimizer_steps(), 3);
  fs::remove_all(proj);
}

// One run per project: a second context on a project another one holds (in this process, then
// a process started through the C ABI) fails at once with InvalidState naming the holder; the
// lock goes with its holder (its context ended, its process killed with SIGKILL); the next
// save removes what dead runs and a pruning cut short left, and only that.
TEST(Project, OneRunPerProject) {
  const fs::path proj = scratch("one-run");
  auto contains = [](const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; };
  auto write_text = [](const fs::path& p, const std::string& s) { std::ofstream(p, std::ios::binary) << s; };
  auto refused = [&](Single& s, const std::string& pid) {
    try {
      s.acc->set_project(ProjectConfig{proj.string(), 0});
      ADD_FAILURE() << "a second run took the project";
    } catch (const Error& e) {
      EXPECT_EQ(e.status(), Status::InvalidState) << e.what();
      EXPECT_TRUE(contains(e.what(), "belongs to another run: pid " + pid + " on host ")) << e.what();
      EXPECT_TRUE(contains(e.what(), "(process 0 of 1) holds " + (proj / ".accel.lock").string())) << e.what();
    }
  };
  {
    Single a, b;
    a.acc->set_project(ProjectConfig{proj.string(), 0});
    a.acc->set_project(ProjectConfig{proj.string(), 0});  // again: still its own
    refused(b, std::to_string(getpid()));
  }
  // another process holds it (through the C ABI), until it is killed
  int out[2];
  ASSERT_EQ(pipe(out), 0);
  const pid_t holder = fork();
  if (holder == 0) {
    dup2(out[1], 1);
    setenv("ACCEL_CHECKPOINT_HOLD", "1", 1);
    execl(CHECKPOINT_CRASH, CHECKPOINT_CRASH, proj.c_str(), "1", static_cast<char*>(nullptr));
    _exit(127);
  }
  close(out[1]);
  char buf[16] = {0};
  ASSERT_GT(read(out[0], buf, sizeof buf - 1), 0);
  EXPECT_EQ(std::string(buf), "held\n");
  {
    Single c;
    refused(c, std::to_string(holder));
  }
  // a second run through the C ABI fails with ACCEL_ERR_INVALID_STATE, naming the first
  // (the helper returns at its first error without freeing its handles: no leak report then)
  const std::string cmd = "ASAN_OPTIONS=\"${ASAN_OPTIONS:-}:detect_leaks=0\" " + std::string(CHECKPOINT_CRASH) + " " +
                          proj.string() + " 1 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  ASSERT_NE(p, nullptr);
  std::string said;
  for (int ch; (ch = fgetc(p)) != EOF;) said += static_cast<char>(ch);
  const int rc = pclose(p);
  EXPECT_EQ(WEXITSTATUS(rc), 1) << said;
  EXPECT_TRUE(contains(said, "ACCEL_ERR_INVALID_STATE")) << said;
  EXPECT_TRUE(contains(said, "belongs to another run: pid " + std::to_string(holder))) << said;
  kill(holder, SIGKILL);
  int st = 0;
  waitpid(holder, &st, 0);
  close(out[0]);
  // the kernel released it with the process: the project is free at once
  const fs::path ck = proj / "checkpoints";
  fs::create_directories(ck / ".checkpoint_4.tmp");  // a dead run's save
  write_text(ck / ".checkpoint_4.tmp" / "rank-0.json", "{}");
  fs::create_directories(ck / ".checkpoint_1.deleting");  // a pruning cut short
  write_text(ck / ".checkpoint_1.deleting" / "model.safetensors", "x");
  fs::create_directories(ck / ".checkpoint_5.tmp");  // not accel's: kept
  write_text(ck / ".checkpoint_5.tmp" / "notes.txt", "mine");
  Single d;
  d.acc->set_project(ProjectConfig{proj.string(), 0});
  d.train(1);
  d.acc->save_state("");
  EXPECT_FALSE(fs::exists(ck / ".checkpoint_4.tmp"));
  EXPECT_FALSE(fs::exists(ck / ".checkpoint_1.deleting"));
  EXPECT_TRUE(fs::exists(ck / ".checkpoint_5.tmp" / "notes.txt"));
  fs::remove_all(proj);
}

// Every corruption: the right status, a message naming the file and the problem, and the
// context exactly as before the failed load.
struct Corruption {
  const char* name;
  std::function<void(const fs::path&)> apply;
  Status status;
  const char* message;
};

void write_text(const fs::path& p, const std::string& s) {
  std::ofstream f(p, std::ios::binary | std::ios::trunc);
  f << s;
}

std::string read_text(const fs::path& p) { return safetensors::read_file(p.string()); }

// Rewrites a file and its manifest entry (size, CRC) so that only the content is wrong.
void replace_checked(const fs::path& dir, const std::string& file, const std::string& bytes) {
  write_text(dir / file, bytes);
  auto m = nlohmann::json::parse(read_text(dir / "manifest.json"));
  char crc[16];
  std::snprintf(crc, sizeof crc, "%08lx",
                static_cast<unsigned long>(::crc32(::crc32(0L, Z_NULL, 0), reinterpret_cast<const Bytef*>(bytes.data()),
                                                   static_cast<uInt>(bytes.size()))));
  m["files"][file] = {{"bytes", bytes.size()}, {"crc32", crc}};
  write_text(dir / "manifest.json", m.dump());
}

// Rewrites rank-0.json through `edit` and makes its manifest entry consistent.
template <class F>
void edit_rank(const fs::path& dir, F edit) {
  auto r = nlohmann::json::parse(read_text(dir / "rank-0.json"));
  edit(r);
  replace_checked(dir, "rank-0.json", r.dump());
}

std::string header_with(const std::string& json_header, size_t data_bytes) {
  std::string out(8, '\0');
  uint64_t n = json_header.size();
  for (int i = 0; i < 8; ++i) out[static_cast<size_t>(i)] = static_cast<char>((n >> (8 * i)) & 0xff);
  return out + json_header + std::string(data_bytes, '\0');
}

TEST(Hostile, EveryCorruptionIsRefusedAndNothingLoads) {
  const fs::path good = scratch("good");
  Single s;
  s.train(2);
  s.acc->save_state(good.string());
  std::vector<Corruption> cases = {
      {"missing file", [](const fs::path& d) { fs::remove(d / "optimizer.safetensors"); }, Status::IO,
       "optimizer.safetensors: missing"},
      {"missing manifest", [](const fs::path& d) { fs::remove(d / "manifest.json"); }, Status::IO, "manifest.json: missing"},
      {"truncated", [](const fs::path& d) {
         auto b = read_text(d / "model.safetensors");
         write_text(d / "model.safetensors", b.substr(0, b.size() / 2));
       }, Status::Format, "model.safetensors: "},
      {"flipped byte", [](const fs::path& d) {
         auto b = read_text(d / "model.safetensors");
         b[b.size() - 3] ^= 0x40;
         write_text(d / "model.safetensors", b);
       }, Status::Format, "does not match the manifest"},
      {"header length past the end", [](const fs::path& d) {
         replace_checked(d, "model.safetensors", header_with("{}", 0).replace(0, 8, std::string("\xff\xff\x00\x00\x00\x00\x00\x00", 8)));
       }, Status::Format, "runs past the end of the file"},
      {"huge header", [](const fs::path& d) {
         replace_checked(d, "model.safetensors", std::string("\x00\x00\x00\x00\x01\x00\x00\x00", 8) + "{}");
       }, Status::Format, "exceeds the"},
      {"offsets out of range", [](const fs::path& d) {
         replace_checked(d, "model.safetensors",
                         header_with(R"({"layers.0.weight":{"dtype":"F32","shape":[8,6],"data_offsets":[0,400]}})", 192));
       }, Status::Format, "out of range"},
      {"overlapping offsets", [](const fs::path& d) {
         replace_checked(d, "model.safetensors",
                         header_with(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})", 12));
       }, Status::Format, "overlaps"},
      {"unknown dtype", [](const fs::path& d) {
         replace_checked(d, "model.safetensors", header_with(R"({"a":{"dtype":"F13","shape":[1],"data_offsets":[0,4]}})", 4));
       }, Status::Format, "unknown dtype 'F13'"},
      {"shape x dtype != bytes", [](const fs::path& d) {
         replace_checked(d, "model.safetensors", header_with(R"({"a":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", 8));
       }, Status::Format, "shape x dtype is 12 bytes but data_offsets span 8"},
      {"tensor missing", [](const fs::path& d) {
         replace_checked(d, "model.safetensors", header_with(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", 4));
       }, Status::Format, "no tensor 'layers.0.weight'"},
      {"newer format", [](const fs::path& d) {
         auto m = nlohmann::json::parse(read_text(d / "manifest.json"));
         m["format_version"] = 2;
         m["accel_version"] = "9.0.0";
         write_text(d / "manifest.json", m.dump());
       }, Status::Format, "format version 2 (written by accel \"9.0.0\")"},
      {"not json", [](const fs::path& d) { write_text(d / "manifest.json", "{not json"); }, Status::Format, "not valid JSON"},
      // well-formed files that lie, their CRCs made consistent: refused before anything changes
      {"counter of the wrong JSON type", [](const fs::path& d) { edit_rank(d, [](auto& r) { r["optimizer_steps"] = "2"; }); },
       Status::Format, "rank-0.json: field 'optimizer_steps' must be an integer >= 0, got \"2\""},
      {"negative counter", [](const fs::path& d) { edit_rank(d, [](auto& r) { r["micro_steps"] = -4; }); },
       Status::Format, "field 'micro_steps' must be an integer >= 0, got -4"},
      {"missing key", [](const fs::path& d) { edit_rank(d, [](auto& r) { r.erase("loaders"); }); },
       Status::Format, "rank-0.json: field 'loaders' must be an array, got nothing (it is missing)"},
      {"fractional epoch", [](const fs::path& d) { edit_rank(d, [](auto& r) { r["loaders"][0]["epoch"] = 1.5; }); },
       Status::Format, "field 'loaders[0].epoch' must be an integer >= 0, got 1.5"},
      {"loss scale as a string", [](const fs::path& d) { edit_rank(d, [](auto& r) { r["loss_scale"] = "big"; }); },
       Status::Format, "field 'loss_scale' must be a finite number > 0"},
      {"generator state of the wrong size", [](const fs::path& d) {
         replace_checked(d, "rng-rank0.safetensors",
                         header_with(R"({"generator":{"dtype":"U8","shape":[16],"data_offsets":[0,16]},)"
                                     R"("default_generator":{"dtype":"U8","shape":[16],"data_offsets":[16,32]}})", 32));
       }, Status::Format, "rng-rank0.safetensors: tensor 'generator' holds 16 bytes"},
      {"world size as a string", [](const fs::path& d) {
         auto m = nlohmann::json::parse(read_text(d / "manifest.json"));
         m["world_size"] = "1";
         write_text(d / "manifest.json", m.dump());
       }, Status::Format, "manifest.json: field 'world_size' must be an integer in [1, 1048576], got \"1\""},
      {"a file name that leaves the directory", [](const fs::path& d) {
         auto m = nlohmann::json::parse(read_text(d / "manifest.json"));
         m["files"]["../model.safetensors"] = m["files"]["model.safetensors"];
         write_text(d / "manifest.json", m.dump());
       }, Status::Format, "field 'files' must be an object whose keys name checkpoint files"},
  };
  for (const auto& c : cases) {
    const fs::path bad = scratch(std::string("bad"));
    fs::copy(good, bad, fs::copy_options::recursive);
    c.apply(bad);
    Single t;
    t.train(1);
    const fs::path before = scratch("before"), after = scratch("after");
    t.acc->save_state(before.string());
    try {
      t.acc->load_state(bad.string());
      ADD_FAILURE() << c.name << ": loaded";
    } catch (const Error& e) {
      EXPECT_EQ(e.status(), c.status) << c.name << ": " << e.what();
      EXPECT_NE(std::string(e.what()).find(c.message), std::string::npos) << c.name << ": " << e.what();
      EXPECT_NE(std::string(e.what()).find(bad.string()), std::string::npos) << c.name << " names the file: " << e.what();
    }
    // the context is byte-identical: weights, optimizer state, counters, generators, data positions
    t.acc->save_state(after.string());
    for (const auto& e : fs::directory_iterator(before))
      EXPECT_EQ(read_text(e.path()), read_text(after / e.path().filename())) << c.name << ": " << e.path().filename();
    fs::remove_all(bad);
    fs::remove_all(before);
    fs::remove_all(after);
  }
  // a model of another shape
  Single other({6, 9, 3});
  try {
    other.acc->load_state(good.string());
    ADD_FAILURE() << "loaded into another shape";
  } catch (const Error& e) {
    EXPECT_EQ(e.status(), Status::InvalidArgument);
    EXPECT_NE(std::string(e.what()).find("'layers.0.weight' has shape [8,6] in the checkpoint, [9,6] in the model"),
              std::string::npos)
        << e.what();
  }
  fs::remove_all(good);
}

// A process killed at every point of a save (tests/checkpoint/checkpoint_crash.c, through the C ABI)
// leaves the previous checkpoint loadable and no half checkpoint that "the latest" picks.
TEST(Crash, KilledDuringASaveLeavesThePreviousCheckpoint) {
  const fs::path proj = scratch("crash");
  auto sh = [&](const std::string& env, int steps) {
    const std::string cmd = env + " " + CHECKPOINT_CRASH + " " + proj.string() + " " + std::to_string(steps) + " > /dev/null 2>&1";
    const int rc = std::system(cmd.c_str());
    return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
  };
  ASSERT_EQ(sh("", 2), 0);  // checkpoint_0 after 2 steps
  const fs::path first = proj / "checkpoints" / "checkpoint_0";
  ASSERT_TRUE(fs::exists(first / "manifest.json"));
  for (int k = 1; k <= 6; ++k) {
    ASSERT_EQ(sh("ACCEL_CHECKPOINT_CRASH_AT=" + std::to_string(k), 3), 86) << "crash point " << k;
    const fs::path second = proj / "checkpoints" / "checkpoint_1";
    Single t;
    t.acc->set_project(ProjectConfig{proj.string(), 0});
    const std::string loaded = t.acc->load_state("");
    if (k < 6) {  // before the rename: the new checkpoint does not exist
      EXPECT_EQ(loaded, first.string()) << "crash point " << k;
      EXPECT_FALSE(fs::exists(second)) << "crash point " << k;
      EXPECT_EQ(t.acc->optimizer_steps(), 2);
    } else {  // after it: complete and loadable
      EXPECT_EQ(loaded, second.string());
      EXPECT_EQ(t.acc->optimizer_steps(), 5);
      fs::remove_all(second);
    }
  }
  ASSERT_EQ(sh("", 3), 0);  // a later save cleans the leftover temporary directory
  EXPECT_TRUE(fs::exists(proj / "checkpoints" / "checkpoint_1" / "manifest.json"));
  EXPECT_FALSE(fs::exists(proj / "checkpoints" / ".checkpoint_1.tmp"));
  fs::remove_all(proj);
}

// `accel merge-weights` reassembles ZeRO's per-process ranges into one standard file.
TEST(MergeWeights, ConsolidatesAShardedCheckpoint) {
  const fs::path dir = scratch("merge"), out = scratch("merged.safetensors");
  RunOut saved = run(RunSpec{Strategy::Zero3, Precision::No, 3, 4, dir.string(), "", ""});
  ASSERT_TRUE(saved.report.ok()) << saved.report.first_error();
  ASSERT_FALSE(fs::exists(dir / "model.safetensors"));
  ASSERT_TRUE(fs::exists(dir / "model-rank2.safetensors"));
  const std::string cmd = std::string(ACCEL_TOOL) + " merge-weights " + dir.string() + " " + out.string() + " > /dev/null";
  ASSERT_EQ(std::system(cmd.c_str()), 0);
  const std::string bytes = safetensors::read_file(out.string());
  const auto h = safetensors::parse(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), out.string());
  const std::vector<std::string> names = {"layers.0.weight", "layers.0.bias", "layers.1.weight",
                                          "layers.1.bias",   "layers.2.weight", "layers.2.bias"};
  ASSERT_EQ(h.tensors.size(), names.size());
  for (size_t i = 0; i < names.size(); ++i) {
    const auto it = std::find_if(h.tensors.begin(), h.tensors.end(), [&](const auto& t) { return t.name == names[i]; });
    ASSERT_NE(it, h.tensors.end()) << names[i];
    EXPECT_EQ(it->shape, saved.params[i].sizes().vec());
    torch::Tensor t = torch::empty(it->shape, torch::kFloat);
    std::memcpy(t.data_ptr(), bytes.data() + h.data_start + it->begin, it->end - it->begin);
    EXPECT_TRUE(torch::equal(t, saved.params[i])) << names[i];
  }
  // a second merge replaces the earlier output; an output path holding a user's file is refused, the file kept
  ASSERT_EQ(std::system(cmd.c_str()), 0);
  const fs::path notes = fs::path(out).replace_filename("notes_" + std::to_string(::getpid()) + ".txt");
  { std::ofstream(notes) << "mine"; }
  EXPECT_NE(std::system((std::string(ACCEL_TOOL) + " merge-weights " + dir.string() + " " + notes.string() + " 2>/dev/null").c_str()), 0);
  EXPECT_EQ(read_text(notes), "mine");
  fs::remove(notes);
  // a corrupted shard is refused
  {
    auto b = safetensors::read_file((dir / "model-rank1.safetensors").string());
    b[b.size() - 1] ^= 1;
    std::ofstream f(dir / "model-rank1.safetensors", std::ios::binary | std::ios::trunc);
    f << b;
  }
  EXPECT_NE(std::system((cmd + " 2>/dev/null").c_str()), 0);
  fs::remove_all(dir);
  fs::remove(out);
}

// accel_save_model to ".pt": a TorchScript model trained under ZeRO-3 (weights sharded and
// freed between uses) exports as TorchScript with the trained weights; the MLP refuses.
TEST(Export, TorchScriptWithTheTrainedWeights) {
  torch::jit::Module m("Tiny");
  m.register_parameter("w", torch::full({4, 3}, 0.1), false);
  m.register_buffer("calls", torch::zeros({1}));
  m.define(R"(
def forward(self, x):
    return x.matmul(self.w)
)");
  const fs::path src = scratch("tiny.pt"), out = scratch("tiny_trained.pt");
  m.save(src.string());
  sim::WorldOptions wo;
  wo.world_size = 2;
  sim::World w(wo);
  std::vector<torch::Tensor> trained;
  auto rep = w.run([&](sim::Rank& rk) {
    Options o;
    o.device = DeviceKind::CPU;
    o.strategy = Strategy::Zero3;
    std::shared_ptr<comm::Communicator> c(&rk.comm(), [](comm::Communicator*) {});
    Accelerator acc(o, c);
    std::shared_ptr<Model> model = load_torchscript(src.string());
    auto opt = std::make_shared<Optimizer>(model, SGDConfig{0.1});
    acc.prepare(model, opt, nullptr, nullptr);
    for (int i = 0; i < 3; ++i) {
      auto x = torch::ones({2, 4}) * (rk.rank() + 1);
      acc.backward(mse(acc.forward(*model, {x}), torch::zeros({2, 3})));
      acc.step();
    }
    acc.save_model(*model, out.string());
    auto full = acc.full_parameters(*model);
    if (rk.rank() == 0) trained = full;
    MLPConfig cfg;
    cfg.sizes = {2, 2};
    auto mlp = make_mlp(cfg, acc.generator());
    try {
      acc.save_model(*mlp, (out.string() + ".mlp.pt"));
      ADD_FAILURE() << "the MLP exported as TorchScript";
    } catch (const Error& e) {
      EXPECT_EQ(e.status(), Status::Unsupported) << e.what();
    }
  });
  ASSERT_TRUE(rep.ok()) << rep.first_error();
  torch::jit::Module back = torch::jit::load(out.string());
  torch::Tensor wt = back.attr("w").toTensor();
  EXPECT_TRUE(torch::equal(wt, trained[0]));
  EXPECT_FALSE(torch::equal(wt, torch::full({4, 3}, 0.1))) << "trained";
  auto y = back.forward({torch::ones({1, 4})}).toTensor();
  EXPECT_TRUE(torch::allclose(y, torch::ones({1, 4}).matmul(trained[0])));
  fs::remove(src);
  fs::remove(out);
}

// Python's safetensors (numpy) loads accel's model.safetensors unchanged, with the values
// accel holds. Skipped where Python or the package is missing (scripts/test installs it).
TEST(Interop, PythonSafetensorsLoadsTheWeights) {
  const char* env = std::getenv("ACCEL_TEST_PYTHON");
  const std::string py = env && *env ? env : "python3";
  if (std::system((py + " -c 'import safetensors.numpy, numpy' > /dev/null 2>&1").c_str()) != 0)
    GTEST_SKIP() << py << " has no safetensors/numpy (pip install safetensors numpy)";
  const fs::path dir = scratch("interop");
  Single s;
  s.train(3);
  s.acc->save_state(dir.string());
  const auto w = s.weights();
  const auto& names = s.model->parameter_names();
  std::string script = "import sys, numpy as np\nfrom safetensors.numpy import load_file\nt = load_file(sys.argv[1])\nok = True\n";
  for (size_t i = 0; i < w.size(); ++i) {
    const fs::path raw = dir / ("raw" + std::to_string(i) + ".f32");
    std::ofstream f(raw, std::ios::binary);
    f.write(static_cast<const char*>(w[i].contiguous().data_ptr()), static_cast<std::streamsize>(w[i].numel() * 4));
    f.close();
    std::string shape;
    for (int64_t d : w[i].sizes()) shape += std::to_string(d) + ",";
    script += "ok &= t['" + names[i] + "'].dtype == np.float32 and np.array_equal(t['" + names[i] + "'], np.fromfile('" +
              raw.string() + "', dtype=np.float32).reshape((" + shape + ")))\n";
  }
  script += "print('python safetensors:', len(t), 'tensors,', 'equal' if ok else 'DIFFERENT')\nsys.exit(0 if ok and len(t) == " +
            std::to_string(w.size()) + " else 1)\n";
  {
    std::ofstream f(dir / "check.py");
    f << script;
  }
  EXPECT_EQ(std::system((py + " " + (dir / "check.py").string() + " " + (dir / "model.safetensors").string()).c_str()), 0);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace accel
