// bench_launch: how long `accel launch -n N` takes to get N processes through their first
// collective.
//
// Each run starts `accel launch -n N --master-port 0 launch_worker DIR` (the real accel tool
// and bench/launch_worker.c, a C program on the public C ABI: accel_init joins the world
// from the launcher's variables with backend Gloo on the CPU, then accel_reduce sums a
// one-element tensor and checks it), and each rank writes CLOCK_REALTIME stamps: main
// entered, accel_init returned, the reduction returned. One JSON line:
//
//   {"bench":"launch","procs":4,"runs":5,"launch_s":…,"exit_s":…,"main_s":…,"init_s":…,…}
//
// launch_s: from just before this process forks the launcher to the moment the last rank's
//   first collective returned (the latest "reduced" stamp), the median over the runs
//   (target: < 1 s). exit_s: to the launcher's exit (waitpid returned). main_s: to the last
//   rank entering main (exec, the dynamic loading of libaccel and libtorch, their static
//   initialisers); init_s: to the last accel_init returning (the rendezvous: TCPStore, rank
//   claims, c10d's Gloo connecting its full mesh). A first, unreported run warms the page
//   cache; its launch_s is first_launch_s.
//
//   bench_launch [--quick] [--runs N] [--procs N] [--accel PATH] [--worker PATH]
//
// Unknown options are ignored with a warning (scripts/bench passes its extra arguments to
// every benchmark).
#include <sys/stat.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "bench/procs.h"

#ifndef ACCEL_TOOL_PATH
#define ACCEL_TOOL_PATH "build/tools/accel"
#endif
#ifndef LAUNCH_WORKER_PATH
#define LAUNCH_WORKER_PATH "build/bench/launch_worker"
#endif

namespace {

using bench::json_num;
using bench::median;

struct Run {
  double launch_s = 0, exit_s = 0, main_s = 0, first_main_s = 0, init_s = 0;
  std::string error;
};

Run run_once(const std::string& accel, const std::string& worker, int procs) {
  Run r;
  const std::string dir = bench::make_temp_dir("accel-bench-launch");
  if (dir.empty()) {
    r.error = "cannot make a temporary directory";
    return r;
  }
  const double t0 = bench::real_s();
  const pid_t pid = bench::spawn({accel, "launch", "-n", std::to_string(procs), "--master-port", "0", worker, dir});
  if (pid < 0) {
    r.error = "fork failed";
    return r;
  }
  const std::string err = bench::wait_all({pid}, 120, "accel launch");
  r.exit_s = bench::real_s() - t0;
  if (!err.empty()) r.error = err;
  double last_main = 0, first_main = 1e300, last_init = 0, last_coll = 0;
  for (int k = 0; k < procs && r.error.empty(); ++k) {
    std::ifstream f(dir + "/rank_" + std::to_string(k));
    double m = 0, i = 0, c = 0;
    if (!(f >> m >> i >> c)) {
      r.error = "rank " + std::to_string(k) + " wrote no time stamps";
      break;
    }
    last_main = std::max(last_main, m);
    first_main = std::min(first_main, m);
    last_init = std::max(last_init, i);
    last_coll = std::max(last_coll, c);
  }
  r.launch_s = last_coll - t0;
  r.main_s = last_main - t0;
  r.first_main_s = first_main - t0;
  r.init_s = last_init - t0;
  bench::remove_dir(dir);
  return r;
}

bool executable_file(const std::string& p) {
  struct stat st {};
  return stat(p.c_str(), &st) == 0 && S_ISREG(st.st_mode) && access(p.c_str(), X_OK) == 0;
}

}  // namespace

int main(int argc, char** argv) {
  int runs = 5, procs = 4;
  std::string accel = ACCEL_TOOL_PATH, worker = LAUNCH_WORKER_PATH;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--quick") runs = 3;
    else if (a == "--runs" && i + 1 < argc) runs = std::atoi(argv[++i]);
    else if (a == "--procs" && i + 1 < argc) procs = std::atoi(argv[++i]);
    else if (a == "--accel" && i + 1 < argc) accel = argv[++i];
    else if (a == "--worker" && i + 1 < argc) worker = argv[++i];
    else if (a == "-h" || a == "--help") {
      std::fprintf(stderr, "usage: %s [--quick] [--runs N] [--procs N] [--accel PATH] [--worker PATH]\n", argv[0]);
      return 2;
    } else if ((a == "--threads" || a == "--model" || a == "--peers") && i + 1 < argc) {
      std::fprintf(stderr, "launch: ignoring %s %s (another benchmark's option)\n", a.c_str(), argv[++i]);
    } else {
      std::fprintf(stderr, "launch: ignoring unknown option '%s'\n", a.c_str());
    }
  }
  if (runs < 1 || procs < 1) {
    std::fprintf(stderr, "launch: --runs and --procs must be at least 1\n");
    return 2;
  }
  for (const auto& p : {accel, worker})
    if (!executable_file(p)) {
      std::fprintf(stderr, "launch: %s is not built (ninja -C build tools/accel bench/launch_worker)\n", p.c_str());
      return 1;
    }

  std::fprintf(stderr, "launch: %s launch -n %d %s, 1 warm-up run + %d\n", accel.c_str(), procs, worker.c_str(), runs);
  const Run first = run_once(accel, worker, procs);
  if (!first.error.empty()) {
    std::fprintf(stderr, "launch: FAILED: %s\n", first.error.c_str());
    return 1;
  }
  std::vector<double> launch, exit, main_s, first_main, init;
  for (int k = 0; k < runs; ++k) {
    const Run r = run_once(accel, worker, procs);
    if (!r.error.empty()) {
      std::fprintf(stderr, "launch: FAILED: %s\n", r.error.c_str());
      return 1;
    }
    std::fprintf(stderr, "launch: run %d: first collective done at %.3f s, launcher exited at %.3f s\n", k + 1, r.launch_s,
                 r.exit_s);
    launch.push_back(r.launch_s);
    exit.push_back(r.exit_s);
    main_s.push_back(r.main_s);
    first_main.push_back(r.first_main_s);
    init.push_back(r.init_s);
  }
  std::printf("{\"bench\":\"launch\",\"procs\":%d,\"backend\":\"gloo\",\"runs\":%d,\"launch_s\":%s,\"exit_s\":%s,"
              "\"first_main_s\":%s,\"main_s\":%s,\"init_s\":%s,\"launch_min_s\":%s,\"launch_max_s\":%s,\"first_launch_s\":%s}\n",
              procs, runs, json_num(median(launch), "%.3f").c_str(), json_num(median(exit), "%.3f").c_str(),
              json_num(median(first_main), "%.3f").c_str(), json_num(median(main_s), "%.3f").c_str(),
              json_num(median(init), "%.3f").c_str(),
              json_num(*std::min_element(launch.begin(), launch.end()), "%.3f").c_str(),
              json_num(*std::max_element(launch.begin(), launch.end()), "%.3f").c_str(),
              json_num(first.launch_s, "%.3f").c_str());
  std::fflush(stdout);
  return 0;
}
