// `accel launch`: starts N local processes of a program with torchrun's variables (RANK,
// LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, GROUP_RANK, MASTER_ADDR, MASTER_PORT) and
// accel's configuration (ACCEL_*), relays their output line by line prefixed with the rank,
// forwards SIGINT/SIGTERM/SIGHUP, stops the group when one process fails (SIGTERM, then
// SIGKILL after a grace period), restarts the group up to --max-restarts times and reports
// which rank failed and how. With --backend sim the processes run on simulated GPUs: the
// launcher passes the simulation's settings (ACCEL_SIM_*), gives them an output directory
// and merges what they write there into one report (and one Chrome trace). Torch-free:
// plain C++17 and POSIX (Linux: prctl). See docs/launch.md.
#pragma once

#include <string>
#include <vector>

namespace CLI {
class App;
}

namespace accel::launch {

struct Options {
  int nproc_per_node = 0;  // -n; required, >= 1
  int nnodes = 1;
  int node_rank = 0;
  std::string master_addr = "127.0.0.1";
  long master_port = 29500;  // 0: a free port, picked by the launcher (one node only)
  std::string backend, strategy, mixed_precision, offload;  // ACCEL_*; empty: not set (inherited)
  std::string timeout;                             // seconds, > 0, finite; empty: not set
  int max_restarts = 0;
  std::string log_dir;        // empty: no log files
  double grace_period = 5.0;  // seconds between SIGTERM and SIGKILL
  // the processes forked from one started copy of PROGRAM after its libraries loaded
  // (libaccel-warm-start.so, docs/launch.md "Warm start"); a program that cannot (not a
  // dynamically linked executable, setuid, threads before main) starts each process on its own
  bool warm_start = false;
  // --backend sim only (docs/launch.md, "Simulated GPUs"); empty: not given
  std::string sim_gpu_mem;   // a size (parse_bytes); empty: unlimited
  std::string sim_topology;  // a preset (sim/cost.h); empty: 8xH100
  std::string sim_trace;     // the merged Chrome trace to write
  std::string sim_faults;    // parse_faults' syntax
  std::string sim_report;    // the merged report to write as JSON
  std::vector<std::string> command;  // PROGRAM ARGS... (run() takes them from the subcommand)
};

// Adds the `launch` subcommand to `app`, its options stored into `o` (PROGRAM and what
// follows it are left unparsed: the subcommand's remaining arguments).
CLI::App* add_command(CLI::App& app, Options& o);

// Runs the launcher for the parsed subcommand `sub`; returns the process exit status: 0 when every process exited 0, 1 when
// the group failed (after its restarts), 2 for a usage error (nothing started), 128+signal
// when the launcher was interrupted by SIGINT/SIGTERM/SIGHUP.
int run(const CLI::App& sub, Options o);

}  // namespace accel::launch
