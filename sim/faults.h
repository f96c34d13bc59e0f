// Fault injection: the faults a user asks for (parse_faults), armed on their ranks, and where
// they fire. Torch-free.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace accel::sim {

struct Fault {
  enum class Kind { KillAtCollective, KillAtStep, Delay };
  Kind kind = Kind::KillAtCollective;
  int rank = 0;
  int64_t at = 0;        // the rank's k-th collective (1-based) or its step number
  double seconds = 0.0;  // Delay: virtual seconds added before each of the rank's operations
};

// Parses "kill:3@collective:5, kill:1@step:10, delay:2:0.005": items separated by commas,
// spaces around an item ignored, an empty item refused (the grammar: faults.cpp, docs/simulator.md).
// With world_size > 0, a RANK outside [0, world_size) is refused with the item quoted.
std::vector<Fault> parse_faults(const std::string& spec, int world_size = 0);

// One rank's armed faults.
struct RankFaults {
  double delay = 0.0;              // Delay faults: virtual seconds before each operation
  int64_t kill_at_collective = 0;  // > 0: the rank dies posting its collective of this number
  int64_t kill_at_step = -1;       // >= 1: the rank dies starting this optimizer step

  // Throw CommError(SystemError) where the rank is to be killed.
  void at_collective(int rank, uint64_t seq) const;
  void at_step(int rank, int64_t step) const;
};

// The faults of each of `world_size` ranks (every fault's rank is below world_size).
std::vector<RankFaults> arm_faults(const std::vector<Fault>& faults, int world_size);

}  // namespace accel::sim
