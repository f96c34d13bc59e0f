// bench_gloo_allreduce: accel's Gloo backend against raw c10d ProcessGroupGloo, the
// simulator and this machine's memcpy bound, on a float32 all-reduce (sum) across real
// processes.
//
// For each process count N (2 and 4) and size S (1, 4, 16, 64, 256 MiB; --quick: 1 and
// 16 MiB), one JSON line:
//
//   {"bench":"gloo_allreduce","procs":4,"bytes":16777216,"accel_s":…,"c10d_s":…,"sim_s":…,
//    "bound_s":…,"algbw_gbps":…,"busbw_gbps":…,"vs_c10d":…,"vs_memcpy_bound":…,…}
//
// accel_s: the Communicator that world::make_process_group makes for backend "gloo" (c10d's
//   ProcessGroupGloo behind accel's Work; its own TCPStore rendezvous), all_reduce in place
//   (send == recv), then wait().
// c10d_s: a c10d::ProcessGroupGloo made directly, with the options accel gives its own (one
//   worker thread, createDeviceForHostname("127.0.0.1"), a FileStore rendezvous), allreduce
//   of the same buffer, then wait(): the same engine with nothing of accel in between.
//   Both groups live in the same N worker processes (this executable re-run with a hidden
//   --gloo-worker flag), and every repetition runs one all-reduce of each, the side going
//   first alternating from repetition to repetition, so drift (the other core's load, the
//   CPU's clock) falls on both. The repetitions are split over 3 launches of fresh workers
//   (--launches; 2 with --quick), the groups made in alternating order, and pooled: where
//   the scheduler puts a group's threads holds for the process's life and can favour one
//   side for a whole launch. A repetition of one side is its group's barrier, then
//   ops_per_rep all-reduces back to back (16 of 1 MiB, 4 of 4 MiB, else 1: one repetition
//   moves >= 16 MiB), each waited on before the next, timed on every rank from the first
//   call to the last return of wait(); its time over ops_per_rep is one sample, the slowest
//   rank's; accel_s and c10d_s are the medians over the repetitions (after a warm-up).
//   Inputs are refilled before each repetition (rank r's element i is (r + 1) + (i % 8) / 4,
//   so every sum, and the sum times N after each further all-reduce, is exact) and every
//   element of every result is checked on every rank: a wrong value fails the benchmark.
//   vs_c10d_mean is the same ratio of the means, vs_c10d_min of the fastest repetitions
//   (with ACCEL_BENCH_DUMP set, every repetition's pair of times goes to stderr).
// sim_s: accel's simulator (sim::World, N ranks in this process, the engine's default
//   threads), the same in-place all-reduce, from the first rank's call to the last rank's
//   return (bench_sim_allreduce's definition), median, results checked likewise.
// bound_s: the memcpy bound. A ring all-reduce moves 2(N-1)/N·S bytes per rank (nccl-tests'
//   bus bytes); on one machine the N ranks' copies share its memory, so the bound is the
//   time this machine takes to memcpy N·2(N-1)/N·S = 2(N-1)·S bytes (each read once and
//   written once), timed here (with the machine's cores as threads and with one thread,
//   the faster median, as bench_sim_allreduce times its bound) on a buffer of that size, or
//   on 256 MiB scaled linearly when it is larger. Over TCP each byte is copied at least
//   twice (into the kernel and out of it) and reduced once, so no all-reduce of processes
//   on loopback comes near this bound: it says how far from the hardware the whole
//   stack is, not a target.
// algbw_gbps = S / accel_s and busbw_gbps = algbw·2(N-1)/N (nccl-tests' definitions, 1e9
//   bytes/s), c10d_* and sim_* the same for the other two; vs_c10d = c10d_s / accel_s,
//   accel's throughput over raw c10d's as DESIGN.md names it (higher is better; the target,
//   accel within 5% of c10d, is >= 0.95); vs_memcpy_bound = bound_s / accel_s, throughput
//   over the bound (as bench_sim_allreduce's).
//
// A last line, "gloo_allreduce_call", is what accel adds per call, free of the transfer's
// noise: both groups in this one process (a world of 1), blocks of 2,000 one-element
// all-reduces alternating; accel_us and c10d_us are the medians of the blocks' means, the
// *_min_us the fastest blocks', overhead_us = accel_us - c10d_us; every thread of both groups
// runs on one core (see call_cost).
//
//   bench_gloo_allreduce [--quick] [--procs 2,4] [--mib 1,4,16,64,256] [--reps K] [--launches L]
//                        [--warmup K] [--no-sim]
//
// Unknown options are ignored with a warning (scripts/bench passes its extra arguments to
// every benchmark).
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/csrc/distributed/c10d/FileStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>

#include <sched.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "bench/procs.h"
#include "comm/gloo/gloo.h"
#include "comm/guard.h"
#include "runtime/world.h"
#include "sim/world.h"

namespace {

using accel::comm::DataType;
using accel::comm::RedOp;
using bench::json_num;
using bench::median;
using bench::mono_s;

constexpr size_t kMiB = size_t(1) << 20;

float input_value(int rank, size_t i) { return static_cast<float>(rank + 1) + static_cast<float>(i % 8) * 0.25f; }
// After `ops` in-place all-reduces without a refill: the first sum times n^(ops-1), exact in
// float32 as long as ops <= max_ops(n).
float expected_value(int n, size_t i, int ops) {
  double v = static_cast<double>(n * (n + 1) / 2) + static_cast<double>(n) * static_cast<double>(i % 8) * 0.25;
  for (int k = 1; k < ops; ++k) v *= n;
  return static_cast<float>(v);
}
// The first sum has at most 7 significant bits (n <= 16); multiplying by a power of two is
// exact, by another n it adds log2(n) bits, and float32 holds 24.
int max_ops(int n) {
  if ((n & (n - 1)) == 0) return 16;
  return 1 + static_cast<int>(17.0 / std::log2(static_cast<double>(n)));
}

void fill(float* p, size_t count, int rank) {
  float pat[8];
  for (int m = 0; m < 8; ++m) pat[m] = input_value(rank, static_cast<size_t>(m));
  size_t i = 0;
  for (; i + 8 <= count; i += 8)
    for (int m = 0; m < 8; ++m) p[i + m] = pat[m];
  for (; i < count; ++i) p[i] = pat[i % 8];
}

// "" when every element is the sum of the ranks' inputs, else the first wrong one.
std::string check(const float* p, size_t count, int n, int ops) {
  float want[8];
  for (int m = 0; m < 8; ++m) want[m] = expected_value(n, static_cast<size_t>(m), ops);
  for (size_t i = 0; i < count; ++i)
    if (p[i] != want[i % 8]) {
      std::ostringstream os;
      os << "element " << i << " of " << count << " is " << p[i] << ", expected " << want[i % 8];
      return os.str();
    }
  return "";
}

struct SizePlan {
  size_t bytes;
  int warmup, reps;
  int ops;  // all-reduces per repetition, back to back (small sizes: a repetition moves >= 16 MiB)
};

std::string plan_arg(const std::vector<SizePlan>& plan) {
  std::string s;
  for (const auto& p : plan)
    s += (s.empty() ? "" : ",") + std::to_string(p.bytes) + ":" + std::to_string(p.warmup) + ":" + std::to_string(p.reps) +
         ":" + std::to_string(p.ops);
  return s;
}

std::vector<SizePlan> parse_plan(const std::string& s) {
  std::vector<SizePlan> out;
  std::istringstream in(s);
  for (std::string item; std::getline(in, item, ',');) {
    SizePlan p{};
    if (std::sscanf(item.c_str(), "%zu:%d:%d:%d", &p.bytes, &p.warmup, &p.reps, &p.ops) == 4 && p.ops >= 1) out.push_back(p);
  }
  return out;
}

// ---------------------------------------------------------------------------------------
// A worker process: both groups, every size, interleaved. Writes "SIZE_INDEX SIDE REP
// SECONDS" lines (SIDE 0 = accel, 1 = c10d) to DIR/times.RANK.

int worker(int rank, int n, int port, const std::string& dir, const std::vector<SizePlan>& plan, bool accel_first) {
  at::set_num_threads(1);
  const auto timeout = std::chrono::milliseconds(180000);

  std::shared_ptr<accel::comm::Communicator> comm;
  auto make_accel = [&] {
    accel::comm::GroupConfig gc;
    gc.backend = "gloo";
    gc.rank = rank;
    gc.world_size = n;
    gc.local_rank = rank;
    gc.local_world_size = n;
    gc.master_addr = "127.0.0.1";
    gc.master_port = port;
    gc.timeout = timeout;
    comm = accel::world::make_process_group(gc);
  };
  c10::intrusive_ptr<c10d::ProcessGroupGloo> pg;
  auto make_c10d = [&] {
    auto store = c10::make_intrusive<c10d::FileStore>(dir + "/c10d-store", n);
    auto opts = c10d::ProcessGroupGloo::Options::create(timeout);
    opts->devices.push_back(c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1"));
    opts->threads = 1;  // as accel's (comm/gloo/gloo.cpp)
    pg = c10::make_intrusive<c10d::ProcessGroupGloo>(store, rank, n, opts);
  };
  if (accel_first) make_accel(), make_c10d();
  else make_c10d(), make_accel();

  size_t max_count = 0;
  for (const auto& p : plan) max_count = std::max(max_count, p.bytes / sizeof(float));
  at::Tensor buf = at::empty({static_cast<int64_t>(max_count)}, at::kFloat);
  float* data = buf.data_ptr<float>();
  fill(data, max_count, rank);  // touches every page before any timing

  std::ostringstream out;
  for (size_t si = 0; si < plan.size(); ++si) {
    const size_t count = plan[si].bytes / sizeof(float);
    std::vector<at::Tensor> ts{buf.narrow(0, 0, static_cast<int64_t>(count))};
    const int iters = plan[si].warmup + plan[si].reps;
    for (int it = 0; it < iters; ++it) {
      for (int k = 0; k < 2; ++k) {
        const int side = (it % 2 == 0) ? k : 1 - k;  // who goes first alternates
        fill(data, count, rank);
        const int ops = plan[si].ops;
        double dt;
        if (side == 0) {
          comm->barrier();
          const double t0 = mono_s();
          for (int j = 0; j < ops; ++j) comm->all_reduce(data, data, count, DataType::Float32, RedOp::Sum)->wait();
          dt = (mono_s() - t0) / ops;
        } else {
          pg->barrier()->wait();
          const double t0 = mono_s();
          for (int j = 0; j < ops; ++j) pg->allreduce(ts)->wait();
          dt = (mono_s() - t0) / ops;
        }
        const std::string bad = check(data, count, n, ops);
        if (!bad.empty()) {
          std::fprintf(stderr, "gloo_allreduce worker %d of %d: WRONG RESULT of the %s all-reduce of %zu bytes: %s\n", rank,
                       n, side == 0 ? "accel" : "c10d", plan[si].bytes, bad.c_str());
          return 3;
        }
        if (it >= plan[si].warmup) out << si << " " << side << " " << (it - plan[si].warmup) << " " << dt << "\n";
      }
    }
    if (rank == 0)
      std::fprintf(stderr, "gloo_allreduce: %d processes, %zu MiB done\n", n, plan[si].bytes / kMiB);
  }
  pg->barrier()->wait();
  comm->barrier();
  const std::string path = dir + "/times." + std::to_string(rank);
  std::ofstream f(path + ".tmp");
  f << out.str();
  f.close();
  if (!f || std::rename((path + ".tmp").c_str(), path.c_str()) != 0) {
    std::fprintf(stderr, "gloo_allreduce worker %d: cannot write %s\n", rank, path.c_str());
    return 1;
  }
  return 0;
}

// One launch of N workers: samples[side][size] (SIDE 0 = accel, 1 = c10d), each repetition's
// time the slowest rank's.
struct Samples {
  std::vector<std::vector<std::vector<double>>> t;
  std::string error;
};

Samples run_workers(int n, const std::vector<SizePlan>& plan, bool accel_first, double limit_s) {
  Samples res;
  const std::string dir = bench::make_temp_dir("accel-bench-gloo-allreduce");
  const std::string exe = bench::self_exe();
  const int port = bench::free_port();
  if (dir.empty() || exe.empty() || port == 0) {
    res.error = "cannot make a temporary directory, find this executable or a free port";
    return res;
  }
  std::vector<pid_t> pids;
  for (int r = 0; r < n; ++r) {
    const pid_t pid = bench::spawn({exe, "--gloo-worker", std::to_string(r), "--procs", std::to_string(n), "--port",
                                    std::to_string(port), "--dir", dir, "--plan", plan_arg(plan), "--accel-first",
                                    accel_first ? "1" : "0"});
    if (pid < 0) {
      res.error = "fork failed";
      break;
    }
    pids.push_back(pid);
  }
  const std::string err = bench::wait_all(pids, limit_s);
  if (res.error.empty()) res.error = err;
  auto& slowest = res.t;
  slowest.resize(2);
  for (int side = 0; side < 2; ++side)
    for (const auto& p : plan) slowest[side].push_back(std::vector<double>(static_cast<size_t>(p.reps), 0.0));
  for (int r = 0; r < n && res.error.empty(); ++r) {
    std::ifstream f(dir + "/times." + std::to_string(r));
    if (!f) {
      res.error = "worker " + std::to_string(r) + " wrote no times";
      break;
    }
    size_t si;
    int side, rep;
    double d;
    size_t lines = 0;
    while (f >> si >> side >> rep >> d) {
      if (si >= plan.size() || side < 0 || side > 1 || rep < 0 || rep >= plan[si].reps) continue;
      auto& s = slowest[side][si][static_cast<size_t>(rep)];
      s = std::max(s, d);
      ++lines;
    }
    size_t want = 0;
    for (const auto& p : plan) want += 2 * static_cast<size_t>(p.reps);
    if (lines != want) res.error = "worker " + std::to_string(r) + " wrote " + std::to_string(lines) + " times, not " + std::to_string(want);
  }
  bench::remove_dir(dir);
  return res;
}

struct ProcResult {
  std::vector<double> accel_s, c10d_s, accel_min_s, c10d_min_s, accel_mean_s, c10d_mean_s;  // per size
  std::vector<int> reps;                                                                    // pooled, per size
  std::string error;
};

// The repetitions split over `launches` launches of fresh worker processes (each group's
// threads land where the scheduler puts them and stay there for the process's life, which
// can favour one side for a whole launch), the groups made in alternating order; the
// samples pooled.
ProcResult measure(int n, const std::vector<SizePlan>& plan, int launches, double limit_s) {
  ProcResult res;
  std::vector<std::vector<std::vector<double>>> pooled(2, std::vector<std::vector<double>>(plan.size()));
  for (int l = 0; l < launches; ++l) {
    std::vector<SizePlan> part = plan;
    for (auto& p : part) p.reps = (p.reps + launches - 1) / launches;
    Samples s = run_workers(n, part, l % 2 == 0, limit_s);
    if (!s.error.empty() && s.error.find("status 3") == std::string::npos) {  // not on a wrong result
      std::fprintf(stderr, "gloo_allreduce: %d processes: %s; trying again\n", n, s.error.c_str());
      s = run_workers(n, part, l % 2 == 0, limit_s);
    }
    if (!s.error.empty()) {
      res.error = s.error;
      return res;
    }
    for (int side = 0; side < 2; ++side)
      for (size_t si = 0; si < plan.size(); ++si)
        pooled[side][si].insert(pooled[side][si].end(), s.t[side][si].begin(), s.t[side][si].end());
  }
  for (size_t si = 0; si < plan.size(); ++si) {
    const auto &a = pooled[0][si], &c = pooled[1][si];
    res.reps.push_back(static_cast<int>(a.size()));
    res.accel_s.push_back(median(a));
    res.c10d_s.push_back(median(c));
    res.accel_min_s.push_back(*std::min_element(a.begin(), a.end()));
    res.c10d_min_s.push_back(*std::min_element(c.begin(), c.end()));
    double sa = 0, sc = 0;
    for (double v : a) sa += v;
    for (double v : c) sc += v;
    res.accel_mean_s.push_back(sa / static_cast<double>(a.size()));
    res.c10d_mean_s.push_back(sc / static_cast<double>(c.size()));
    if (std::getenv("ACCEL_BENCH_DUMP"))
      for (size_t k = 0; k < a.size(); ++k)
        std::fprintf(stderr, "dump %d %zu %zu %.6f %.6f\n", n, plan[si].bytes, k, a[k], c[k]);
  }
  return res;
}

// ---------------------------------------------------------------------------------------
// The simulator: N ranks in this process, in place.

struct SimResult {
  double median_s = NAN;
  std::string error;
};

SimResult sim_allreduce(int n, size_t count, int warmup, int reps) {
  SimResult res;
  std::vector<std::vector<float>> bufs(static_cast<size_t>(n), std::vector<float>(count));
  const int iters = warmup + reps;
  std::vector<std::vector<double>> t_post(n, std::vector<double>(iters)), t_done(n, std::vector<double>(iters));
  std::vector<std::string> bad(static_cast<size_t>(n));
  accel::sim::WorldOptions wo;
  wo.world_size = n;
  wo.timeout_seconds = 120.0;
  accel::sim::World w(wo);
  auto rep = w.run([&](accel::sim::Rank& rk) {
    auto& c = rk.comm();
    const int r = rk.rank();
    float* p = bufs[static_cast<size_t>(r)].data();
    for (int it = 0; it < iters; ++it) {
      fill(p, count, r);
      c.barrier();
      t_post[r][it] = mono_s();
      c.all_reduce(p, p, count, DataType::Float32, RedOp::Sum)->wait();
      t_done[r][it] = mono_s();
      if (bad[static_cast<size_t>(r)].empty()) bad[static_cast<size_t>(r)] = check(p, count, n, 1);
      c.barrier();
    }
  });
  if (!rep.ok()) {
    res.error = rep.first_error();
    return res;
  }
  for (int r = 0; r < n; ++r)
    if (!bad[static_cast<size_t>(r)].empty()) {
      res.error = "simulated rank " + std::to_string(r) + ": " + bad[static_cast<size_t>(r)];
      return res;
    }
  std::vector<double> samples;
  for (int it = warmup; it < iters; ++it) {
    double first = INFINITY, last = -INFINITY;
    for (int r = 0; r < n; ++r) {
      first = std::min(first, t_post[r][it]);
      last = std::max(last, t_done[r][it]);
    }
    samples.push_back(last - first);
  }
  res.median_s = median(samples);
  return res;
}

// ---------------------------------------------------------------------------------------
// What accel adds per call: both groups in this one process (a world of 1: no transfer, only
// c10d's queue to its worker thread and back), blocks of `block` one-element all-reduces,
// alternating. Unpinned, each group's worker thread lands next to the caller (a call costs
// ~5 us) or on the other core, which must wake (~50 us), and stays there for the group's
// life, so one side's blocks could all be slow: the groups are made, and their threads
// started, with this thread pinned to the core it runs on, so every thread runs there.

struct CallCost {
  double accel_us = NAN, c10d_us = NAN, accel_min_us = NAN, c10d_min_us = NAN;
  std::string error;
};

CallCost call_cost(int rounds, int block) {
  CallCost res;
  cpu_set_t before, one;
  const bool pinned = sched_getaffinity(0, sizeof before, &before) == 0 && sched_getcpu() >= 0;
  if (pinned) {
    CPU_ZERO(&one);
    CPU_SET(sched_getcpu(), &one);
    if (sched_setaffinity(0, sizeof one, &one) != 0) std::fprintf(stderr, "gloo_allreduce: could not pin the call cost\n");
  }
  try {
    accel::comm::GroupConfig gc;
    gc.backend = "gloo";
    gc.master_addr = "127.0.0.1";
    gc.master_port = bench::free_port();
    gc.timeout = std::chrono::seconds(60);
    auto comm = accel::world::make_process_group(gc);
    const std::string dir = bench::make_temp_dir("accel-bench-gloo-call");
    auto store = c10::make_intrusive<c10d::FileStore>(dir + "/c10d-store", 1);
    auto opts = c10d::ProcessGroupGloo::Options::create(std::chrono::milliseconds(60000));
    opts->devices.push_back(c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1"));
    opts->threads = 1;
    auto pg = c10::make_intrusive<c10d::ProcessGroupGloo>(store, 0, 1, opts);
    at::Tensor t = at::ones({1}, at::kFloat);
    std::vector<at::Tensor> ts{t};
    float* p = t.data_ptr<float>();
    std::vector<double> a, c;
    for (int r = 0; r < rounds + 1; ++r)
      for (int k = 0; k < 2; ++k) {
        const int side = (r % 2 == 0) ? k : 1 - k;
        const double t0 = mono_s();
        for (int i = 0; i < block; ++i) {
          if (side == 0) comm->all_reduce(p, p, 1, DataType::Float32, RedOp::Sum)->wait();
          else pg->allreduce(ts)->wait();
        }
        const double us = (mono_s() - t0) / block * 1e6;
        if (r > 0) (side == 0 ? a : c).push_back(us);
      }
    if (*p != 1.0f) res.error = "the one-process all-reduce changed its value to " + std::to_string(*p);
    res.accel_us = median(a);
    res.c10d_us = median(c);
    res.accel_min_us = *std::min_element(a.begin(), a.end());
    res.c10d_min_us = *std::min_element(c.begin(), c.end());
    bench::remove_dir(dir);
  } catch (const std::exception& e) {
    res.error = e.what();
  }
  if (pinned) sched_setaffinity(0, sizeof before, &before);
  return res;
}

// ---------------------------------------------------------------------------------------
// What the collective fingerprints (comm/guard.h) cost: 2 processes, each with accel's Gloo
// communicator as world::make_process_group makes it (checked) and one made by
// comm::make_gloo_communicator alone (unchecked, what ACCEL_COMM_CHECK=0 gives), each on its
// own rendezvous; blocks of `block` 4 KiB float32 all-reduces, each waited on, the side
// going first alternating. A block's time over `block` is one sample, the slower process's;
// the samples of several launches (the communicators made in alternating order) pooled.

int check_worker(int rank, int port, int port2, const std::string& dir, int rounds, int block, bool checked_first) {
  at::set_num_threads(1);
  accel::comm::GroupConfig gc;
  gc.backend = "gloo";
  gc.rank = rank;
  gc.world_size = 2;
  gc.local_rank = rank;
  gc.local_world_size = 2;
  gc.master_addr = "127.0.0.1";
  gc.master_port = port;
  gc.timeout = std::chrono::seconds(120);
  std::shared_ptr<accel::comm::Communicator> checked, unchecked;
  auto make_checked = [&] {
    gc.master_port = port;
    checked = accel::world::make_process_group(gc);
  };
  auto make_unchecked = [&] {
    gc.master_port = port2;
    unchecked = accel::comm::make_gloo_communicator(gc);
  };
  if (checked_first) make_checked(), make_unchecked();
  else make_unchecked(), make_checked();
  std::vector<float> buf(1024);
  std::ostringstream out;
  for (int r = 0; r <= rounds; ++r)
    for (int k = 0; k < 2; ++k) {
      const int side = (r % 2 == 0) ? k : 1 - k;
      accel::comm::Communicator& c = side == 0 ? *checked : *unchecked;
      c.barrier();
      const double t0 = mono_s();
      for (int i = 0; i < block; ++i) {
        std::fill(buf.begin(), buf.end(), 1.0f);
        c.all_reduce(buf.data(), buf.data(), buf.size(), DataType::Float32, RedOp::Sum)->wait();
      }
      const double us = (mono_s() - t0) / block * 1e6;
      if (buf[1023] != 2.0f) {
        std::fprintf(stderr, "gloo_allreduce check worker %d: WRONG RESULT %f\n", rank, buf[1023]);
        return 3;
      }
      if (r > 0) out << side << " " << us << "\n";  // round 0 warms up
    }
  checked->barrier();
  unchecked->barrier();
  std::ofstream f(dir + "/check." + std::to_string(rank));
  f << out.str();
  return f ? 0 : 1;
}

struct CheckCost {
  double checked_us = NAN, unchecked_us = NAN, checked_min_us = NAN, unchecked_min_us = NAN;
  int samples = 0;
  std::string error;
};

// One launch of the 2 check workers: samples[side] (0 checked, 1 unchecked), each block's
// time the slower process's.
std::string check_launch(int rounds, int block, bool checked_first, std::vector<std::vector<double>>& samples) {
  const std::string dir = bench::make_temp_dir("accel-bench-gloo-check");
  const std::string exe = bench::self_exe();
  const int port = bench::free_port(), port2 = bench::free_port();
  if (dir.empty() || exe.empty() || port == 0 || port2 == 0 || port == port2)
    return "cannot make a temporary directory, find this executable or two free ports";
  std::vector<pid_t> pids;
  for (int r = 0; r < 2; ++r)
    pids.push_back(bench::spawn({exe, "--check-worker", std::to_string(r), "--port", std::to_string(port), "--port2",
                                 std::to_string(port2), "--dir", dir, "--rounds", std::to_string(rounds), "--block",
                                 std::to_string(block), "--checked-first", checked_first ? "1" : "0"}));
  std::string error = bench::wait_all(pids, 300);
  std::vector<std::vector<double>> slowest(2, std::vector<double>(static_cast<size_t>(rounds), 0.0));
  for (int r = 0; r < 2 && error.empty(); ++r) {
    std::ifstream f(dir + "/check." + std::to_string(r));
    std::vector<int> seen(2, 0);
    int side;
    double us;
    while (f >> side >> us)
      if ((side == 0 || side == 1) && seen[side] < rounds) {
        auto& s = slowest[side][static_cast<size_t>(seen[side]++)];
        s = std::max(s, us);
      }
    if (seen[0] != rounds || seen[1] != rounds) error = "check worker " + std::to_string(r) + " wrote too few times";
  }
  bench::remove_dir(dir);
  if (error.empty())
    for (int side = 0; side < 2; ++side) samples[side].insert(samples[side].end(), slowest[side].begin(), slowest[side].end());
  return error;
}

// `launches` launches of fresh workers, the two communicators made in alternating order (where
// the scheduler puts a group's threads holds for the process's life and can favour the side
// made first or second), the blocks pooled.
CheckCost check_cost(int rounds, int block, int launches) {
  CheckCost res;
  std::vector<std::vector<double>> samples(2);
  for (int l = 0; l < launches && res.error.empty(); ++l) res.error = check_launch(rounds, block, l % 2 == 0, samples);
  if (!res.error.empty()) return res;
  res.samples = static_cast<int>(samples[0].size());
  res.checked_us = median(samples[0]);
  res.unchecked_us = median(samples[1]);
  res.checked_min_us = *std::min_element(samples[0].begin(), samples[0].end());
  res.unchecked_min_us = *std::min_element(samples[1].begin(), samples[1].end());
  return res;
}

// The guard's own work per call, without Gloo's scheduling noise: the same guard around a
// communicator of 2 ranks whose operations complete at once (the store a memory store that
// holds what the rendezvous would have left), against that communicator bare; blocks of
// 20,000 all-reduce + wait calls alternating, medians. What the fingerprints add to every
// collective on this CPU.
class InstantWork final : public accel::comm::Work {
 public:
  void wait() override {}
  bool test() override { return true; }
};

class InstantComm final : public accel::comm::Communicator {
 public:
  explicit InstantComm(std::shared_ptr<accel::comm::Store> s) : s_(std::move(s)) {}
  int rank() const override { return 0; }
  int size() const override { return 2; }
  std::string backend() const override { return "gloo"; }
  accel::comm::Store* store() override { return s_.get(); }
  std::shared_ptr<accel::comm::Work> all_reduce(const void*, void*, size_t, DataType, RedOp, accel::comm::PreMul) override { return done(); }
  std::shared_ptr<accel::comm::Work> reduce_scatter(const void*, void*, size_t, DataType, RedOp, accel::comm::PreMul) override { return done(); }
  std::shared_ptr<accel::comm::Work> all_gather(const void*, void*, size_t, DataType) override { return done(); }
  std::shared_ptr<accel::comm::Work> broadcast(const void*, void*, size_t, DataType, int) override { return done(); }
  std::shared_ptr<accel::comm::Work> reduce(const void*, void*, size_t, DataType, RedOp, int, accel::comm::PreMul) override { return done(); }
  std::shared_ptr<accel::comm::Work> send(const void*, size_t, DataType, int) override { return done(); }
  std::shared_ptr<accel::comm::Work> recv(void*, size_t, DataType, int) override { return done(); }
  void barrier() override {}
  void group_start() override {}
  void group_end() override {}

 private:
  static std::shared_ptr<accel::comm::Work> done() { return std::make_shared<InstantWork>(); }
  std::shared_ptr<accel::comm::Store> s_;
};

struct GuardCpu {
  double checked_us = NAN, bare_us = NAN;
};

GuardCpu guard_cpu(int rounds, int block) {
  auto store = accel::comm::make_memory_store(std::chrono::seconds(5));
  for (int r = 0; r < 2; ++r) store->set("accel/join/rank/" + std::to_string(r), std::string("pid=1\nhost=bench\n"));
  auto bare = std::make_shared<InstantComm>(store);
  auto checked = accel::comm::guard_communicator(std::make_shared<InstantComm>(store), std::chrono::seconds(300));
  std::vector<float> buf(1024, 1.0f);
  std::vector<double> a, b;
  for (int r = 0; r <= rounds; ++r)
    for (int k = 0; k < 2; ++k) {
      const int side = (r % 2 == 0) ? k : 1 - k;
      accel::comm::Communicator& c = side == 0 ? *checked : *bare;
      const double t0 = mono_s();
      for (int i = 0; i < block; ++i) c.all_reduce(buf.data(), buf.data(), buf.size(), DataType::Float32, RedOp::Sum)->wait();
      const double us = (mono_s() - t0) / block * 1e6;
      if (r > 0) (side == 0 ? a : b).push_back(us);
    }
  return {median(a), median(b)};
}

std::vector<int> parse_list(const std::string& s) {
  std::vector<int> out;
  std::istringstream in(s);
  for (std::string item; std::getline(in, item, ',');) {
    char* end = nullptr;
    const long v = std::strtol(item.c_str(), &end, 10);
    if (end == item.c_str() || *end != '\0' || v < 1 || v > 4096) return {};
    out.push_back(static_cast<int>(v));
  }
  return out;
}

[[noreturn]] void usage(const char* argv0) {
  std::fprintf(stderr, "usage: %s [--quick] [--procs 2,4] [--mib 1,4,16,64,256] [--reps K] [--launches L] [--warmup K] [--no-sim] [--check-only]\n",
               argv0);
  std::exit(2);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc > 1 && std::strcmp(argv[1], "--check-worker") == 0) {
    int rank = -1, port = 0, port2 = 0, rounds = 0, block = 0;
    bool checked_first = true;
    std::string dir;
    for (int i = 1; i + 1 < argc; i += 2) {
      const std::string a = argv[i], v = argv[i + 1];
      if (a == "--check-worker") rank = std::atoi(v.c_str());
      else if (a == "--port") port = std::atoi(v.c_str());
      else if (a == "--port2") port2 = std::atoi(v.c_str());
      else if (a == "--dir") dir = v;
      else if (a == "--rounds") rounds = std::atoi(v.c_str());
      else if (a == "--block") block = std::atoi(v.c_str());
      else if (a == "--checked-first") checked_first = v != "0";
    }
    if (rank < 0 || rank > 1 || port <= 0 || port2 <= 0 || dir.empty() || rounds < 1 || block < 1) {
      std::fprintf(stderr, "gloo_allreduce check worker: bad arguments\n");
      return 2;
    }
    try {
      return check_worker(rank, port, port2, dir, rounds, block, checked_first);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "gloo_allreduce check worker %d: %s\n", rank, e.what());
      return 1;
    }
  }
  if (argc > 1 && std::strcmp(argv[1], "--gloo-worker") == 0) {
    int rank = -1, n = 0, port = 0;
    bool accel_first = true;
    std::string dir, plan;
    for (int i = 1; i + 1 < argc; i += 2) {
      const std::string a = argv[i], v = argv[i + 1];
      if (a == "--gloo-worker") rank = std::atoi(v.c_str());
      else if (a == "--procs") n = std::atoi(v.c_str());
      else if (a == "--port") port = std::atoi(v.c_str());
      else if (a == "--dir") dir = v;
      else if (a == "--plan") plan = v;
      else if (a == "--accel-first") accel_first = v != "0";
    }
    const auto p = parse_plan(plan);
    if (rank < 0 || n < 2 || rank >= n || port <= 0 || dir.empty() || p.empty()) {
      std::fprintf(stderr, "gloo_allreduce worker: bad arguments\n");
      return 2;
    }
    try {
      return worker(rank, n, port, dir, p, accel_first);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "gloo_allreduce worker %d: %s\n", rank, e.what());
      return 1;
    }
  }

  bool quick = false, sim = true, check_only = false;
  std::vector<int> procs = {2, 4}, mibs;
  int reps_override = 0, warmup_override = -1, launches = 0;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) usage(argv[0]);
      return argv[++i];
    };
    if (a == "--quick") quick = true;
    else if (a == "--no-sim") sim = false;
    else if (a == "--check-only") check_only = true;
    else if (a == "--procs") {
      procs = parse_list(value());
      if (procs.empty() || *std::min_element(procs.begin(), procs.end()) < 2) usage(argv[0]);
    } else if (a == "--mib") {
      mibs = parse_list(value());
      if (mibs.empty()) usage(argv[0]);
    } else if (a == "--reps") {
      reps_override = std::atoi(value().c_str());
      if (reps_override < 1) usage(argv[0]);
    } else if (a == "--launches") {
      launches = std::atoi(value().c_str());
      if (launches < 1) usage(argv[0]);
    } else if (a == "--warmup") {
      warmup_override = std::atoi(value().c_str());
      if (warmup_override < 0) usage(argv[0]);
    } else if (a == "-h" || a == "--help") usage(argv[0]);
    else if (a == "--threads" || a == "--model" || a == "--peers") {
      std::fprintf(stderr, "gloo_allreduce: ignoring %s %s (another benchmark's option)\n", a.c_str(), i + 1 < argc ? argv[i + 1] : "");
      ++i;
    } else std::fprintf(stderr, "gloo_allreduce: ignoring unknown option '%s'\n", a.c_str());
  }
  if (mibs.empty()) mibs = quick ? std::vector<int>{1, 16} : std::vector<int>{1, 4, 16, 64, 256};
  if (check_only) procs.clear();
  if (launches == 0) launches = quick ? 2 : 3;

  // Repetitions per size: more for the small ones, whose times are short and noisy; and
  // below 16 MiB several all-reduces per repetition (so that one moves >= 16 MiB), whose mean
  // is one sample: a single 1 MiB all-reduce takes either ~0.5 ms or ~3 ms on this shared
  // machine, as the scheduler has it, and the median of such samples jumps between the two.
  auto plan_for = [&](int n) {
    std::vector<SizePlan> plan;
    for (int m : mibs) {
      int reps = m <= 1 ? 90 : m <= 4 ? 60 : m <= 16 ? 45 : m <= 64 ? 21 : 12;
      if (quick) reps = m <= 1 ? 11 : 7;
      if (reps_override) reps = reps_override;
      const int warmup = warmup_override >= 0 ? warmup_override : (m <= 16 ? 2 : 1);
      const int ops = std::max(1, std::min(16 / m, max_ops(n)));
      plan.push_back({static_cast<size_t>(m) * kMiB, warmup, reps, ops});
    }
    return plan;
  };
  const std::vector<SizePlan> sizes = plan_for(2);
  const int hw = std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  std::fprintf(stderr, "gloo_allreduce: %zu sizes x processes {", sizes.size());
  for (size_t i = 0; i < procs.size(); ++i) std::fprintf(stderr, "%s%d", i ? "," : "", procs[i]);
  std::fprintf(stderr, "}, %d CPUs\n", hw);

  // The bound's buffers: the largest total traffic, capped at 256 MiB.
  size_t max_total = 0;
  for (int n : procs)
    for (const auto& p : sizes) max_total = std::max(max_total, 2 * static_cast<size_t>(n - 1) * p.bytes);
  std::vector<char> src(std::min(max_total, 256 * kMiB)), dst(src.size());
  for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<char>(i * 31);
  std::memset(dst.data(), 0, dst.size());

  int failures = 0;
  for (int n : procs) {
    std::fprintf(stderr, "gloo_allreduce: %d processes (accel's Gloo and raw c10d interleaved)\n", n);
    const double t0 = mono_s();
    const std::vector<SizePlan> plan = plan_for(n);
    const ProcResult pr = measure(n, plan, launches, quick ? 120.0 : 300.0);
    std::fprintf(stderr, "gloo_allreduce: %d processes took %.1f s\n", n, mono_s() - t0);
    for (size_t si = 0; si < plan.size(); ++si) {
      const size_t bytes = plan[si].bytes;
      SimResult sr;
      if (sim) sr = sim_allreduce(n, bytes / sizeof(float), plan[si].warmup, plan[si].reps);
      else sr.error = "skipped (--no-sim)";
      if (sim && !sr.error.empty()) {
        std::fprintf(stderr, "gloo_allreduce: the simulator FAILED: %s\n", sr.error.c_str());
        ++failures;
      }
      const double total = 2.0 * (n - 1) * static_cast<double>(bytes);
      const bench::Bound bd = bench::memcpy_bound(total, src, dst, bytes <= 16 * kMiB ? 9 : 5);
      const bool ok = pr.error.empty();
      const double accel_s = ok ? pr.accel_s[si] : NAN, c10d_s = ok ? pr.c10d_s[si] : NAN;
      const double factor = 2.0 * (n - 1) / n;
      const double algbw = static_cast<double>(bytes) / accel_s / 1e9;
      const double c_algbw = static_cast<double>(bytes) / c10d_s / 1e9;
      const double s_algbw = static_cast<double>(bytes) / sr.median_s / 1e9;
      std::printf(
          "{\"bench\":\"gloo_allreduce\",\"procs\":%d,\"bytes\":%zu,\"dtype\":\"float32\",\"op\":\"sum\",\"inplace\":true,"
          "\"reps\":%d,\"launches\":%d,\"ops_per_rep\":%d,\"gloo_threads\":1,\"accel_s\":%s,\"c10d_s\":%s,\"sim_s\":%s,\"bound_s\":%s,"
          "\"algbw_gbps\":%s,\"busbw_gbps\":%s,\"c10d_algbw_gbps\":%s,\"c10d_busbw_gbps\":%s,\"sim_busbw_gbps\":%s,"
          "\"vs_c10d\":%s,\"vs_c10d_mean\":%s,\"vs_c10d_min\":%s,\"vs_memcpy_bound\":%s,\"accel_min_s\":%s,\"c10d_min_s\":%s,\"memcpy_gbps\":%s,"
          "\"bound_model\":\"memcpy of 2*(procs-1)*bytes\",\"values_ok\":%s,\"error\":%s}\n",
          n, bytes, ok ? pr.reps[si] : 0, launches, plan[si].ops, json_num(accel_s, "%.6f").c_str(), json_num(c10d_s, "%.6f").c_str(),
          json_num(sr.median_s, "%.6f").c_str(), json_num(bd.bound_s, "%.6f").c_str(), json_num(algbw, "%.3f").c_str(),
          json_num(algbw * factor, "%.3f").c_str(), json_num(c_algbw, "%.3f").c_str(),
          json_num(c_algbw * factor, "%.3f").c_str(), json_num(s_algbw * factor, "%.3f").c_str(),
          json_num(c10d_s / accel_s, "%.3f").c_str(), json_num(ok ? pr.c10d_mean_s[si] / pr.accel_mean_s[si] : NAN, "%.3f").c_str(),
          json_num(ok ? pr.c10d_min_s[si] / pr.accel_min_s[si] : NAN, "%.3f").c_str(), json_num(bd.bound_s / accel_s, "%.3f").c_str(),
          json_num(ok ? pr.accel_min_s[si] : NAN, "%.6f").c_str(), json_num(ok ? pr.c10d_min_s[si] : NAN, "%.6f").c_str(),
          json_num(bd.memcpy_gbps, "%.2f").c_str(), (ok && (!sim || sr.error.empty())) ? "true" : "false",
          bench::json_str(ok ? (sr.error.empty() || !sim ? "" : sr.error) : pr.error).c_str());
      std::fflush(stdout);
    }
    if (!pr.error.empty()) {
      std::fprintf(stderr, "gloo_allreduce: %d processes FAILED: %s\n", n, pr.error.c_str());
      ++failures;
    }
  }
  const CallCost cc = check_only ? CallCost{} : call_cost(quick ? 7 : 21, 2000);
  if (!cc.error.empty()) {
    std::fprintf(stderr, "gloo_allreduce: the per-call cost FAILED: %s\n", cc.error.c_str());
    ++failures;
  }
  if (!check_only)
    std::printf("{\"bench\":\"gloo_allreduce_call\",\"procs\":1,\"bytes\":4,\"calls_per_block\":2000,\"accel_us\":%s,"
              "\"c10d_us\":%s,\"accel_min_us\":%s,\"c10d_min_us\":%s,\"overhead_us\":%s,\"error\":%s}\n",
              json_num(cc.accel_us, "%.2f").c_str(), json_num(cc.c10d_us, "%.2f").c_str(),
              json_num(cc.accel_min_us, "%.2f").c_str(), json_num(cc.c10d_min_us, "%.2f").c_str(),
              json_num(cc.accel_us - cc.c10d_us, "%.2f").c_str(), bench::json_str(cc.error).c_str());
  std::fflush(stdout);
  const CheckCost ck = check_cost(quick ? 7 : 21, 500, quick ? 2 : 4);
  if (!ck.error.empty()) {
    std::fprintf(stderr, "gloo_allreduce: the fingerprints' cost FAILED: %s\n", ck.error.c_str());
    ++failures;
  }
  const GuardCpu gc = guard_cpu(quick ? 5 : 21, 20000);
  std::printf("{\"bench\":\"gloo_check_cost\",\"procs\":2,\"bytes\":4096,\"calls_per_block\":500,\"blocks\":%d,"
              "\"checked_us\":%s,\"unchecked_us\":%s,\"checked_min_us\":%s,\"unchecked_min_us\":%s,\"cost_us\":%s,"
              "\"cost_fraction\":%s,\"guard_cpu_us\":%s,\"instant_us\":%s,\"guard_cpu_fraction\":%s,\"error\":%s}\n",
              ck.samples, json_num(ck.checked_us, "%.2f").c_str(), json_num(ck.unchecked_us, "%.2f").c_str(),
              json_num(ck.checked_min_us, "%.2f").c_str(), json_num(ck.unchecked_min_us, "%.2f").c_str(),
              json_num(ck.checked_us - ck.unchecked_us, "%.2f").c_str(),
              json_num((ck.checked_us - ck.unchecked_us) / ck.unchecked_us, "%.4f").c_str(),
              json_num(gc.checked_us - gc.bare_us, "%.3f").c_str(), json_num(gc.bare_us, "%.3f").c_str(),
              json_num((gc.checked_us - gc.bare_us) / ck.unchecked_us, "%.5f").c_str(), bench::json_str(ck.error).c_str());
  std::fflush(stdout);
  return failures ? 1 : 0;
}
