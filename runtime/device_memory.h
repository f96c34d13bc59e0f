// The simulated devices' memory as libtorch sees it: the one bridge between libtorch's
// allocator and the simulator's budgets (the simulator itself is torch-free).
#pragma once

#include <cstddef>

namespace accel::device_memory {

// Installs (once per process) the CPU-allocator hook that charges every libtorch allocation
// made on a simulated rank's thread to that rank's budget (sim::World::budget()): an
// allocation over the budget throws c10::OutOfMemoryError with a CUDA-shaped message. Off the
// ranks, allocations pass through. The runtime installs it when a context joins a simulated
// rank or runs a simulated world (runtime/world.cpp, Accelerator).
void install();

// A process that is one simulated rank (the multi-process simulator, ACCEL_BACKEND=sim):
// from now on every libtorch CPU allocation of the process is charged through `charge`
// (0, or non-zero with a CUDA-shaped out-of-memory message written into its buffer) and
// released through `release`: the simulated library's per-process budget. Installs the hook.
void set_process_hooks(int (*charge)(unsigned long long bytes, char* msg, size_t len),
                       void (*release)(unsigned long long bytes));

// While one lives, the libtorch CPU allocations of this thread are host memory, not the
// device's: offloaded optimizer state and master weights (docs/memory.md). On a simulated
// rank they are charged to its host budget (sim::MemoryBudget::try_charge_host; over it:
// OutOfMemoryError naming host memory); a process of a launched simulated world does not
// count them (its library has one budget). Scopes nest: HostScope(false) inside one makes
// this thread's allocations device memory again until it ends (an offloaded step's copy back
// and its collectives).
class HostScope {
 public:
  explicit HostScope(bool host = true);
  ~HostScope();
  HostScope(const HostScope&) = delete;
  HostScope& operator=(const HostScope&) = delete;

 private:
  bool prev_;
};

}  // namespace accel::device_memory
