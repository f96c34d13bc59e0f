// bench_sim_allreduce: the simulator's all-reduce against this machine's memory bandwidth
// and against libtorch's c10d Gloo all-reduce across processes.
//
// The simulator's all-reduce moves real bytes inside one address space, so its floor is
// the memory traffic it must cause. The model: an all-reduce of S bytes over N ranks must
// read every rank's input once and write every rank's output once, 2·N·S bytes. The bound
// is a memcpy of N·S bytes, which moves exactly that traffic (B bytes read, B written),
// timed in the same World::run just before each all-reduce (rank 0 copies while the other
// ranks wait, so both see the same machine), with the engine's thread count and with one
// thread: bound_s is the faster of the two medians, memcpy_gbps = 2·N·S / bound_s. The
// figures, one JSON line:
//
//   {"bench":"sim_allreduce","bytes":67108864,"ranks":8,"dtype":"float32","sim_s":…,
//    "sim_inplace_s":…,"engine_threads":2,"memcpy_gbps":…,"bound_s":…,"vs_memcpy_bound":…,
//    "gloo_s":…,"vs_gloo":…,…}
//
// sim_s: the median time of one all-reduce (out of place), from the first rank's call to
// the last rank's return, each all-reduce behind a barrier, all inside one World::run;
// sim_inplace_s the same with send == recv. vs_memcpy_bound = bound_s / sim_s and
// vs_gloo = gloo_s / sim_s (higher is better; the targets are >= 0.5 and >= 10);
// inplace_vs_gloo = gloo_s / sim_inplace_s compares like with like (Gloo's all-reduce is
// in place: ProcessGroup::allreduce overwrites its tensors);
// bound_vs_gloo = gloo_s / bound_s is the most vs_gloo any all-reduce that moves the
// bound's traffic could reach here. Results are checked element by element (values built
// so that every sum is exact).
//
// gloo_s: the same all-reduce (64 MiB float32, 8 ranks) with c10d::ProcessGroupGloo, one
// process per rank (this executable, re-run with a hidden --gloo-worker flag), a FileStore
// in a temporary directory, the loopback device; each timed all-reduce follows a barrier,
// its time is the slowest rank's, gloo_s the median. Built only where Gloo's headers are
// (Debian's libgloo-dev); else gloo_s is null and "gloo" says why.
//
// Then a line per dtype, "sim_rounding": the engine's reduce kernel with NCCL's rounding
// (comm::reduce_nccl) against one fp32 rounding in rank order (comm::reduce) on the same
// 8 MiB per rank, one thread; ratio = nccl_s / once_s (the cost of NCCL's rounding).
//
// A last line, "sim_scale", runs worlds of 256, 512, 1024, ... ranks, each rank doing a
// few 4 KiB all-reduces and a barrier, and stops before a world would take longer than
// --scale-limit seconds (60): the wall time per world size and the largest world reached.
//
//   bench_sim_allreduce [--quick] [--ranks N] [--mib M] [--reps K] [--warmup K]
//                       [--engine-threads N | --threads N] [--gloo-reps K] [--no-gloo]
//                       [--no-scale] [--no-rounding] [--scale-limit SECONDS] [--scale-max RANKS]
//
// Unknown options are ignored with a warning (scripts/bench passes its extra arguments
// to every benchmark).
#include <signal.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
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
#include "comm/kernels.h"
#include "sim/world.h"

#ifdef BENCH_HAVE_GLOO
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/csrc/distributed/c10d/FileStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#endif

namespace {

using Clock = std::chrono::steady_clock;
using accel::comm::DataType;
using accel::comm::RedOp;

double now_s() { return std::chrono::duration<double>(Clock::now().time_since_epoch()).count(); }

double median(std::vector<double> v) {
  if (v.empty()) return NAN;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// A page-aligned buffer whose pages are touched (written) before any timing.
struct Buffer {
  float* p = nullptr;
  size_t count = 0;
  explicit Buffer(size_t n) : count(n) {
    void* raw = nullptr;
    if (posix_memalign(&raw, 4096, n * sizeof(float)) != 0) {
      std::fprintf(stderr, "sim_allreduce: cannot allocate %zu bytes\n", n * sizeof(float));
      std::exit(1);
    }
    p = static_cast<float*>(raw);
    std::memset(p, 0, n * sizeof(float));
  }
  ~Buffer() { std::free(p); }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
};

// ---------------------------------------------------------------------------------------
// The bound: a memcpy of `bytes` split across `threads` threads, in seconds
// (bench/procs.h, shared with the benchmarks of processes).

using bench::timed_memcpy;

// ---------------------------------------------------------------------------------------
// The simulator's all-reduce.
//
// Rank r's input element i is (r + 1) + (i % 8) / 4 (with 8 ranks every sum is exact in fp32),
// and an element's expected value depends on i % 8 alone, computed below by emulating the
// engine's definition (fp32, ranks in order).

float input_value(int rank, size_t i) { return static_cast<float>(rank + 1) + static_cast<float>(i % 8) * 0.25f; }

struct SimRun {
  double median_s = NAN, min_s = NAN;
  double exec_s = NAN;  // the median time inside the call that ran the reduction (the last poster's)
  double memcpy_s = NAN, memcpy_1t_s = NAN;  // medians of the memcpy of ranks x bytes (engine's threads, 1)
  bool ok = false;
  std::string error;
};

// copy_src and copy_dst: ranks * count floats each, for the memcpy timed before each
// all-reduce (the same traffic as the all-reduce, 2 * ranks * count * 4 bytes).
SimRun sim_allreduce(int ranks, size_t count, int warmup, int reps, int engine_threads, bool inplace,
                     Buffer& copy_src, Buffer& copy_dst) {
  std::vector<std::unique_ptr<Buffer>> send, recv;
  for (int r = 0; r < ranks; ++r) {
    send.push_back(std::make_unique<Buffer>(count));
    for (size_t i = 0; i < count; ++i) send[r]->p[i] = input_value(r, i);
    if (!inplace) recv.push_back(std::make_unique<Buffer>(count));  // zeroed: pages touched
  }
  const int iters = warmup + reps;
  std::vector<std::vector<double>> t_post(ranks, std::vector<double>(iters)), t_done(ranks, std::vector<double>(iters)),
      t_ret(ranks, std::vector<double>(iters));
  std::vector<double> copy_t, copy_1t;
  const int copy_threads = engine_threads > 0 ? engine_threads : std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  const size_t copy_bytes = static_cast<size_t>(ranks) * count * sizeof(float);

  accel::sim::WorldOptions opts;
  opts.world_size = ranks;
  opts.engine_threads = engine_threads;
  opts.timeout_seconds = 120.0;
  accel::sim::World w(opts);
  auto rep = w.run([&](accel::sim::Rank& rk) {
    auto& c = rk.comm();
    const int r = rk.rank();
    float* in = send[r]->p;
    float* out = inplace ? in : recv[r]->p;
    for (int it = 0; it < iters; ++it) {
      // The bound, measured between two barriers: every rank has taken its times of the
      // last all-reduce, and waits while rank 0 copies.
      c.barrier();
      if (r == 0 && it >= warmup) {
        copy_t.push_back(timed_memcpy(copy_dst.p, copy_src.p, copy_bytes, copy_threads));
        copy_1t.push_back(copy_threads > 1 ? timed_memcpy(copy_dst.p, copy_src.p, copy_bytes, 1) : copy_t.back());
      }
      c.barrier();
      t_post[r][it] = now_s();
      auto work = c.all_reduce(in, out, count, DataType::Float32, RedOp::Sum);
      t_ret[r][it] = now_s();
      work->wait();
      t_done[r][it] = now_s();
    }
  });
  SimRun res;
  if (!rep.ok()) {
    res.error = rep.first_error();
    return res;
  }
  // One all-reduce: from the first rank's call to the last rank's return.
  // The rank whose call found every other rank posted ran the reduction inside it.
  std::vector<double> samples, exec;
  for (int it = warmup; it < iters; ++it) {
    double first = INFINITY, last = -INFINITY, longest = 0.0;
    for (int r = 0; r < ranks; ++r) {
      first = std::min(first, t_post[r][it]);
      last = std::max(last, t_done[r][it]);
      longest = std::max(longest, t_ret[r][it] - t_post[r][it]);
    }
    samples.push_back(last - first);
    exec.push_back(longest);
  }
  res.median_s = median(samples);
  res.exec_s = median(exec);
  res.memcpy_s = median(copy_t);
  res.memcpy_1t_s = median(copy_1t);
  res.min_s = *std::min_element(samples.begin(), samples.end());

  // Expected values: out of place, one reduction of the inputs; in place, `iters`
  // reductions, each of the previous result (equal on every rank).
  float expect[8];
  for (int m = 0; m < 8; ++m) {
    std::vector<float> v(ranks);
    for (int r = 0; r < ranks; ++r) v[r] = input_value(r, static_cast<size_t>(m));
    for (int k = 0; k < (inplace ? iters : 1); ++k) {
      float acc = v[0];
      for (int r = 1; r < ranks; ++r) acc += v[r];
      std::fill(v.begin(), v.end(), acc);
    }
    expect[m] = v[0];
  }
  for (int r = 0; r < ranks && res.error.empty(); ++r) {
    const float* out = inplace ? send[r]->p : recv[r]->p;
    for (size_t i = 0; i < count; ++i)
      if (std::memcmp(&out[i], &expect[i % 8], sizeof(float)) != 0) {
        std::ostringstream os;
        os << "rank " << r << " element " << i << ": got " << out[i] << ", expected " << expect[i % 8];
        res.error = os.str();
        break;
      }
  }
  res.ok = res.error.empty();
  return res;
}

// ---------------------------------------------------------------------------------------
// Scale: worlds of growing size, each rank doing `colls` all-reduces of 4 KiB and a barrier.

struct ScalePoint {
  int ranks;
  double wall_s;
  bool ok;
};

ScalePoint sim_scale_point(int ranks, int colls, size_t count) {
  accel::sim::WorldOptions opts;
  opts.world_size = ranks;
  opts.timeout_seconds = 300.0;
  const double t0 = now_s();
  accel::sim::World w(opts);
  bool values_ok = true;
  std::vector<char> bad(ranks, 0);
  // the sum of rank % 4 + 1 over the ranks: exact in fp32 in any order (at most 4 x ranks)
  float want = 0.0f;
  for (int r = 0; r < ranks; ++r) want += static_cast<float>(r % 4 + 1);
  auto rep = w.run([&](accel::sim::Rank& rk) {
    auto& c = rk.comm();
    std::vector<float> in(count, static_cast<float>(rk.rank() % 4 + 1)), out(count, 0.0f);
    for (int k = 0; k < colls; ++k) c.all_reduce(in.data(), out.data(), count, DataType::Float32, RedOp::Sum)->wait();
    c.barrier();
    for (float v : out)
      if (v != want) bad[rk.rank()] = 1;
  });
  const double wall = now_s() - t0;
  for (char b : bad) values_ok = values_ok && !b;
  if (!rep.ok()) std::fprintf(stderr, "sim_scale: %d ranks: %s\n", ranks, rep.first_error().c_str());
  return {ranks, wall, rep.ok() && values_ok};
}

// ---------------------------------------------------------------------------------------
// Gloo: one process per rank.

#ifdef BENCH_HAVE_GLOO
// A worker: joins the group through the FileStore in `dir`, all-reduces a float32 tensor
// of `count` elements warmup + reps times (each after a barrier, values refilled before),
// checks the sums, and writes its times (one per line) to dir/times.RANK.
int gloo_worker(int rank, int size, const std::string& dir, size_t count, int warmup, int reps) {
  at::set_num_threads(1);
  auto store = c10::make_intrusive<c10d::FileStore>(dir + "/store", size);
  auto opts = c10d::ProcessGroupGloo::Options::create(std::chrono::milliseconds(300000));
  opts->devices.push_back(c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1"));
  auto pg = c10::make_intrusive<c10d::ProcessGroupGloo>(store, rank, size, opts);
  std::vector<at::Tensor> t{at::empty({static_cast<int64_t>(count)}, at::kFloat)};
  const float want = static_cast<float>(size) * (size + 1) / 2;
  std::vector<double> times;
  for (int it = 0; it < warmup + reps; ++it) {
    t[0].fill_(static_cast<float>(rank + 1));
    pg->barrier()->wait();
    const double t0 = now_s();
    pg->allreduce(t)->wait();
    const double dt = now_s() - t0;
    if (!t[0].eq(want).all().item<bool>()) {
      std::fprintf(stderr, "gloo worker %d: wrong all-reduce result\n", rank);
      return 1;
    }
    if (it >= warmup) times.push_back(dt);
  }
  pg->barrier()->wait();
  std::ofstream f(dir + "/times." + std::to_string(rank) + ".tmp");
  f << "threads " << opts->threads << "\n";
  for (double d : times) f << d << "\n";
  f.close();
  if (!f) {
    std::fprintf(stderr, "gloo worker %d: cannot write its times to %s\n", rank, dir.c_str());
    return 1;
  }
  std::rename((dir + "/times." + std::to_string(rank) + ".tmp").c_str(), (dir + "/times." + std::to_string(rank)).c_str());
  return 0;
}
#endif

struct GlooRun {
  double median_s = NAN;
  int threads = 0;
  std::string error;  // empty when it ran
};

// Spawns `size` workers (this executable with --gloo-worker), waits at most `limit_s`
// seconds (then kills them), and reads their times: an all-reduce's time is the slowest
// rank's, the result the median over the repetitions.
GlooRun run_gloo(int size, size_t count, int warmup, int reps, double limit_s) {
  GlooRun res;
#ifndef BENCH_HAVE_GLOO
  (void)size, (void)count, (void)warmup, (void)reps, (void)limit_s;
  res.error = "not built: c10d's Gloo headers were not found (Debian: libgloo-dev)";
  return res;
#else
  char tmpl[] = "/tmp/accel-bench-gloo-XXXXXX";
  if (!mkdtemp(tmpl)) {
    res.error = "mkdtemp failed";
    return res;
  }
  const std::string dir = tmpl;
  char exe[4096];
  const ssize_t len = readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (len <= 0) {
    res.error = "cannot find /proc/self/exe";
    return res;
  }
  exe[len] = '\0';
  std::vector<pid_t> pids;
  for (int r = 0; r < size; ++r) {
    std::vector<std::string> args = {exe, "--gloo-worker", std::to_string(r), "--gloo-size", std::to_string(size),
                                     "--gloo-dir", dir, "--count", std::to_string(count), "--warmup", std::to_string(warmup),
                                     "--reps", std::to_string(reps)};
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    const pid_t pid = fork();
    if (pid == 0) {
      dup2(2, 1);  // a worker's stdout goes to stderr: stdout carries only the results
      execv(exe, argv.data());
      _exit(127);
    }
    if (pid < 0) {
      res.error = "fork failed";
      break;
    }
    pids.push_back(pid);
  }
  const double deadline = now_s() + limit_s;
  int failed = res.error.empty() ? 0 : 1;
  std::string first_failure;
  size_t left = pids.size();
  std::vector<bool> reaped(pids.size(), false);
  while (left > 0) {
    for (size_t i = 0; i < pids.size(); ++i) {
      if (reaped[i]) continue;
      int st = 0;
      if (waitpid(pids[i], &st, WNOHANG) == pids[i]) {
        reaped[i] = true;
        --left;
        if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
          ++failed;
          if (first_failure.empty())
            first_failure = "worker " + std::to_string(i) +
                            (WIFEXITED(st) ? " exited with status " + std::to_string(WEXITSTATUS(st))
                                           : " was killed by signal " + std::to_string(WIFSIGNALED(st) ? WTERMSIG(st) : 0));
        }
      }
    }
    if (left > 0 && now_s() > deadline) {
      for (size_t i = 0; i < pids.size(); ++i)
        if (!reaped[i]) kill(pids[i], SIGKILL);
      for (size_t i = 0; i < pids.size(); ++i)
        if (!reaped[i]) waitpid(pids[i], nullptr, 0);
      res.error = "timed out after " + std::to_string(static_cast<int>(limit_s)) + " s";
      break;
    }
    if (left > 0) usleep(20000);
  }
  if (res.error.empty() && failed) res.error = std::to_string(failed) + " worker(s) failed (" + first_failure + ")";
  std::vector<double> slowest(reps, 0.0);
  for (int r = 0; r < size && res.error.empty(); ++r) {
    std::ifstream f(dir + "/times." + std::to_string(r));
    std::string word;
    int threads = 0;
    if (!(f >> word >> threads)) {
      res.error = "worker " + std::to_string(r) + " wrote no times";
      break;
    }
    res.threads = threads;
    for (int k = 0; k < reps; ++k) {
      double d = 0;
      if (!(f >> d)) {
        res.error = "worker " + std::to_string(r) + " wrote too few times";
        break;
      }
      slowest[k] = std::max(slowest[k], d);
    }
  }
  if (res.error.empty()) res.median_s = median(slowest);
  std::string rm = "rm -rf '" + dir + "'";
  if (std::system(rm.c_str()) != 0) std::fprintf(stderr, "sim_allreduce: could not remove %s\n", dir.c_str());
  return res;
#endif
}

// ---------------------------------------------------------------------------------------

struct Config {
  bool quick = false, gloo = true, scale = true, rounding = true;
  int ranks = 8, mib = 64, reps = 0, warmup = -1, engine_threads = 0, gloo_reps = 0;
  double scale_limit = 60.0;
  int scale_max = 65536;
};

[[noreturn]] void usage(const char* argv0) {
  std::fprintf(stderr,
               "usage: %s [--quick] [--ranks N] [--mib M] [--reps K] [--warmup K] [--engine-threads N | --threads N]\n"
               "          [--gloo-reps K] [--no-gloo] [--no-scale] [--no-rounding] [--scale-limit SECONDS]\n"
               "          [--scale-max RANKS]\n",
               argv0);
  std::exit(2);
}

long num_arg(int argc, char** argv, int& i, long lo, long hi) {
  if (i + 1 >= argc) usage(argv[0]);
  char* end = nullptr;
  const long v = std::strtol(argv[++i], &end, 10);
  if (*end != '\0' || v < lo || v > hi) usage(argv[0]);
  return v;
}

std::string json_num(double v, const char* fmt) {
  if (!std::isfinite(v)) return "null";
  char buf[64];
  std::snprintf(buf, sizeof buf, fmt, v);
  return buf;
}

std::string json_str(const std::string& s) {
  std::string o = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') o += '\\';
    o += (static_cast<unsigned char>(c) < 0x20) ? ' ' : c;
  }
  return o + "\"";
}

}  // namespace

int main(int argc, char** argv) {
  // The hidden worker mode of the Gloo baseline.
  if (argc > 1 && std::strcmp(argv[1], "--gloo-worker") == 0) {
#ifdef BENCH_HAVE_GLOO
    int rank = -1, size = 0, warmup = 1, reps = 1;
    size_t count = 0;
    std::string dir;
    for (int i = 1; i + 1 < argc; i += 2) {
      const std::string a = argv[i], v = argv[i + 1];
      if (a == "--gloo-worker") rank = std::atoi(v.c_str());
      else if (a == "--gloo-size") size = std::atoi(v.c_str());
      else if (a == "--gloo-dir") dir = v;
      else if (a == "--count") count = std::strtoull(v.c_str(), nullptr, 10);
      else if (a == "--warmup") warmup = std::atoi(v.c_str());
      else if (a == "--reps") reps = std::atoi(v.c_str());
    }
    if (rank < 0 || size < 1 || dir.empty() || count == 0) {
      std::fprintf(stderr, "gloo worker: bad arguments\n");
      return 2;
    }
    try {
      return gloo_worker(rank, size, dir, count, warmup, reps);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "gloo worker %d: %s\n", rank, e.what());
      return 1;
    }
#else
    return 2;
#endif
  }

  Config cfg;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--quick") cfg.quick = true;
    else if (a == "--no-gloo") cfg.gloo = false;
    else if (a == "--no-scale") cfg.scale = false;
    else if (a == "--no-rounding") cfg.rounding = false;
    else if (a == "--ranks") cfg.ranks = static_cast<int>(num_arg(argc, argv, i, 1, 4096));
    else if (a == "--mib") cfg.mib = static_cast<int>(num_arg(argc, argv, i, 1, 4096));
    else if (a == "--reps") cfg.reps = static_cast<int>(num_arg(argc, argv, i, 1, 1000));
    else if (a == "--warmup") cfg.warmup = static_cast<int>(num_arg(argc, argv, i, 0, 1000));
    else if (a == "--engine-threads" || a == "--threads") cfg.engine_threads = static_cast<int>(num_arg(argc, argv, i, 0, 1024));
    else if (a == "--gloo-reps") cfg.gloo_reps = static_cast<int>(num_arg(argc, argv, i, 1, 1000));
    else if (a == "--scale-limit") cfg.scale_limit = static_cast<double>(num_arg(argc, argv, i, 1, 3600));
    else if (a == "--scale-max") cfg.scale_max = static_cast<int>(num_arg(argc, argv, i, 1, 1 << 20));
    else if (a == "-h" || a == "--help") usage(argv[0]);
    else std::fprintf(stderr, "sim_allreduce: ignoring unknown option '%s'\n", a.c_str());
  }
  bool scale_limit_given = false;
  for (int i = 1; i < argc; ++i) scale_limit_given = scale_limit_given || std::strcmp(argv[i], "--scale-limit") == 0;
  const int reps = cfg.reps > 0 ? cfg.reps : (cfg.quick ? 3 : 9);
  const int warmup = cfg.warmup >= 0 ? cfg.warmup : 1;
  const int gloo_reps = cfg.gloo_reps > 0 ? cfg.gloo_reps : (cfg.quick ? 2 : 5);
  if (cfg.quick && !scale_limit_given) cfg.scale_limit = 10.0;
  const int engine_threads =
      cfg.engine_threads > 0 ? cfg.engine_threads : std::max(1, static_cast<int>(std::thread::hardware_concurrency()));

  const size_t bytes = static_cast<size_t>(cfg.mib) << 20;
  const size_t count = bytes / sizeof(float);
  const int n = cfg.ranks;

  std::fprintf(stderr, "sim_allreduce: %d ranks x %d MiB float32, %d reps (+%d warm-up), engine threads %d\n", n,
               cfg.mib, reps, warmup, engine_threads);

  SimRun oop, inp;
  {
    // the memcpy of the bound moves the all-reduce's traffic: ranks x bytes read and written
    Buffer copy_src(count * n), copy_dst(count * n);
    for (size_t i = 0; i < copy_src.count; ++i) copy_src.p[i] = static_cast<float>(i & 1023);
    oop = sim_allreduce(n, count, warmup, reps, cfg.engine_threads, false, copy_src, copy_dst);
    std::fprintf(stderr, "sim_allreduce: out of place %.4f s (inside the executing call %.4f s) (%s); memcpy %.4f s\n",
                 oop.median_s, oop.exec_s, oop.ok ? "values ok" : oop.error.c_str(), std::min(oop.memcpy_s, oop.memcpy_1t_s));
    inp = sim_allreduce(n, count, warmup, reps, cfg.engine_threads, true, copy_src, copy_dst);
    std::fprintf(stderr, "sim_allreduce: in place %.4f s (inside the executing call %.4f s) (%s); memcpy %.4f s\n",
                 inp.median_s, inp.exec_s, inp.ok ? "values ok" : inp.error.c_str(), std::min(inp.memcpy_s, inp.memcpy_1t_s));
    if (std::memcmp(copy_src.p, copy_dst.p, copy_src.count * sizeof(float)) != 0) {
      std::fprintf(stderr, "sim_allreduce: the memcpy's copy differs\n");
      return 1;
    }
  }

  GlooRun gloo;
  if (cfg.gloo) {
    std::fprintf(stderr, "sim_allreduce: gloo, %d processes, %d reps (+1 warm-up)\n", n, gloo_reps);
    gloo = run_gloo(n, count, 1, gloo_reps, cfg.quick ? 120.0 : 240.0);
    if (!gloo.error.empty()) {  // once more: a rendezvous of 8 processes on a busy machine can fail
      std::fprintf(stderr, "sim_allreduce: gloo: %s; trying again\n", gloo.error.c_str());
      gloo = run_gloo(n, count, 1, gloo_reps, cfg.quick ? 120.0 : 240.0);
    }
    if (gloo.error.empty())
      std::fprintf(stderr, "sim_allreduce: gloo %.4f s\n", gloo.median_s);
    else
      std::fprintf(stderr, "sim_allreduce: gloo: %s\n", gloo.error.c_str());
  } else {
    gloo.error = "skipped (--no-gloo)";
  }

  const double traffic = 2.0 * n * static_cast<double>(bytes);
  const double bound_s = std::min(oop.memcpy_s, oop.memcpy_1t_s);
  const double bound_inplace_s = std::min(inp.memcpy_s, inp.memcpy_1t_s);
  const double algbw = static_cast<double>(bytes) / oop.median_s / 1e9;
  const double busbw = algbw * 2.0 * (n - 1) / n;
  std::printf("{\"bench\":\"sim_allreduce\",\"bytes\":%zu,\"ranks\":%d,\"dtype\":\"float32\",\"op\":\"sum\",\"reps\":%d,"
              "\"sim_s\":%s,\"sim_min_s\":%s,\"sim_inplace_s\":%s,\"engine_threads\":%d,\"values_ok\":%s,"
              "\"traffic_model\":\"2*ranks*bytes\",\"traffic_bytes\":%.0f,"
              "\"memcpy_gbps\":%s,\"memcpy_1t_gbps\":%s,\"memcpy_engine_threads_gbps\":%s,\"bound_s\":%s,"
              "\"vs_memcpy_bound\":%s,\"inplace_vs_memcpy_bound\":%s,\"sim_traffic_gbps\":%s,"
              "\"gloo_s\":%s,\"gloo_reps\":%d,\"gloo_threads\":%d,\"vs_gloo\":%s,\"inplace_vs_gloo\":%s,\"bound_vs_gloo\":%s,\"gloo\":%s,"
              "\"sim_algbw_gbps\":%s,\"sim_busbw_gbps\":%s,\"gloo_algbw_gbps\":%s}\n",
              bytes, n, reps, json_num(oop.median_s, "%.5f").c_str(), json_num(oop.min_s, "%.5f").c_str(),
              json_num(inp.median_s, "%.5f").c_str(), engine_threads, (oop.ok && inp.ok) ? "true" : "false", traffic,
              json_num(traffic / bound_s / 1e9, "%.2f").c_str(), json_num(traffic / oop.memcpy_1t_s / 1e9, "%.2f").c_str(),
              json_num(traffic / oop.memcpy_s / 1e9, "%.2f").c_str(), json_num(bound_s, "%.5f").c_str(),
              json_num(bound_s / oop.median_s, "%.3f").c_str(), json_num(bound_inplace_s / inp.median_s, "%.3f").c_str(),
              json_num(traffic / oop.median_s / 1e9, "%.2f").c_str(), json_num(gloo.median_s, "%.4f").c_str(), gloo_reps,
              gloo.threads, json_num(gloo.median_s / oop.median_s, "%.1f").c_str(), json_num(gloo.median_s / inp.median_s, "%.1f").c_str(),
              json_num(gloo.median_s / bound_s, "%.1f").c_str(),
              json_str(gloo.error.empty() ? "ok" : gloo.error).c_str(), json_num(algbw, "%.3f").c_str(),
              json_num(busbw, "%.3f").c_str(), json_num(static_cast<double>(bytes) / gloo.median_s / 1e9, "%.3f").c_str());
  std::fflush(stdout);
  if (!oop.ok || !inp.ok) {
    std::fprintf(stderr, "sim_allreduce: FAILED: %s\n", (!oop.ok ? oop.error : inp.error).c_str());
    return 1;
  }

  if (cfg.rounding) {
    // NCCL's rounding against one fp32 rounding, side by side on the same inputs: the
    // engine's reduce kernel (comm::reduce_nccl, the ring's order, each operation rounded to
    // the type) and the rank-order fp32 accumulation rounded once (comm::reduce, what the
    // simulator did before NCCL's rounding, and Gloo's), one thread, every rank's 8 MiB.
    const size_t rb = 8u << 20;
    for (DataType t : {DataType::Float32, DataType::BFloat16, DataType::Float16}) {
      const size_t es = accel::comm::dtype_size(t), elems = rb / es;
      std::vector<std::vector<uint16_t>> in(static_cast<size_t>(n), std::vector<uint16_t>(rb / 2));
      std::vector<const void*> srcs;
      for (int q = 0; q < n; ++q) {
        for (size_t i = 0; i < in[q].size(); ++i)  // finite values of every type: small exponents
          in[q][i] = static_cast<uint16_t>(0x3c00u + ((i * 2654435761u + static_cast<size_t>(q) * 97u) % 0x3ffu));
        srcs.push_back(in[q].data());
      }
      std::vector<uint16_t> out(rb / 2);
      accel::comm::NcclOrder ring;
      ring.count = elems;
      std::vector<double> once_t, nccl_t;
      for (int k = 0; k < warmup + reps; ++k) {
        auto t0 = std::chrono::steady_clock::now();
        accel::comm::reduce(out.data(), srcs.data(), n, 0, elems, t, RedOp::Sum, 1.0);
        auto t1 = std::chrono::steady_clock::now();
        accel::comm::reduce_nccl(out.data(), srcs.data(), n, 0, elems, t, RedOp::Sum, 1.0, ring);
        auto t2 = std::chrono::steady_clock::now();
        if (k < warmup) continue;
        once_t.push_back(std::chrono::duration<double>(t1 - t0).count());
        nccl_t.push_back(std::chrono::duration<double>(t2 - t1).count());
      }
      const double a = median(once_t), b = median(nccl_t);
      std::printf("{\"bench\":\"sim_rounding\",\"dtype\":\"%s\",\"op\":\"sum\",\"ranks\":%d,\"bytes_per_rank\":%zu,"
                  "\"reps\":%d,\"once_s\":%.5f,\"nccl_s\":%.5f,\"nccl_gbps\":%.2f,\"ratio\":%.3f}\n",
                  accel::comm::dtype_name(t), n, rb, reps, a, b, static_cast<double>(rb) * n / b / 1e9, b / a);
      std::fflush(stdout);
    }
  }

  if (cfg.scale) {
    // Worlds of 256, 512, ... ranks; the next size is skipped when its predicted time
    // (this one's times the last growth factor, at least 4, plus 25%) passes the limit.
    const int colls = 4;
    const size_t small = 1024;  // 4 KiB of float32
    std::vector<ScalePoint> pts;
    bool all_ok = true;
    for (int r = 256; r <= cfg.scale_max; r *= 2) {
      ScalePoint p{r, NAN, false};
      try {
        p = sim_scale_point(r, colls, small);
      } catch (const std::exception& e) {  // e.g. no thread left for a rank: the message names the limit
        std::fprintf(stderr, "sim_scale: %d ranks: %s\n", r, e.what());
      }
      std::fprintf(stderr, "sim_scale: %d ranks %.2f s%s\n", r, p.wall_s, p.ok ? "" : " (FAILED)");
      all_ok = all_ok && p.ok;
      pts.push_back(p);
      if (!p.ok || p.wall_s > cfg.scale_limit) break;
      // The engine's cost per collective grows about quadratically with the ranks (see
      // docs/benchmarks.md), so the next size is predicted at >= 4x this one, or more when
      // the last doubling already cost more.
      double growth = 4.0;
      if (pts.size() >= 2) growth = std::max(4.0, p.wall_s / pts[pts.size() - 2].wall_s);
      if (p.wall_s * growth * 1.25 > cfg.scale_limit) break;  // with a margin: the growth itself grows
    }
    int largest = 0;
    for (const auto& p : pts)
      if (p.ok && p.wall_s <= cfg.scale_limit) largest = std::max(largest, p.ranks);
    std::printf("{\"bench\":\"sim_scale\",\"collective_bytes\":%zu,\"allreduces_per_rank\":%d,\"barriers_per_rank\":1,"
                "\"limit_s\":%.0f,\"ranks\":[",
                small * sizeof(float), colls, cfg.scale_limit);
    for (size_t i = 0; i < pts.size(); ++i) std::printf("%s%d", i ? "," : "", pts[i].ranks);
    std::printf("],\"wall_s\":[");
    for (size_t i = 0; i < pts.size(); ++i) std::printf("%s%.3f", i ? "," : "", pts[i].wall_s);
    std::printf("],\"largest_ranks\":%d,\"ok\":%s}\n", largest, all_ok ? "true" : "false");
    std::fflush(stdout);
    if (!all_ok) return 1;
  }
  return 0;
}
