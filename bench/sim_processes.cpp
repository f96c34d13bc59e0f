// bench_sim_processes: the simulator as processes (ACCEL_BACKEND=sim: the nccl backend on
// libaccel-nccl-sim.so), two measurements.
//
// 1. "sim_processes_allreduce": a float32 all-reduce (sum, in place) across N processes of
//    this machine on the simulated NCCL, against the memcpy bound and against accel's Gloo
//    backend over loopback in the same run. For each N (2, 4, 8) and size S (1, 4, 16, 64,
//    256 MiB; --quick: 2 and 4 processes, 1 and 16 MiB):
//
//      {"bench":"sim_processes_allreduce","procs":8,"bytes":…,"sim_s":…,"gloo_s":…,"bound_s":…,
//       "busbw_gbps":…,"vs_memcpy_bound":…,"vs_gloo":…,…}
//
//    sim_s, gloo_s: N workers (this executable re-run with --worker, torchrun's variables
//    set, each joining its world through world::join_world as accel_init does), one launch
//    per backend. A repetition is a barrier, then the all-reduce and wait(), timed on rank 0
//    (the all-reduce ends on every rank together), then a barrier before the ranks check
//    their results (so that rank 0's clock never waits for a core behind the others'
//    checks); the median over the repetitions after a warm-up. Rank r's element i is
//    (r + 1) + (i % 8) / 4, so every sum is exact, and every element of every result is
//    checked on every rank: a wrong value fails the benchmark.
//    The simulated ranks' buffers are their simulated GPUs' memory (the library's cudaMalloc:
//    its arena, which the peers reach with memcpy), as a program's tensors on GPUs are;
//    --host-buffers puts them in the host's heap instead (the peers reach them through the
//    segment or by cross-memory attach). "buffers" says which.
//    bound_s: the time this machine takes to memcpy 2(N-1)·S bytes (nccl-tests' bus bytes
//    of a ring all-reduce, over the N ranks: bench_gloo_allreduce's bound), timed here with
//    the machine's cores as threads and with one thread, the faster median.
//    busbw_gbps = S/sim_s·2(N-1)/N; vs_memcpy_bound = bound_s / sim_s (throughput over the
//    bound; target >= 0.5); vs_gloo = gloo_s / sim_s (target >= 5).
//
// 2. "sim_processes_overhead": the README's main job (examples/c/train_digits, its defaults)
//    as 4 simulated processes through `accel launch --backend sim -n 4` against 4 ranks of
//    the in-process simulator (train_digits --ranks 4): wall seconds, medians of 3 runs;
//    ratio = processes_s / in_process_s (lower is better), and whether both reached the
//    same accuracy (they are bit-identical). The same with `accel launch --warm-start` (the
//    4 processes forked from one start of the program after its libraries loaded):
//    warm_processes_s, ratio_warm_start, accuracy_warm_start.
//
//   bench_sim_processes [--quick] [--procs 2,4,8] [--mib 1,4,16,64,256] [--reps K]
//                       [--no-gloo] [--no-overhead] [--host-buffers]
// Without --reps: 9 repetitions (Gloo 5) from 16 MiB, 60 (Gloo 15) below, where one lasts
// tens to hundreds of microseconds and the processes' wake-ups scatter it: the median of 9
// moved by 2x from run to run.
#include <dlfcn.h>
#include <fcntl.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "bench/procs.h"
#include "runtime/world.h"

#ifndef ACCEL_TOOL_PATH
#error "ACCEL_TOOL_PATH (build/tools/accel) must be defined"
#endif
#ifndef SIM_NCCL_LIBRARY_PATH
#error "SIM_NCCL_LIBRARY_PATH (build/libaccel-nccl-sim.so) must be defined"
#endif
#ifndef TRAIN_DIGITS_PATH
#error "TRAIN_DIGITS_PATH (build/examples/train_digits) must be defined"
#endif

using namespace bench;
namespace comm = accel::comm;
namespace world = accel::world;

namespace {

constexpr size_t kMiB = 1 << 20;

std::vector<int> parse_list(const std::string& s) {
  std::vector<int> v;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ','))
    if (!item.empty()) v.push_back(std::atoi(item.c_str()));
  return v;
}

// `count` floats: the simulated GPU's memory (the simulated library's cudaMalloc, the library
// the runtime loaded), or the host's heap.
struct Buffer {
  using Malloc = int (*)(void**, size_t);
  using Free = int (*)(void*);
  std::vector<float> host;
  float* device = nullptr;
  Free release = nullptr;
  Buffer(size_t count, bool on_device) {
    if (!on_device) {
      host.resize(count);
      return;
    }
    void* lib = dlopen(std::getenv("ACCEL_SIM_NCCL_LIBRARY"), RTLD_NOW | RTLD_NOLOAD);
    auto alloc = lib ? reinterpret_cast<Malloc>(dlsym(lib, "cudaMalloc")) : nullptr;
    release = lib ? reinterpret_cast<Free>(dlsym(lib, "cudaFree")) : nullptr;
    void* p = nullptr;
    if (!alloc || !release || alloc(&p, count * sizeof(float)) != 0)
      throw std::runtime_error("cannot allocate the simulated GPU's memory");
    device = static_cast<float*>(p);
  }
  ~Buffer() {
    if (device) release(device);
  }
  float* data() { return device ? device : host.data(); }
};

// A worker: joins its world over `backend`, then for each size runs warm-up + reps
// all-reduces, checks every element, and (rank 0) writes "bytes median_s" lines to `out`.
int worker(const std::string& backend, const std::vector<int>& mib, int reps, int small_reps, const std::string& out,
           bool host_buffers) {
  try {
    auto c = world::join_world(backend, std::chrono::seconds(120), false);
    const int rank = c->rank(), n = c->size();
    std::ofstream f;
    if (rank == 0) f.open(out);
    for (int m : mib) {
      const size_t count = static_cast<size_t>(m) * kMiB / sizeof(float);
      Buffer storage(count, backend == "sim" && !host_buffers);
      float* buf = storage.data();
      std::vector<double> times;
      const int k = m < 16 ? std::max(reps, small_reps) : reps;
      for (int r = 0; r <= k; ++r) {
        for (size_t i = 0; i < count; ++i) buf[i] = static_cast<float>(rank + 1) + static_cast<float>(i % 8) / 4.f;
        c->barrier();
        const double t0 = mono_s();
        c->all_reduce(buf, buf, count, comm::DataType::Float32, comm::RedOp::Sum)->wait();
        const double t = mono_s() - t0;
        if (r > 0) times.push_back(t);
        // every rank checks its result once all have stopped their clocks: rank 0's clock must
        // not wait for a core behind the others' checks (on 2 cores, 4 processes' checks of
        // 1 MiB put 220 us into half of its repetitions)
        c->barrier();
        for (size_t i = 0; i < count; ++i) {
          const float want = static_cast<float>(n * (n + 1) / 2) + static_cast<float>(n) * static_cast<float>(i % 8) / 4.f;
          if (buf[i] != want) {
            std::fprintf(stderr, "rank %d: %s all-reduce of %d MiB: element %zu is %g, not %g\n", rank, backend.c_str(), m,
                         i, static_cast<double>(buf[i]), static_cast<double>(want));
            return 3;
          }
        }
      }
      if (rank == 0) f << static_cast<size_t>(m) * kMiB << " " << median(times) << "\n";
    }
    c->barrier();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "worker (%s): %s\n", backend.c_str(), e.what());
    return 2;
  }
  return 0;
}

// Launches n workers of `backend`; the medians by size (empty on failure, with `error`).
std::vector<std::pair<size_t, double>> launch(const std::string& backend, int n, const std::vector<int>& mib, int reps,
                                              int small_reps, bool host_buffers, std::string& error) {
  const std::string dir = make_temp_dir("accel-bench-simproc");
  const std::string out = dir + "/times.txt";
  const int port = free_port();
  std::string sizes;
  for (int m : mib) sizes += (sizes.empty() ? "" : ",") + std::to_string(m);
  std::vector<pid_t> pids;
  for (int r = 0; r < n; ++r) {
    std::vector<std::string> args = {self_exe(), "--worker", backend, "--mib", sizes, "--reps", std::to_string(reps),
                                     "--small-reps", std::to_string(small_reps), "--out", out};
    if (host_buffers) args.push_back("--host-buffers");
    pids.push_back(spawn(args, -1, -1,
                         {"RANK=" + std::to_string(r), "WORLD_SIZE=" + std::to_string(n),
                          "LOCAL_RANK=" + std::to_string(r), "LOCAL_WORLD_SIZE=" + std::to_string(n),
                          "MASTER_ADDR=127.0.0.1", "MASTER_PORT=" + std::to_string(port), "OMP_NUM_THREADS=1",
                          // this executable links the runtime itself: the library is not beside it
                          std::string("ACCEL_SIM_NCCL_LIBRARY=") + SIM_NCCL_LIBRARY_PATH}));
  }
  error = wait_all(pids, 1200);
  std::vector<std::pair<size_t, double>> res;
  if (error.empty()) {
    std::ifstream f(out);
    size_t b;
    double t;
    while (f >> b >> t) res.emplace_back(b, t);
  }
  remove_dir(dir);
  return res;
}

// Seconds to memcpy `total` bytes on this machine (bench::memcpy_bound, timed on up to 256 MiB).
double memcpy_bound_s(double total) {
  std::vector<char> src(static_cast<size_t>(std::min(total, 256.0 * kMiB)), 1), dst(src.size(), 0);
  return memcpy_bound(total, src, dst, 5).bound_s;
}

// Wall seconds of a shell command (its output to `log`); NAN when it fails.
double timed_run(const std::string& cmd, const std::string& log) {
  const double t0 = mono_s();
  const int rc = std::system((cmd + " > '" + log + "' 2>&1").c_str());
  return rc == 0 ? mono_s() - t0 : NAN;
}

std::string accuracy_of(const std::string& log) {
  std::ifstream f(log);
  std::string line, acc;
  while (std::getline(f, line)) {
    const auto at = line.find("accuracy: ");
    if (at != std::string::npos && line.find("test-accuracy") == std::string::npos) acc = line.substr(at + 10);
  }
  return acc;
}

}  // namespace

int main(int argc, char** argv) {
  bool quick = false, gloo = true, overhead = true, host_buffers = false;
  std::string procs = "2,4,8", mib = "1,4,16,64,256", backend, out;
  int reps = 0, small_reps = 0;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> std::string { return i + 1 < argc ? argv[++i] : ""; };
    if (a == "--quick") quick = true;
    else if (a == "--no-gloo") gloo = false;
    else if (a == "--no-overhead") overhead = false;
    else if (a == "--host-buffers") host_buffers = true;
    else if (a == "--procs") procs = next();
    else if (a == "--mib") mib = next();
    else if (a == "--reps") reps = std::atoi(next().c_str());
    else if (a == "--small-reps") small_reps = std::atoi(next().c_str());  // (the workers')
    else if (a == "--worker") backend = next();
    else if (a == "--out") out = next();
    else std::fprintf(stderr, "bench_sim_processes: ignoring unknown option %s\n", a.c_str());
  }
  if (!backend.empty()) return worker(backend, parse_list(mib), std::max(1, reps), small_reps, out, host_buffers);
  if (quick) {
    if (procs == "2,4,8") procs = "2,4";
    if (mib == "1,4,16,64,256") mib = "1,16";
  }
  const bool have_gloo = gloo && world::backend_names().find("gloo") != std::string::npos;
  int failures = 0;
  for (int n : parse_list(procs)) {
    const std::vector<int> sizes = parse_list(mib);
    std::string err_sim, err_gloo;
    auto sim = launch("sim", n, sizes, reps > 0 ? reps : (quick ? 5 : 9), reps > 0 ? 0 : (quick ? 20 : 60), host_buffers,
                      err_sim);
    std::vector<std::pair<size_t, double>> g;
    if (have_gloo) g = launch("gloo", n, sizes, reps > 0 ? reps : (quick ? 3 : 5), reps > 0 ? 0 : (quick ? 5 : 15), true, err_gloo);
    for (size_t k = 0; k < sizes.size(); ++k) {
      const size_t bytes = static_cast<size_t>(sizes[k]) * kMiB;
      const double sim_s = k < sim.size() ? sim[k].second : NAN;
      const double gloo_s = k < g.size() ? g[k].second : NAN;
      const double bound_s = memcpy_bound_s(2.0 * (n - 1) * static_cast<double>(bytes));
      const double busbw = static_cast<double>(bytes) / sim_s * 2.0 * (n - 1) / n / 1e9;
      const std::string error = !err_sim.empty() ? "sim: " + err_sim : !err_gloo.empty() ? "gloo: " + err_gloo : "";
      if (!err_sim.empty()) ++failures;
      std::printf(
          "{\"bench\":\"sim_processes_allreduce\",\"procs\":%d,\"bytes\":%zu,\"sim_s\":%s,\"gloo_s\":%s,\"bound_s\":%s,"
          "\"busbw_gbps\":%s,\"vs_memcpy_bound\":%s,\"vs_gloo\":%s,\"bound_model\":\"memcpy of 2*(procs-1)*bytes\","
          "\"buffers\":\"%s\",\"values_ok\":%s,\"error\":%s}\n",
          n, bytes, json_num(sim_s, "%.6f").c_str(), json_num(gloo_s, "%.6f").c_str(), json_num(bound_s, "%.6f").c_str(),
          json_num(busbw, "%.3f").c_str(), json_num(bound_s / sim_s, "%.3f").c_str(),
          json_num(gloo_s / sim_s, "%.2f").c_str(), host_buffers ? "host" : "device", err_sim.empty() && err_gloo.empty() ? "true" : "false",
          error.empty() ? "null" : json_str(error).c_str());
      std::fflush(stdout);
    }
  }
  if (overhead) {
    const std::string dir = make_temp_dir("accel-bench-simproc");
    std::vector<double> procs_s, inproc_s, warm_s;
    std::string acc_p, acc_i, acc_w;
    for (int i = 0; i < 3; ++i) {
      procs_s.push_back(timed_run(std::string(ACCEL_TOOL_PATH) + " launch --backend sim -n 4 " + TRAIN_DIGITS_PATH,
                                  dir + "/p.txt"));
      acc_p = accuracy_of(dir + "/p.txt");
      warm_s.push_back(timed_run(std::string(ACCEL_TOOL_PATH) + " launch --warm-start --backend sim -n 4 " +
                                 TRAIN_DIGITS_PATH, dir + "/w.txt"));
      acc_w = accuracy_of(dir + "/w.txt");
      inproc_s.push_back(timed_run(std::string("OMP_NUM_THREADS=1 ") + TRAIN_DIGITS_PATH + " --ranks 4", dir + "/i.txt"));
      acc_i = accuracy_of(dir + "/i.txt");
    }
    remove_dir(dir);
    const double p = median(procs_s), q = median(inproc_s), w = median(warm_s);
    if (!std::isfinite(p) || !std::isfinite(q) || !std::isfinite(w)) ++failures;
    std::printf(
        "{\"bench\":\"sim_processes_overhead\",\"job\":\"train_digits (defaults)\",\"procs\":4,\"processes_s\":%s,"
        "\"in_process_s\":%s,\"ratio\":%s,\"accuracy_processes\":%s,\"accuracy_in_process\":%s,\"same_accuracy\":%s,"
        "\"warm_processes_s\":%s,\"ratio_warm_start\":%s,\"accuracy_warm_start\":%s}\n",
        json_num(p, "%.3f").c_str(), json_num(q, "%.3f").c_str(), json_num(p / q, "%.2f").c_str(), json_str(acc_p).c_str(),
        json_str(acc_i).c_str(), acc_p == acc_i && acc_w == acc_i && !acc_p.empty() ? "true" : "false",
        json_num(w, "%.3f").c_str(), json_num(w / q, "%.2f").c_str(), json_str(acc_w).c_str());
  }
  return failures ? 1 : 0;
}
