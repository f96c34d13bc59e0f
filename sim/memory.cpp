// Per-rank device-memory budgets (torch-free). What charges them is above the simulator: the
// runtime's allocator hook (runtime/device_memory.cpp) charges every libtorch allocation made
// on a rank's thread.
#include <algorithm>
#include <mutex>
#include <sstream>

#include "sim/settings.h"
#include "sim/world.h"

namespace accel::sim {

void MemoryBudget::Pool::charge(int rank, uint64_t bytes) {
  uint64_t& cur = current.at(rank);
  cur += bytes;
  peak[rank] = std::max(peak[rank], cur);
}

void MemoryBudget::Pool::release(int rank, uint64_t bytes) {
  uint64_t& cur = current.at(rank);
  cur -= std::min(cur, bytes);
}

bool MemoryBudget::try_charge(int rank, uint64_t bytes, std::string* why) {
  std::lock_guard<std::mutex> lk(mu_);
  if (!device_.fits(rank, bytes)) {
    if (why) {
      *why = cuda_oom_message(bytes, gpus_per_node_ > 0 ? rank % gpus_per_node_ : rank, device_.capacity,
                              device_.current[rank], rank, device_.peak[rank]);
    }
    return false;
  }
  device_.charge(rank, bytes);
  return true;
}

void MemoryBudget::release(int rank, uint64_t bytes) {
  std::lock_guard<std::mutex> lk(mu_);
  device_.release(rank, bytes);
}

uint64_t MemoryBudget::current(int rank) const {
  std::lock_guard<std::mutex> lk(mu_);
  return device_.current.at(rank);
}

uint64_t MemoryBudget::peak(int rank) const {
  std::lock_guard<std::mutex> lk(mu_);
  return device_.peak.at(rank);
}

void MemoryBudget::reset_peaks() {
  std::lock_guard<std::mutex> lk(mu_);
  device_.peak = device_.current;
  host_.peak = host_.current;
}

bool MemoryBudget::try_charge_host(int rank, uint64_t bytes, std::string* why) {
  std::lock_guard<std::mutex> lk(mu_);
  if (!host_.fits(rank, bytes)) {
    if (why) {
      const uint64_t cap = host_.capacity, cur = host_.current[rank];
      std::ostringstream os;
      os << "host out of memory (simulated): rank " << rank << " tried to allocate " << format_bytes(bytes)
         << " of host memory for offloaded optimizer state or weights; " << format_bytes(cap) << " per rank, "
         << format_bytes(cur) << " already allocated, " << format_bytes(cap - cur) << " free";
      *why = os.str();
    }
    return false;
  }
  host_.charge(rank, bytes);
  return true;
}

void MemoryBudget::release_host(int rank, uint64_t bytes) {
  std::lock_guard<std::mutex> lk(mu_);
  host_.release(rank, bytes);
}

uint64_t MemoryBudget::host_current(int rank) const {
  std::lock_guard<std::mutex> lk(mu_);
  return host_.current.at(rank);
}

uint64_t MemoryBudget::host_peak(int rank) const {
  std::lock_guard<std::mutex> lk(mu_);
  return host_.peak.at(rank);
}

}  // namespace accel::sim
