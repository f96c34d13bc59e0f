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
}

}  // namespace accel::sim
