// Shared by tests/sim/test_sim.cpp and tests/strategy/test_strategy.cpp.
#pragma once

#include "runtime/device_memory.h"
#include "sim/world.h"

namespace accel::sim {

// The worlds of these tests allocate libtorch tensors on their ranks without a context: the
// runtime's allocator hook, which charges them to the ranks' budgets, is installed first (a
// context on a simulated rank installs it itself).
inline WorldOptions world(int n, double timeout = 5.0) {
  accel::device_memory::install();
  WorldOptions o;
  o.world_size = n;
  o.timeout_seconds = timeout;
  return o;
}

}  // namespace accel::sim
