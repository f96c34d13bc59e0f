// The simulator: a world of N ranks inside one process, one thread per rank, with NCCL's
// semantics, per-rank device-memory budgets, a virtual clock driven by a cost model, a
// Chrome trace, and fault injection.
//
// Determinism ("maestro" scheduling, as SimGrid): the rank threads never run at the same
// time. One rank runs until it blocks on communication (waits on an operation that cannot
// complete yet, a barrier, a blocking call) or finishes; then the next runnable rank in
// rank order runs. So every side effect on libtorch's process-wide state (the default
// generator used by dropout and initialisers, the allocator) happens in the same order on
// every run, whatever the OS does with the threads. Reductions combine ranks in rank order.
// The collective engine itself may use several threads on disjoint slices of the data.
//
// Torch-free: the runtime hooks libtorch's CPU allocator to charge the budgets (runtime/device_memory.cpp).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "base/text.h"
#include "comm/communicator.h"
#include "sim/cost.h"
#include "sim/replay.h"
#include "sim/faults.h"

namespace accel::sim {

// Sizes as users type them ("16GiB", "80GB"): base/text.h.
using text::format_bytes;
using text::parse_bytes;

struct WorldOptions {
  int world_size = 1;
  uint64_t device_capacity = 0;      // bytes per rank; 0 = unlimited
  uint64_t host_capacity = 0;        // host memory per rank (offloaded state); 0 = unlimited
  std::string topology = "8xH100";   // a preset name (see sim/cost.h)
  double timeout_seconds = 10.0;     // no progress anywhere for this long: waiting ranks fail with Timeout
  std::vector<Fault> faults;
  int engine_threads = 0;            // threads for large reductions; 0 = the machine's cores
  bool record_trace = false;
  uint64_t noise_seed = 0;           // non-zero: random sleeps at scheduling points (determinism tests)
  // Collectives the ranks' communicators report as unsupported ("reduce_scatter", or
  // "reduce_scatter:bfloat16" for one element type): stands in for a backend that lacks
  // them (gloo has no bf16 reduce-scatter), to test that strategies refuse it at prepare.
  // Parsed when the World is made: an unknown collective or element type is InvalidArgument.
  std::vector<std::string> missing;
  // The algorithms collectives may run, in NCCL_ALGO's syntax ("Ring", "^NVLS"; sim/cost.h
  // AlgorithmFilter): the cost model picks among them, and reductions round in their order.
  // Empty: the NCCL_ALGO environment variable, as NCCL reads it; unset too: all.
  std::string algorithms;
  // Record each rank's computes, collectives and waits (sim/replay.h ReplayRecording), to
  // replay the run on another number of ranks; with program_path, World::run writes it there.
  bool record_program = false;
  std::string program_path;
};

// A simulated world as a user describes it (the C ABI's accel_sim_options; later `accel
// launch --backend sim`'s flags): sizes and faults as text. world_options() checks it (each
// error names the field) and makes the WorldOptions.
struct WorldSettings {
  int world_size = 2;
  std::string topology = "8xH100";  // a preset (sim/cost.h): world_size may not exceed its GPUs
  std::optional<std::string> device_memory;  // a size for parse_bytes or "unlimited"; none: the preset's GPU
  std::optional<std::string> host_memory;    // each rank's host memory (offload); none: unlimited
  double timeout_seconds = 60.0;
  std::string faults;               // parse_faults' syntax; empty: none
  int engine_threads = 0;
  bool record_trace = false;
};
WorldOptions world_options(const WorldSettings& settings);

struct RankReport {
  int rank = 0;
  Status status = Status::Ok;        // Ok, or why the rank's function failed
  std::string error;
  uint64_t peak_bytes = 0, current_bytes = 0;  // device memory
  uint64_t host_peak_bytes = 0, host_current_bytes = 0;  // host memory (offload, docs/memory.md)
  uint64_t host_transfer_bytes = 0;  // between the device and the host, both directions
  double host_transfer_seconds = 0;  // their time over the topology's host link (in virtual_seconds)
  double virtual_seconds = 0.0;      // the rank's clock at the end (compute + communication)
  uint64_t collectives = 0;          // collectives posted
  uint64_t bytes_sent = 0;           // bytes this rank put on the wire, per the algorithm's volume
};

struct RunReport {
  std::vector<RankReport> ranks;
  double predicted_seconds = 0.0;    // the slowest rank's virtual clock
  bool ok() const;
  std::string first_error() const;
};

class World;
struct Simulation;  // a World's internal state (sim/simulation.h)

// A simulated rank's communicator: NCCL's operations, and the virtual clock the runtime
// charges its estimated compute to (comm::ComputeClock), which real backends do not have.
class RankCommunicator : public comm::Communicator, public comm::ComputeClock {};

// What a rank's function receives.
class Rank {
 public:
  int rank() const;
  int size() const;
  RankCommunicator& comm();
  World& world();
  // Called by the runtime at every optimizer step; fault injection may kill the rank here.
  void notify_step(int64_t step);

 private:
  friend class World;
  Rank(World* w, int r) : world_(w), rank_(r) {}
  World* world_;
  int rank_;
};

class World {
 public:
  explicit World(WorldOptions opts);
  ~World();
  World(const World&) = delete;
  World& operator=(const World&) = delete;

  const WorldOptions& options() const;
  const Topology& topology() const;
  // The last run's recording (WorldOptions::record_program; empty programs otherwise).
  const ReplayRecording& recording() const;

  // Runs fn once per rank, each in its own thread (maestro scheduling), and returns when all
  // have finished. A function that throws marks its rank failed; the other ranks' pending
  // and later operations with it fail with RemoteError. Never hangs on mismatched or
  // missing collectives: they fail on every rank involved, naming the ranks and calls.
  RunReport run(const std::function<void(Rank&)>& fn);

  // The last run's timeline as Chrome trace JSON (chrome://tracing, ui.perfetto.dev);
  // empty events unless options().record_trace.
  std::string trace_json() const;
  void write_trace(const std::string& path) const;

  // Device-memory accounting per rank. Shared with the allocations themselves, which may
  // outlive the world (a tensor freed later is still released from its rank's count).
  const std::shared_ptr<class MemoryBudget>& budget() const;
  uint64_t current_bytes(int rank) const;
  uint64_t peak_bytes(int rank) const;

 private:
  friend class Rank;
  std::unique_ptr<Simulation> sim_;
};

class MemoryBudget {
 public:
  // `gpus_per_node`: a rank's GPU index on its node is rank % gpus_per_node (the errors' "GPU N").
  MemoryBudget(int ranks, uint64_t capacity, uint64_t host_capacity = 0, int gpus_per_node = 8)
      : device_{capacity, std::vector<uint64_t>(ranks, 0), std::vector<uint64_t>(ranks, 0)},
        host_{host_capacity, std::vector<uint64_t>(ranks, 0), std::vector<uint64_t>(ranks, 0)},
        gpus_per_node_(gpus_per_node) {}
  // Charges `bytes` to `rank`; over capacity, charges nothing and returns false with PyTorch
  // 2.x's CUDA out-of-memory message in *why (cuda_oom_message, sim/settings.h; the runtime
  // throws it as libtorch's OutOfMemoryError: runtime/device_memory.cpp).
  bool try_charge(int rank, uint64_t bytes, std::string* why);
  void release(int rank, uint64_t bytes);
  uint64_t current(int rank) const;
  uint64_t peak(int rank) const;
  uint64_t capacity() const { return device_.capacity; }
  void reset_peaks();  // peak := current, at the start of a run
  // The rank's host memory (optimizer state and master weights offloaded to it: the runtime
  // charges what it allocates in a device_memory::HostScope), counted apart from the device's;
  // over host_capacity (0: none) a charge fails with a host out-of-memory message.
  bool try_charge_host(int rank, uint64_t bytes, std::string* why);
  void release_host(int rank, uint64_t bytes);
  uint64_t host_current(int rank) const;
  uint64_t host_peak(int rank) const;

 private:
  // One kind of memory: its capacity per rank (0: none), each rank's bytes now and at peak.
  struct Pool {
    uint64_t capacity;
    std::vector<uint64_t> current, peak;
    bool fits(int rank, uint64_t bytes) const { return !capacity || current.at(rank) + bytes <= capacity; }
    void charge(int rank, uint64_t bytes);
    void release(int rank, uint64_t bytes);
  };
  mutable std::mutex mu_;
  Pool device_, host_;
  int gpus_per_node_;
};

// The rank the calling thread runs as, and its world; -1 / nullptr outside a simulated rank.
int current_rank();
World* current_world();

}  // namespace accel::sim
