// Per-rank device-memory budgets: libtorch's CPU allocator is wrapped so that every tensor
// allocated on a simulated rank's thread is charged to that rank, and released from it
// when freed (whichever thread frees it).
#include <c10/core/Allocator.h>
#include <c10/core/CPUAllocator.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <cstring>
#include <mutex>
#include <sstream>

#include "runtime/torch_version.h"
#include "sim/world.h"

namespace accel::sim {

void MemoryBudget::charge(int rank, uint64_t bytes) {
  std::lock_guard<std::mutex> lk(mu_);
  uint64_t& cur = current_.at(rank);
  if (capacity_ && cur + bytes > capacity_) {
    std::ostringstream os;
    os << "CUDA out of memory (simulated). Tried to allocate " << format_bytes(bytes) << " (rank " << rank << "; "
       << format_bytes(capacity_) << " total capacity; " << format_bytes(cur) << " already allocated; "
       << format_bytes(capacity_ - cur) << " free; peak " << format_bytes(peak_[rank]) << ")";
    TORCH_CHECK_WITH(OutOfMemoryError, false, os.str());
  }
  cur += bytes;
  peak_[rank] = std::max(peak_[rank], cur);
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

namespace {

#if ACCEL_TORCH_AT_LEAST(2, 3)
#define ACCEL_ALLOC_CONST
#else
#define ACCEL_ALLOC_CONST const
#endif

struct Charged {
  c10::DataPtr inner;
  std::shared_ptr<MemoryBudget> budget;
  int rank;
  uint64_t bytes;
};

void release_charged(void* ctx) {
  auto* c = static_cast<Charged*>(ctx);
  c->budget->release(c->rank, c->bytes);
  delete c;  // frees the memory through the wrapped allocator's deleter
}

class BudgetAllocator final : public c10::Allocator {
 public:
  explicit BudgetAllocator(c10::Allocator* base) : base_(base) {}

  c10::DataPtr allocate(size_t n) ACCEL_ALLOC_CONST override {
    World* w = current_world();
    const int r = current_rank();
    if (w == nullptr || r < 0 || n == 0) return base_->allocate(n);
    std::shared_ptr<MemoryBudget> budget = w->budget();
    budget->charge(r, n);
    c10::DataPtr inner;
    try {
      inner = base_->allocate(n);
    } catch (...) {
      budget->release(r, n);
      throw;
    }
    void* data = inner.get();
    const c10::Device device = inner.device();
    auto* ctx = new Charged{std::move(inner), std::move(budget), r, n};
    return c10::DataPtr(data, ctx, &release_charged, device);
  }

#if ACCEL_TORCH_AT_LEAST(2, 3)
  void copy_data(void* dest, const void* src, std::size_t count) const override { std::memcpy(dest, src, count); }
#endif

 private:
  c10::Allocator* base_;
};

}  // namespace

void install_allocator_hook() {
  static std::once_flag once;
  std::call_once(once, [] {
    static BudgetAllocator alloc(c10::GetCPUAllocator());
    c10::SetCPUAllocator(&alloc, /*priority=*/200);
  });
}

}  // namespace accel::sim
