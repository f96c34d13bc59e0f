// Per-rank device-memory budgets (torch-free). What charges them is above the simulator: the
// runtime's allocator hook (runtime/device_memory.cpp) charges every libtorch allocation made
// on a rank's thread.
#include <algorithm>
#include <mutex>
#include <sstream>

#include "sim/world.h"

namespace accel::sim {

bool MemoryBudget::try_charge(int rank, uint64_t bytes, std::string* why) {
  std::lock_guard<std::mutex> lk(mu_);
  uint64_t& cur = current_.at(rank);
  if (capacity_ && cur + bytes > capacity_) {
    if (why) {
      std::ostringstream os;
      os << "CUDA out of memory (simulated). Tried to allocate " << format_bytes(bytes) << " (rank " << rank << "; "
         << format_bytes(capacity_) << " total capacity; " << format_bytes(cur) << " already allocated; "
         << format_bytes(capacity_ - cur) << " free; peak " << format_bytes(peak_[rank]) << ")";
      *why = os.str();
    }
    return false;
  }
  cur += bytes;
  peak_[rank] = std::max(peak_[rank], cur);
  return true;
}

void MemoryBudget::release(int rank, uint64_t bytes) {
  std::lock_guard<std::mutex> lk(mu_);
  uint64_t& cur = current_.at(rank);
  cur -= std::min(cur, bytes);
}

uint64_t MemoryBudget::current(int rank) const {
  std::lock_guard<std::mutex> lk(mu_);
  return current_.at(rank);
}

uint64_t MemoryBudget::peak(int rank) const {
  std::lock_guard<std::mutex> lk(mu_);
  return peak_.at(rank);
}

void MemoryBudget::reset_peaks() {
  std::lock_guard<std::mutex> lk(mu_);
  peak_ = current_;
  host_peak_ = host_current_;
}

bool MemoryBudget::try_charge_host(int rank, uint64_t bytes, std::string* why) {
  std::lock_guard<std::mutex> lk(mu_);
  uint64_t& cur = host_current_.at(rank);
  if (host_capacity_ && cur + bytes > host_capacity_) {
    if (why) {
      std::ostringstream os;
      os << "host out of memory (simulated): rank " << rank << " tried to allocate " << format_bytes(bytes)
         << " of host memory for offloaded optimizer state or weights; " << format_bytes(host_capacity_)
         << " per rank, " << format_bytes(cur) << " already allocated, " << format_bytes(host_capacity_ - cur)
         << " free";
      *why = os.str();
    }
    return false;
  }
  cur += bytes;
  host_peak_[rank] = std::max(host_peak_[rank], cur);
  return true;
}

void MemoryBudget::release_host(int rank, uint64_t bytes) {
  std::lock_guard<std::mutex> lk(mu_);
  uint64_t& cur = host_current_.at(rank);
  cur -= std::min(cur, bytes);
}

uint64_t MemoryBudget::host_current(int rank) const {
  std::lock_guard<std::mutex> lk(mu_);
  return host_current_.at(rank);
}

uint64_t MemoryBudget::host_peak(int rank) const {
  std::lock_guard<std::mutex> lk(mu_);
  return host_peak_.at(rank);
}

}  // namespace accel::sim
