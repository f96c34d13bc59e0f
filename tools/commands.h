// The `accel` tool's subcommands, one file each: their entries and argument structs, filled
// by main's command line (tools/accel.cpp) and run by its dispatch. Each entry returns the
// process exit status; errors are thrown (accel::Error: 2, another exception: 1, main says
// which). `accel launch` has its own header, tools/launch.h.
#pragma once

#include <cstdint>
#include <string>

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
  bool json = false;
};

int sim_bench(const BenchArgs& a);

// accel sim topologies (tools/sim.cpp)
int sim_topologies();

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
};

int estimate(const EstimateArgs& a);

}  // namespace accel::tools
