// Per-rank device-memory budgets: libtorch's CPU allocator is wrapped so that every tensor
// allocated on a simulated rank's thread is charged to that rank, and released from it
// when freed (whichever thread frees it).
#include <c10/core/Allocator.h>
#include <c10/core/CPUAllocator.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <sstream>
#include <unordered_map>

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

// The context of a charged allocation is its data pointer (libtorch's raw_allocate, used by
// oneDNN's bf16 kernels, requires that); the charge is found in this table.
std::mutex g_charged_mu;
c10::DeleterFnPtr g_base_raw_deleter = nullptr;  // the wrapped allocator's, for its own pointers
std::unordered_map<void*, Charged*>& charged_table() {
  static auto* t = new std::unordered_map<void*, Charged*>();  // outlives every tensor
  return *t;
}

void release_charged(void* data) {
  Charged* c = nullptr;
  {
    std::lock_guard<std::mutex> lk(g_charged_mu);
    auto& t = charged_table();
    auto it = t.find(data);
    if (it == t.end()) {  // an allocation made off the simulated ranks (raw_deallocate)
      if (g_base_raw_deleter) g_base_raw_deleter(data);
      return;
    }
    c = it->second;
    t.erase(it);
  }
  c->budget->release(c->rank, c->bytes);
  delete c;  // frees the memory through the wrapped allocator's deleter
}

class BudgetAllocator final : public c10::Allocator {
 public:
  explicit BudgetAllocator(c10::Allocator* base) : base_(base) { g_base_raw_deleter = base->raw_deleter(); }

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
    {
      std::lock_guard<std::mutex> lk(g_charged_mu);
      charged_table()[data] = ctx;
    }
    return c10::DataPtr(data, data, &release_charged, device);
  }

  // raw_deallocate: charged pointers are released from their rank, others go to the base
  c10::DeleterFnPtr raw_deleter() const override { return g_base_raw_deleter ? &release_charged : nullptr; }

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
