// Fault injection: the faults of WorldOptions (parsed by parse_faults, sim/world.h) armed on
// their ranks, and where they fire. Torch-free.
#pragma once

#include <cstdint>
#include <vector>

#include "sim/world.h"

namespace accel::sim {

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
