// The simulated devices' memory as libtorch sees it (device_memory.h): libtorch's CPU
// allocator is wrapped so that every tensor allocated on a simulated rank's thread is charged
// to that rank's budget (sim::MemoryBudget), and released from it when freed (whichever thread
// frees it); in a process that is one rank of a launched simulated world, to the simulated
// NCCL library's per-process budget.
#include "runtime/device_memory.h"

#include <c10/core/Allocator.h>
#include <c10/core/CPUAllocator.h>
#include <c10/util/Exception.h>

#include <atomic>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

#include "runtime/compat.h"
#include "sim/world.h"

namespace accel::device_memory {

namespace {

struct Charged {
  c10::DataPtr inner;
  std::shared_ptr<sim::MemoryBudget> budget;  // null: charged to the process's hooks
  int rank;
  uint64_t bytes;
  bool host = false;  // charged to the rank's host memory (a HostScope)
};

thread_local bool t_host = false;  // a HostScope lives on this thread

// The multi-process simulator's budget (set_process_hooks).
std::atomic<int (*)(unsigned long long, char*, size_t)> g_process_charge{nullptr};
std::atomic<void (*)(unsigned long long)> g_process_release{nullptr};

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
  if (c->budget && c->host)
    c->budget->release_host(c->rank, c->bytes);
  else if (c->budget)
    c->budget->release(c->rank, c->bytes);
  else if (auto release = g_process_release.load())
    release(c->bytes);
  delete c;  // frees the memory through the wrapped allocator's deleter
}

class BudgetAllocator final : public c10::Allocator {
 public:
  explicit BudgetAllocator(c10::Allocator* base) : base_(base) { g_base_raw_deleter = base->raw_deleter(); }

  c10::DataPtr allocate(size_t n) ACCEL_ALLOCATE_CONST override {
    sim::World* w = sim::current_world();
    const int r = sim::current_rank();
    auto process_charge = g_process_charge.load();
    if (n == 0 || ((w == nullptr || r < 0) && !process_charge)) return base_->allocate(n);
    const bool host = t_host;
    if (host && (w == nullptr || r < 0)) return base_->allocate(n);  // a launched rank: host memory is not counted
    std::shared_ptr<sim::MemoryBudget> budget;
    if (w != nullptr && r >= 0) {
      budget = w->budget();
      std::string why;
      TORCH_CHECK_WITH(OutOfMemoryError, host ? budget->try_charge_host(r, n, &why) : budget->try_charge(r, n, &why),
                       why);
    } else {
      char msg[512] = "";
      TORCH_CHECK_WITH(OutOfMemoryError, process_charge(n, msg, sizeof msg) == 0, msg);
    }
    c10::DataPtr inner;
    try {
      inner = base_->allocate(n);
    } catch (...) {
      if (budget && host)
        budget->release_host(r, n);
      else if (budget)
        budget->release(r, n);
      else if (auto release = g_process_release.load())
        release(n);
      throw;
    }
    void* data = inner.get();
    const c10::Device device = inner.device();
    auto* ctx = new Charged{std::move(inner), std::move(budget), r, n, host};
    {
      std::lock_guard<std::mutex> lk(g_charged_mu);
      charged_table()[data] = ctx;
    }
    return c10::DataPtr(data, data, &release_charged, device);
  }

  // raw_deallocate: charged pointers are released from their rank, others go to the base
  c10::DeleterFnPtr raw_deleter() const override { return g_base_raw_deleter ? &release_charged : nullptr; }

  ACCEL_ALLOCATOR_COPY_DATA

 private:
  c10::Allocator* base_;
};

}  // namespace

void set_process_hooks(int (*charge)(unsigned long long, char*, size_t), void (*release)(unsigned long long)) {
  install();
  g_process_release = release;
  g_process_charge = charge;
}

HostScope::HostScope(bool host) : prev_(t_host) { t_host = host; }
HostScope::~HostScope() { t_host = prev_; }

void install() {
  static std::once_flag once;
  std::call_once(once, [] {
    static BudgetAllocator alloc(c10::GetCPUAllocator());
    c10::SetCPUAllocator(&alloc, /*priority=*/200);
  });
}

}  // namespace accel::device_memory
