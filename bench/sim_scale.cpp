// bench_sim_scale: the simulator at cluster scale. Worlds of 1,000 to 100,000 ranks (N/8
// nodes of 8 H100 over InfiniBand, preset "<N/8>x8xH100-IB") replay a training step's
// collective pattern (sim/replay.h): "ddp", an 8-billion-parameter model's fp32 gradients
// all-reduced in 25 MiB buckets as the backward produces them, and "zero3", its bf16 weights
// all-gathered layer by layer (32 layers, one ahead) and its gradients reduce-scattered.
// Each world runs in a child process, so its peak resident memory is its own (wait4's
// ru_maxrss). One JSON line per world and pattern:
//
//   {"bench":"sim_scale","strategy":"ddp","ranks":100000,"nodes":12500,"wall_s":…,
//    "peak_rss_mib":…,"events":…,"collectives":…,"predicted_step_s":…,"analytic_step_s":…,…}
//
// wall_s: the replay's time here; predicted_step_s: the simulated step (the slowest rank's
// clock); analytic_step_s: estimate_step's closed form for the same step (sim/cost.h), which
// hides communication behind compute by formula where the replay schedules each call.
// The targets (issue 38): 100,000 ranks in < 60 s and < 8 GiB.
//
// Then the threads against the replay, side by side on the same pattern where threads still
// run (256 to 4,096 ranks, each rank 4 all-reduces of 4 KiB and a barrier, World::run with
// real bytes): "sim_scale_threads" lines with both wall times, ratio = threads_s /
// replay_s, and whether both predict the same time (they must: the same timing rules).
//
//   bench_sim_scale [--quick] [--max-ranks N] [--no-threads]
//
// --quick stops at 16,000 ranks and 1,024 threads. Unknown options are ignored with a
// warning (scripts/bench passes its extra arguments to every benchmark).
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "sim/replay.h"
#include "sim/world.h"

namespace {

using accel::sim::CollKind;

double now_s() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

constexpr double kParams = 8.03e9;       // Llama 3 8B
constexpr double kTokens = 8192;         // per rank per step
constexpr int kLayers = 32;
constexpr uint64_t kBucket = 25u << 20;  // PyTorch DDP's default bucket

struct Result {
  double wall_s = NAN, predicted = NAN, fastest = NAN, comm = NAN, analytic = NAN;
  unsigned long long events = 0, collectives = 0;
  char algorithms[160] = {0};
  char error[240] = {0};
  bool ok = false;
};

// Runs one world in a child: the result through a pipe, the peak RSS from wait4.
Result run_child(int ranks, const std::string& strategy, long* peak_kib) {
  int fds[2];
  Result res;
  if (pipe(fds) != 0) {
    std::snprintf(res.error, sizeof res.error, "pipe: %s", std::strerror(errno));
    return res;
  }
  const pid_t pid = fork();
  if (pid == 0) {
    close(fds[0]);
    Result r;
    try {
      accel::sim::ReplayOptions o;
      o.topology = std::to_string(ranks / 8) + "x8xH100-IB";
      o.world_size = ranks;
      const accel::sim::Topology topo = accel::sim::topology_preset(o.topology);
      o.programs.push_back(accel::sim::step_program(topo, strategy, kParams, kTokens, kLayers, kBucket));
      const double t0 = now_s();
      const accel::sim::ReplayReport rep = accel::sim::replay(o);
      r.wall_s = now_s() - t0;
      r.ok = rep.ok;
      r.predicted = rep.predicted_seconds;
      r.fastest = rep.fastest_seconds;
      r.comm = rep.comm_seconds;
      r.events = rep.events;
      r.collectives = rep.collectives;
      std::string algos;
      for (const auto& a : rep.algorithms) algos += (algos.empty() ? "" : ", ") + a;
      std::snprintf(r.algorithms, sizeof r.algorithms, "%s", algos.c_str());
      std::snprintf(r.error, sizeof r.error, "%s", rep.error.c_str());
      r.analytic = accel::sim::estimate_step(topo, strategy, kParams, kTokens, ranks, kLayers, kBucket).total;
    } catch (const std::exception& e) {
      std::snprintf(r.error, sizeof r.error, "%s", e.what());
    }
    ssize_t w = write(fds[1], &r, sizeof r);
    _exit(w == static_cast<ssize_t>(sizeof r) ? 0 : 1);
  }
  close(fds[1]);
  ssize_t got = read(fds[0], &res, sizeof res);
  close(fds[0]);
  int status = 0;
  struct rusage ru {};
  wait4(pid, &status, 0, &ru);
  *peak_kib = ru.ru_maxrss;
  if (got != static_cast<ssize_t>(sizeof res)) {
    res = Result{};
    std::snprintf(res.error, sizeof res.error, "the child died (status %d)", status);
  }
  return res;
}

// The threads' pattern: every rank 4 all-reduces of 4 KiB and a barrier.
double threaded(int ranks, double* predicted) {
  accel::sim::WorldOptions opts;
  opts.world_size = ranks;
  opts.timeout_seconds = 300.0;
  opts.topology = std::to_string((ranks + 7) / 8) + "x8xH100-IB";
  const double t0 = now_s();
  accel::sim::World w(opts);
  auto rep = w.run([&](accel::sim::Rank& rk) {
    std::vector<float> in(1024, 1.0f), out(1024);
    for (int k = 0; k < 4; ++k)
      rk.comm().all_reduce(in.data(), out.data(), 1024, accel::comm::DataType::Float32, accel::comm::RedOp::Sum)->wait();
    rk.comm().barrier();
  });
  *predicted = rep.ok() ? rep.predicted_seconds : NAN;
  return now_s() - t0;
}

double replayed(int ranks, double* predicted) {
  accel::sim::ReplayOptions o;
  o.world_size = ranks;
  o.topology = std::to_string((ranks + 7) / 8) + "x8xH100-IB";
  accel::sim::ReplayProgram p;
  for (int k = 0; k < 4; ++k) p.wait(p.post(CollKind::AllReduce, 4096));
  p.wait(p.post(CollKind::Barrier, 0));
  o.programs.push_back(p);
  const double t0 = now_s();
  const auto rep = accel::sim::replay(o);
  const double wall = now_s() - t0;
  *predicted = rep.ok ? rep.predicted_seconds : NAN;
  return wall;
}

}  // namespace

int main(int argc, char** argv) {
  bool quick = false, threads = true;
  int max_ranks = 100000;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--quick") {
      quick = true;
    } else if (a == "--no-threads") {
      threads = false;
    } else if (a == "--max-ranks" && i + 1 < argc) {
      max_ranks = std::atoi(argv[++i]);
    } else if (a == "-h" || a == "--help") {
      std::fprintf(stderr, "usage: %s [--quick] [--max-ranks N] [--no-threads]\n", argv[0]);
      return 2;
    } else {
      std::fprintf(stderr, "sim_scale: ignoring unknown option '%s'\n", a.c_str());
    }
  }
  if (quick) max_ranks = std::min(max_ranks, 16000);
  bool all_ok = true;
  for (const char* strategy : {"ddp", "zero3"}) {
    for (int ranks : {1000, 2000, 4000, 8000, 16000, 32000, 64000, 100000}) {
      if (ranks > max_ranks) break;
      long peak_kib = 0;
      const Result r = run_child(ranks, strategy, &peak_kib);
      all_ok = all_ok && r.ok;
      std::fprintf(stderr, "sim_scale: %s, %d ranks: %.2f s, %.1f MiB%s%s\n", strategy, ranks, r.wall_s,
                   peak_kib / 1024.0, r.ok ? "" : ", FAILED: ", r.error);
      std::printf("{\"bench\":\"sim_scale\",\"strategy\":\"%s\",\"ranks\":%d,\"nodes\":%d,\"topology\":\"%dx8xH100-IB\","
                  "\"params\":%.3g,\"tokens_per_rank\":%.0f,\"wall_s\":%.3f,\"peak_rss_mib\":%.1f,\"events\":%llu,"
                  "\"collectives\":%llu,\"algorithms\":\"%s\",\"predicted_step_s\":%.6f,\"fastest_rank_s\":%.6f,"
                  "\"comm_s\":%.6f,\"analytic_step_s\":%.6f,\"ok\":%s}\n",
                  strategy, ranks, ranks / 8, ranks / 8, kParams, kTokens, r.wall_s, peak_kib / 1024.0, r.events,
                  r.collectives, r.algorithms, r.predicted, r.fastest, r.comm, r.analytic, r.ok ? "true" : "false");
      std::fflush(stdout);
    }
  }
  if (threads) {
    for (int ranks = 256; ranks <= (quick ? 1024 : 4096); ranks *= 2) {
      double pt = NAN, pr = NAN;
      const double t = threaded(ranks, &pt);
      const double r = replayed(ranks, &pr);
      const bool same = std::fabs(pt - pr) <= 1e-9 * std::max(1.0, std::fabs(pt));
      all_ok = all_ok && same;
      std::printf("{\"bench\":\"sim_scale_threads\",\"ranks\":%d,\"threads_s\":%.4f,\"replay_s\":%.6f,\"ratio\":%.1f,"
                  "\"threads_predicted_s\":%.9f,\"replay_predicted_s\":%.9f,\"same_prediction\":%s}\n",
                  ranks, t, r, t / r, pt, pr, same ? "true" : "false");
      std::fflush(stdout);
    }
  }
  return all_ok ? 0 : 1;
}
