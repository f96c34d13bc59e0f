// The simulator's settings, read once for every door into a simulated world (settings.h).
#include "sim/settings.h"

#include <cctype>
#include <cstdio>

#include "base/status.h"
#include "base/text.h"

namespace accel::sim {

Settings parse_settings(const SettingsText& t, const SettingNames& names) {
  Settings s;
  try {
    s.topology = topology_preset(t.topology);
  } catch (const Error& e) {
    if (!names.prefix_topology_errors) throw;
    throw Error(e.status(), names.topology + ": " + e.what());
  }
  if (t.world_size >= 0) {
    const int64_t gpus = static_cast<int64_t>(s.topology.nodes) * s.topology.gpus_per_node;
    ACCEL_CHECK(t.world_size >= 1 && t.world_size <= gpus, Status::InvalidArgument, names.world_size,
                " must be in [1, ", gpus, "] (the GPUs of ", names.topology, " '", t.topology,
                "'; e.g. \"4x8xH100-IB\" has 32), got ", t.world_size);
  }
  // a budget: a size, or "unlimited" (any case) for none
  auto budget = [](const std::string& given, const std::string& name) -> uint64_t {
    std::string v = given;
    for (char& ch : v) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
    return v == "unlimited" ? 0 : text::parse_bytes(given, name.c_str());
  };
  // the device: the preset's GPU memory unless given
  s.device_capacity = t.device_memory ? budget(*t.device_memory, names.device_memory) : s.topology.gpu_memory;
  if (t.host_memory) s.host_capacity = budget(*t.host_memory, names.host_memory);
  if (!t.faults.empty()) {
    try {
      s.faults = parse_faults(t.faults, t.world_size > 0 ? t.world_size : 0);
    } catch (const Error& e) {
      // parse_faults says "faults: ..."; the caller's user wrote the list under another name
      std::string why = e.what();
      if (why.rfind("faults: ", 0) == 0) why.erase(0, 8);
      throw Error(e.status(), names.faults + ": " + why);
    }
  }
  return s;
}

namespace {
// PyTorch's format_size (c10/cuda/CUDACachingAllocator.cpp): bytes up to 1 KiB, then KiB,
// MiB and GiB with two decimals, each up to and including its unit's 1024.
std::string torch_size(uint64_t n) {
  char buf[64];
  if (n <= 1024)
    std::snprintf(buf, sizeof buf, "%llu bytes", static_cast<unsigned long long>(n));
  else if (n <= 1048576)
    std::snprintf(buf, sizeof buf, "%.2f KiB", static_cast<double>(n) / 1024.0);
  else if (n <= 1073741824ull)
    std::snprintf(buf, sizeof buf, "%.2f MiB", static_cast<double>(n) / 1048576.0);
  else
    std::snprintf(buf, sizeof buf, "%.2f GiB", static_cast<double>(n) / 1073741824.0);
  return buf;
}
}  // namespace

std::string cuda_oom_message(uint64_t bytes, int device, uint64_t capacity, uint64_t in_use, int rank, uint64_t peak) {
  const uint64_t free = capacity > in_use ? capacity - in_use : 0;
  return "CUDA out of memory. Tried to allocate " + torch_size(bytes) + ". GPU " + std::to_string(device) +
         " has a total capacity of " + torch_size(capacity) + " of which " + torch_size(free) +
         " is free. Including non-PyTorch memory, this process has " + torch_size(in_use) +
         " memory in use. Of the allocated memory " + torch_size(in_use) +
         " is allocated by PyTorch, and 0 bytes is reserved by PyTorch but unallocated. (simulated: rank " +
         std::to_string(rank) + ", peak " + torch_size(peak) + ")";
}

}  // namespace accel::sim
