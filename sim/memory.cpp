// Per-rank device-memory budgets: libtorch's CPU allocator is wrapped so that every tensor
// allocated on a simulated rank's thread is charged to that rank, and released from it
// when freed (whichever thread frees it). Also the sizes' text form (parse_bytes,
// format_bytes).
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

uint64_t parse_bytes(const std::string& text, const char* what) {
  // digits, an optional fraction, optional spaces, an optional unit; nothing else
  auto refuse = [&](const std::string& why) {
    fail(Status::InvalidArgument, what, " '", text, "' ", why,
         " (a positive number and a unit: 64MiB, 1.5GiB, 80GB, 1000000; units B, KiB, MiB, GiB, TiB, KB, MB, GB, TB)");
  };
  size_t i = 0;
  while (i < text.size() && std::isdigit(static_cast<unsigned char>(text[i]))) ++i;
  const size_t int_digits = i;
  size_t frac_digits = 0;
  if (i < text.size() && text[i] == '.') {
    ++i;
    while (i < text.size() && std::isdigit(static_cast<unsigned char>(text[i]))) ++i, ++frac_digits;
    if (frac_digits == 0) refuse("is not a size");
  }
  if (int_digits == 0) refuse("is not a size");
  const std::string number = text.substr(0, i);
  while (i < text.size() && text[i] == ' ') ++i;
  const std::string unit = text.substr(i);
  static const std::map<std::string, double> units = {
      {"", 1},           {"B", 1},         {"KiB", 1024.0},    {"MiB", 1048576.0}, {"GiB", 1073741824.0},
      {"TiB", 1099511627776.0}, {"KB", 1e3}, {"MB", 1e6},     {"GB", 1e9},        {"TB", 1e12},
      {"K", 1024.0},     {"M", 1048576.0}, {"G", 1073741824.0}};
  auto it = units.find(unit);
  if (it == units.end()) refuse("has an unknown unit '" + unit + "'");
  const double bytes = std::strtod(number.c_str(), nullptr) * it->second;  // digits only: strtod cannot fail
  if (!(bytes < 18446744073709551616.0)) refuse("is too large (at most 16 EiB)");
  const uint64_t out = static_cast<uint64_t>(bytes + 0.5);
  if (out == 0) refuse("is zero (for no limit pass no size at all)");
  return out;
}

std::string format_bytes(uint64_t b) {
  char buf[64];
  if (b >= (1ull << 30))
    std::snprintf(buf, sizeof buf, "%.2f GiB", static_cast<double>(b) / (1ull << 30));
  else if (b >= (1ull << 20))
    std::snprintf(buf, sizeof buf, "%.2f MiB", static_cast<double>(b) / (1ull << 20));
  else if (b >= 1024)
    std::snprintf(buf, sizeof buf, "%.2f KiB", static_cast<double>(b) / 1024.0);
  else
    std::snprintf(buf, sizeof buf, "%llu bytes", static_cast<unsigned long long>(b));
  return buf;
}

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
