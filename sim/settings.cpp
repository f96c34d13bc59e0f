// The simulator's settings, read once for every door into a simulated world (settings.h).
#include "sim/settings.h"

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
  if (t.device_memory) s.device_capacity = text::parse_bytes(*t.device_memory, names.device_memory.c_str());
  if (t.host_memory) s.host_capacity = text::parse_bytes(*t.host_memory, names.host_memory.c_str());
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

}  // namespace accel::sim
