// The `accel` tool's subcommands that need the runtime (and so libtorch), one file each:
// their entries and argument structs, filled by main's command line (tools/accel.cpp). They
// are built into a module of their own, libaccel-tools.so (tools/module.cpp), which the tool
// loads only when one of them runs: `accel launch`, `accel --version` and `--help` never
// load libtorch (0.4 s of start-up with Debian's, 286 libraries). Each entry returns the
// process exit status; errors are thrown (accel::Error: 2, another exception: 1, the
// module's run() says which). `accel launch` has its own header, tools/launch.h.
#pragma once

#include <cstdint>
#include <cstdio>
#include <exception>
#include <string>
#include <vector>

#include "base/status.h"

namespace accel::tools {

// accel sim bench (tools/sim.cpp)
struct BenchArgs {
  std::string op = "all_reduce";
  std::string ranks = "8";
  std::string min_bytes = "1MiB", max_bytes = "64MiB", predict_to = "8GiB";
  std::string topology = "8xH100";
  std::string dtype = "float32";
  std::string redop = "sum";
  double factor = 2.0;
  int iters = 5, warmup = 1;
  std::string max_measure = "2GiB";
  std::string algo;  // NCCL_ALGO's syntax; empty: NCCL_ALGO, else the cost model's pick
  bool json = false;
};

int sim_bench(const BenchArgs& a);

// accel sim topologies (tools/sim.cpp)
int sim_topologies();

// accel sim step (tools/sim.cpp): a training step's collective pattern replayed on a world
// of any size (sim/replay.h), its predicted time
struct StepArgs {
  std::string topology;  // default: the recording's, or the ranks' nodes of 8xH100 (8xH100, or Nx8xH100-IB)
  int ranks = 0;         // 0: the recording's world size, else 8
  std::string program;   // a recording (ACCEL_SIM_PROGRAM) instead of a pattern
  std::string strategy = "ddp";
  double params = 8.03e9;
  double tokens = 8192;
  int layers = 32;
  std::string bucket = "25MiB";
  std::vector<std::string> slow;  // RANK:FACTOR
  bool json = false;
};
int sim_step(const StepArgs& a);

// accel merge-weights DIR OUT (tools/merge_weights.cpp)
int merge_weights(const std::string& dir, const std::string& out);

// accel env (tools/env.cpp; the one subcommand that includes libtorch)
int env();

// accel estimate-memory (tools/estimate.cpp)
struct EstimateArgs {
  std::string model;
  std::string precision = "no", dtype = "float32", optimizer = "adamw", strategy, attention = "auto";
  std::string lora_targets;
  int world = 1;
  int64_t batch = 1, seq = 0, lora_rank = 0;
  bool ckpt = false, json = false;
  // issue 37: offload and quantized bases ("" = not given: searched under --budget)
  std::string offload, quantization;
  bool double_quant = false;
  // the plans that fit (--budget): the device and host memory per GPU (sizes; "" = none),
  // the preset whose rates price the step, how many plans to print and their order
  std::string budget, host_budget, topology = "8xH100", sort = "fidelity";
  int plans = 10;
};

int estimate(const EstimateArgs& a);

// What main parsed, for the module: the command ("env", "sim bench", "sim topologies",
// "estimate-memory", "merge-weights") and its arguments.
struct Invocation {
  std::string command;
  BenchArgs bench;
  StepArgs step;
  EstimateArgs estimate;
  std::string merge_dir, merge_out;
};

// Runs a command and turns what it throws into the tool's message ("accel: ...") and exit
// status (accel::Error: 2, another exception: 1): the executable's launch and the module's
// commands alike.
template <class F>
int report_errors(F&& run) {
  try {
    return run();
  } catch (const accel::Error& e) {
    std::fprintf(stderr, "accel: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "accel: %s\n", e.what());
    return 1;
  }
}

// The module's entry (tools/module.cpp), looked up by main with dlsym: runs the command,
// prints an error as "accel: ..." and returns the exit status. `built_against` is main's
// kToolsInterface: a module from another build refuses to run (2) instead of misreading
// the Invocation.
constexpr int kToolsInterface = 2;
using ToolsEntry = int (*)(const Invocation* inv, int built_against);
constexpr const char* kToolsEntryName = "accel_tools_run";

}  // namespace accel::tools
