// Worlds whose ranks are not threads: an event-driven replay of each rank's call sequence
// (docs/simulator.md, "Worlds of 100,000 ranks"). Where a World runs one OS thread per rank
// (the ranks are arbitrary code: the C ABI's callbacks, training loops), a replay runs
// programs the simulator knows whole in advance — a training step's collective pattern, a
// benchmark's calls — on the caller's thread, with the World's timing rules (the cost model,
// the virtual clocks, stream order), no data, and O(1) work per call and per rank: matching
// by each rank's call number, a fingerprint compared with the first caller's, a collective
// completed when its last rank posts it, the ranks it blocked woken from a list. 100,000 ranks
// of a data-parallel step take seconds and a few MiB (bench_sim_scale). Torch-free.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "sim/cost.h"

namespace accel::sim {

// One step of a rank's program.
struct ReplayStep {
  enum Kind : uint8_t {
    Compute,  // `seconds` of compute on the rank's clock (times its slowdown)
    Post,     // launch collective `kind` of nccl-tests' size `bytes` (asynchronous, as NCCL)
    Wait,     // wait for this program's post number `post` (0-based, in posting order)
    WaitAll,  // wait for every collective posted so far
  };
  Kind kind = Compute;
  CollKind coll = CollKind::AllReduce;
  comm::DataType dtype = comm::DataType::Float32;
  comm::RedOp op = comm::RedOp::Sum;
  uint64_t bytes = 0;
  double seconds = 0.0;
  uint32_t post = 0;
};

struct ReplayProgram {
  std::string name;
  std::vector<ReplayStep> steps;
  // builders
  ReplayProgram& compute(double seconds);
  // returns this program's post number of the collective (for wait())
  uint32_t post(CollKind coll, uint64_t bytes, comm::DataType dtype = comm::DataType::Float32,
                comm::RedOp op = comm::RedOp::Sum);
  ReplayProgram& wait(uint32_t post);
  ReplayProgram& wait_all();
  uint32_t posts() const { return posts_; }
  bool operator==(const ReplayProgram& o) const;

 private:
  uint32_t posts_ = 0;
};

struct ReplayOptions {
  std::string topology = "8xH100";  // a preset (sim/cost.h), e.g. "12500x8xH100-IB"
  int world_size = 8;
  std::vector<ReplayProgram> programs;  // at least one
  // rank -> index into programs; empty: every rank runs programs[0]
  std::vector<uint32_t> program_of;
  // stragglers: (rank, factor) multiplies that rank's compute
  std::vector<std::pair<int, double>> slowdown;
};

struct ReplayReport {
  bool ok = true;
  Status status = Status::Ok;
  std::string error;                // a mismatch, or a collective some rank never posted
  double predicted_seconds = 0.0;   // the slowest rank's clock at its end
  double fastest_seconds = 0.0;     // the fastest rank's
  int slowest_rank = 0;
  double comm_seconds = 0.0;        // the collectives' durations, summed (one stream)
  uint64_t collectives = 0;         // completed
  uint64_t events = 0;              // steps executed, all ranks together
  std::vector<std::string> algorithms;  // the algorithms the collectives ran, with counts: "ring x640"
};

// What a World recorded of its ranks (WorldOptions::record_program): each rank's computes,
// posted collectives and waits, as programs (ranks with the same calls share one), with the
// world and the time it predicted. Replaying it on its own world size gives that time back;
// on any other size it answers "this step on N GPUs" (docs/simulator.md). The file
// (ACCEL_SIM_PROGRAM for accel_sim_run; accel sim step --program) is JSON.
struct ReplayRecording {
  int world_size = 0;
  std::string topology;
  double predicted_seconds = 0.0;
  std::vector<ReplayProgram> programs;
  std::vector<uint32_t> program_of;  // rank -> program
  // non-empty: calls a replay does not model (send/recv, copies on the host link), named
  std::string approximate;
};
std::string recording_json(const ReplayRecording& rec);
ReplayRecording parse_recording(const std::string& json);  // Error(InvalidArgument) naming what is wrong
ReplayRecording read_recording(const std::string& path);   // Error(IO) when unreadable
// The options that replay `rec` on `world_size` ranks of `topology`: its own program_of at its
// own size; at another size, every rank runs the one program (InvalidArgument when its ranks
// ran different ones).
ReplayOptions replay_options(const ReplayRecording& rec, int world_size, const std::string& topology);

// Runs every rank's program to its end (or until nothing can move) on the calling thread.
// Invalid options (an unknown topology, a world larger than it, a Wait for a post not yet
// made) throw Error(InvalidArgument); what the ranks do wrong (calls that differ, a
// collective some rank never posts) is the report's error, naming the ranks and calls.
ReplayReport replay(const ReplayOptions& opts);

// A training step's collective pattern on `nranks` GPUs of `topo`, compute charged as the
// cost model charges it (2·params·tokens FLOPs forward, twice that backward, at gpu_flops ·
// mfu): "ddp" (the backward in `bucket_bytes` pieces of fp32 gradients, each all-reduced as
// it is ready, then a wait for all), "zero3" (per layer: the bf16 weights all-gathered one
// layer ahead in the forward and again in the backward, each layer's gradients
// reduce-scattered as the backward leaves it, then a wait for all). `tokens` per rank.
ReplayProgram step_program(const Topology& topo, const std::string& strategy, double params, double tokens,
                           int layers, uint64_t bucket_bytes);

}  // namespace accel::sim
